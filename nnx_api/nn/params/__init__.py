"""NNx path ``nnx.nn.params``: the package of the NNx paths below it (nnx_api/nnx_paths.py).

The params and record classes, one module each (``nnx_api.nn.params.nn_train_params``, ...)."""

__all__ = []
