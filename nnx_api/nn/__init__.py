"""``nnx.nn``: NNx's module paths (``nnx_api.nn.params.nn_train_params``, ``nnx_api.nn.enum.nets``, ...).

Every module under ``nnx_api.nn`` only re-exports names whose code lives elsewhere, so code
written for NNx's import paths runs after ``nnx`` → ``nnx_api``; the top-level ``nnx_api`` names
are the preferred spelling. Names of features outside this implementation's scope raise
``OutOfScopeError`` naming the scope (``docs/nnx-compat.md``)."""
