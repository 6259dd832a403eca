"""What every ``Collective`` adapter shares: traffic accounting.

The port itself is ``nnx_core.ports.Collective``; agreement (``agree``) is derived from it by
``nnx_core.agreement`` and is not an adapter's business.
"""

from __future__ import annotations

import attrs


@attrs.define
class Traffic:
    """Collective calls and payload bytes, by kind (what the bench reports per step)."""

    calls: dict[str, int] = attrs.field(factory=dict)
    bytes: dict[str, int] = attrs.field(factory=dict)

    def add(self, kind: str, nbytes: int) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        self.bytes[kind] = self.bytes.get(kind, 0) + int(nbytes)

    def reset(self) -> None:
        self.calls.clear()
        self.bytes.clear()
