"""``CompileRecord``: what ``train(compile=CompileSpec(...))`` asked for and what took effect, on this attempt.

The request is ``backend``, ``options`` (``mode``, ``fullgraph``, ``dynamic``) and ``on_failure``,
served by ``torch_version``. ``effective`` moves ``pending`` (wrapped, no compiled forward has run)
→ ``compiled`` (the compiled forward ran), or → ``eager`` (compilation failed and
``on_failure="eager"`` restarted that forward eagerly) or ``failed`` (it failed and
``on_failure="error"`` stopped the run). ``graph_breaks`` counts the graph breaks the compiler
reported while compiling the forward (None until a call compiled something), so ``capture`` is
``"full"`` (none), ``"partial"`` (some) or None (unknown). ``restart`` says where and why
compilation stopped: the ``phase`` (``"train"`` / ``"validation"``), ``epoch`` and ``batch`` of the
call, the ``stage`` (``"wrap"``: ``torch.compile`` itself raised; ``"forward"``: a compiled call),
the ``error``'s class name and its ``message``. ``forwards`` names the forwards the run compiles
(``"train_forward"``, ``"val_forward"``).

The record (:meth:`CompileRecord.record`, a plain YAML-safe mapping) lives in the run's
``metadata.yaml``, its checkpoints' payloads and ``attempt.json`` (each only when compilation was
asked for), never in the run id. ``from_record`` also reads the layout earlier releases wrote
(``status`` / ``capture`` as a list of forwards / ``reason``).

>>> CompileRecord("inductor", on_failure="eager", effective="eager").record()["effective"]
'eager'
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from nnx_core.validate import check_choice

PENDING, COMPILED, EAGER, FAILED = "pending", "compiled", "eager", "failed"
STATES = (PENDING, COMPILED, EAGER, FAILED)
"""Every ``CompileRecord.effective``."""
FULL, PARTIAL = "full", "partial"
OPTION_NAMES = ("mode", "fullgraph", "dynamic")
"""The ``torch.compile`` options a record keeps."""


def _options(value: Mapping[str, Any] | None) -> dict[str, Any]:
    given = dict(value or {})
    return {**dict.fromkeys(OPTION_NAMES), "fullgraph": False, **given}


def _restart(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


@attrs.frozen
class CompileRecord:
    """One attempt's compilation (module docstring): the request (``backend``, ``options``,
    ``on_failure``, ``torch_version``), what took effect (``effective``, ``graph_breaks``), where
    and why it stopped (``restart``) and the forwards compiled (``forwards``). Hashable; the
    mappings ``options`` and ``restart`` take no part in the hash."""

    backend: str
    options: Mapping[str, Any] = attrs.field(factory=dict, converter=_options, hash=False)
    on_failure: str = "error"
    torch_version: str = ""
    effective: str = attrs.field(
        default=PENDING, validator=lambda _i, _a, v: check_choice("CompileRecord.effective", v, STATES))
    graph_breaks: int | None = None
    restart: Mapping[str, Any] | None = attrs.field(default=None, converter=_restart, hash=False)
    forwards: tuple[str, ...] = attrs.field(default=(), converter=tuple)

    @property
    def requested(self) -> bool:
        """Always True: a run has a record only when it asked for compilation."""
        return True

    @property
    def capture(self) -> str | None:
        """``"full"`` (no graph break), ``"partial"`` (some), or None before (or without) a call that compiled."""
        if self.graph_breaks is None:
            return None
        return FULL if self.graph_breaks == 0 else PARTIAL

    def record(self) -> dict[str, Any]:
        """The plain, YAML-safe record stored in metadata.yaml, checkpoints and attempt.json."""
        return {
            "requested": True, "backend": self.backend, "options": dict(self.options), "on_failure": self.on_failure,
            "torch_version": self.torch_version, "effective": self.effective, "graph_breaks": self.graph_breaks,
            "capture": self.capture, "restart": None if self.restart is None else dict(self.restart),
            "forwards": list(self.forwards),
        }

    def state(self) -> dict[str, Any]:
        """:meth:`record` (every record of this project has a ``state()``)."""
        return self.record()

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> CompileRecord:
        """Rebuild from :meth:`record`, or from the layout earlier releases wrote (module docstring)."""
        if "effective" not in record and "status" in record:
            return cls._from_earlier(record)
        breaks = record.get("graph_breaks")
        return cls(
            record["backend"], record.get("options") or {}, record.get("on_failure", "error"),
            str(record.get("torch_version", "")), record["effective"], None if breaks is None else int(breaks),
            record.get("restart"), tuple(record.get("forwards", ())),
        )

    @classmethod
    def _from_earlier(cls, record: Mapping[str, Any]) -> CompileRecord:
        options = {name: record[name] for name in OPTION_NAMES if name in record}
        if "fullgraph" in options:
            options["fullgraph"] = bool(options["fullgraph"])
        reason = record.get("reason")
        return cls(
            record["backend"], options, EAGER if record["status"] == EAGER else "error", "", record["status"],
            int(record.get("graph_breaks", 0)) if record["status"] == COMPILED else None,
            None if reason is None else {"message": reason}, tuple(record.get("capture", ())),
        )

    from_state = from_record

    @classmethod
    def coerce(cls, value: Any) -> CompileRecord | None:
        """A record from a record, a mapping (its :meth:`record`) or None."""
        if value is None or isinstance(value, CompileRecord):
            return value
        return cls.from_record(value)
