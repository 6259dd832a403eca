"""``nnx.components``: checkpointed components — state a run carries beside its weights.

A component is any object with ``component_spec() -> (name, version)``, ``component_state()``
(plain, ``torch.load(weights_only=True)``-safe data) and ``load_component_state(state)``;
``check_component_state(state)`` may list problems before anything is restored, and a class
attribute ``component_required = False`` makes it optional (it starts fresh when a checkpoint
has none). Pass extra ones as ``train(..., components=[...])``; callbacks and step functions
that implement the protocol are found by themselves. A stateful resume that cannot restore them
raises one ``ComponentRestoreError`` listing every problem, before anything is changed.
"""

from nnx_core.errors import ComponentRestoreError
from nnx_core.ports import Component as StatefulComponent
from nnx_core.resume import ResumeStatus

COMPONENT_STATE_VERSION = 1
"""Version of the ``{name: state}`` mapping checkpoints keep under ``"components"``."""

__all__ = ["COMPONENT_STATE_VERSION", "ComponentRestoreError", "ResumeStatus", "StatefulComponent"]
