"""``CompileSpec``: opt-in ``torch.compile`` of the built-in default step's forward.

``model.train(params, compile=CompileSpec())`` compiles the forward of the built-in FP32 default
step and of the built-in in-fit validation of a built-in net (``Nets.FEED_FWD``, ``Nets.CONV``);
the compiled wrapper is never assigned to ``model.net``, so weights and checkpoints keep their
eager keys. What happened is the run's ``CompileRecord`` (``run.compile``). The spec is a
runtime option: it never enters the run id.

>>> CompileSpec(backend="eager").on_failure
'error'
"""

from __future__ import annotations

import dataclasses

from nnx_core.convert import OMIT
from nnx_core.errors import ParamsError
from nnx_api.config.base import Params, flag, one_of, optional, param, text, typed_init

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
"""``torch.compile``'s modes (``None``: the backend's default)."""


@typed_init
@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CompileSpec(Params):
    """How ``train(compile=...)`` calls ``torch.compile``: ``backend`` (a registered backend name:
    ``"inductor"``, ``"aot_eager"``, ``"eager"``, ...), ``mode`` (one of ``COMPILE_MODES`` or
    None), ``fullgraph`` (a graph break is an error), ``dynamic`` (None: torch decides; True /
    False: dynamic or static shapes). ``on_failure``: ``"error"`` stops the run with a
    ``CompileError`` when compilation fails; ``"eager"`` warns (``RuntimeWarning``), records status
    ``"eager"`` and the reason, and trains with the eager forward. ``mode`` is an inductor option,
    refused with another backend; ``state()`` leaves out the fields at their defaults."""

    backend: str = param("inductor", check=text(), state=OMIT)
    mode: str | None = param(None, check=optional(one_of(*COMPILE_MODES)), state=OMIT)
    fullgraph: bool = param(False, check=flag(), state=OMIT)
    dynamic: bool | None = param(None, check=optional(flag()), state=OMIT)
    on_failure: str = param("error", check=one_of("error", "eager"), state=OMIT)

    def _check(self) -> None:
        if self.mode is not None and self.backend != "inductor":
            raise ParamsError("CompileSpec.mode", f"is an option of the inductor backend only, not of {self.backend!r}; "
                              "leave mode=None, or use backend='inductor'")
