"""The ``Storage`` contract as a test kit: hypothesis state machines your adapter subclasses.

Needs hypothesis: ``pip install "nnx[testing]"``. The machines are the ones that prove NNx's own
stores (``MemoryStorage``, ``FileStorage``, ``FsspecStorage``); subclass one, return your adapter
from ``make_storage()``, and hand the class to pytest as hypothesis' stateful tests go
(``TestX = MyMachine.TestCase``, or ``run_state_machine_as_test(MyMachine, settings=...)``).

What runs against **any** adapter:

* ``StorageContract`` — agreement with ``ReferenceStore`` (every port method, paths and kinds as
  POSIX resolves them), blob streaming and digests, atomicity as readers see it (nothing partial
  or temporary visible half-way through a write; a failing producer leaves nothing), no
  temporaries between calls, lease exclusivity;
* ``CommitContract`` (eager history) and ``JournalContract`` (history journal) — the commit
  protocol's invariants (history ≤ LAST, BEST ≤ LAST, every blob verifies, no temporary visible,
  a restarted writer recovers) after the writer is killed before any port call or any port call
  fails with ENOSPC/EIO.

What needs the adapter's cooperation — **crash injection** (``CrashInjection``: count operations,
``crash_after``, ``fail_on``, ``reopen``; ``MemoryStorage`` offers it): the same two commit
machines then also cut the power after every primitive operation and fail every operation
inside the adapter's calls. That is what proves ``write`` atomic and durable under a crash; an
adapter without the hooks is checked only at its port boundary, and the kit says so in
``EXERCISED`` (no ``power cuts`` entries for it).

``contract_settings()`` gives the example counts NNx's CI uses (``NNX_DEEP=1``: many more;
``NNX_MAX_EXAMPLES=N`` caps them, for a second run of the same machines that only has to show they
run somewhere else, as CI's torch-free ``make core-check``).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

from nnx_adapters.testing.commit import EXERCISED, CommitContract, JournalContract, Outcome, Trial, observe
from nnx_adapters.testing.faults import CrashInjection, PortFaults, WriterKilled
from nnx_adapters.testing.model import ReferenceStore, visible_tree
from nnx_adapters.testing.storage import StorageContract


def contract_settings(*, examples: int = 25, steps: int = 5, deep_examples: int = 300, deep_steps: int = 8) -> settings:
    """Hypothesis settings for a contract machine: bounded by default, larger with ``NNX_DEEP=1``,
    at most ``NNX_MAX_EXAMPLES`` examples where that is set."""
    deep = os.environ.get("NNX_DEEP") == "1"
    cap = int(os.environ.get("NNX_MAX_EXAMPLES") or 0)
    count = deep_examples if deep else examples
    return settings(
        max_examples=min(count, cap) if cap > 0 else count,
        stateful_step_count=deep_steps if deep else steps,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


__all__ = [
    "EXERCISED", "CommitContract", "CrashInjection", "JournalContract", "Outcome", "PortFaults", "ReferenceStore",
    "StorageContract", "Trial", "WriterKilled", "contract_settings", "observe", "visible_tree",
]
