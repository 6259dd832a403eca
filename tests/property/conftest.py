"""``NNX_REPORT=1``: after the run, print how many trials of each kind the storage machines
exercised (the counts docs/reliability.md quotes). Each machine test asserts its own kinds ran."""

from __future__ import annotations

import os

from nnx_adapters.testing import EXERCISED


def pytest_terminal_summary(terminalreporter):
    if os.environ.get("NNX_REPORT") == "1" and EXERCISED:
        terminalreporter.section("trials exercised by the storage machines")
        for kind, n in sorted(EXERCISED.items()):
            terminalreporter.write_line(f"{kind}: {n}")
