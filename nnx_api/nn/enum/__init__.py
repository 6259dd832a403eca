"""NNx path ``nnx.nn.enum``: a re-export module (nnx_api/nnx_paths.py).

The enums, one module each as well."""

from nnx_api.config.enums import Activations, Checkpoints, Devices, Losses, Nets, Optims, Schedulers

__all__ = ["Activations", "Checkpoints", "Devices", "Losses", "Nets", "Optims", "Schedulers"]
