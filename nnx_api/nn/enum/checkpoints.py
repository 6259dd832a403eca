"""``nnx.nn.enum.checkpoints``: ``Checkpoints``."""

from nnx_api.config.enums import Checkpoints, phase_tag

__all__ = ["Checkpoints", "phase_tag"]
