"""``nnx.nn.params``: the params and record classes, one module each (``nnx_api.nn.params.nn_train_params``, ...)."""



__all__ = []
