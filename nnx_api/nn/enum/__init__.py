"""``nnx.nn.enum``: the enums, one module each (``nnx_api.nn.enum.nets``, ...)."""

from nnx_api.config.enums import Activations, Checkpoints, Devices, Losses, Nets, Optims, Schedulers

__all__ = ["Activations", "Checkpoints", "Devices", "Losses", "Nets", "Optims", "Schedulers"]
