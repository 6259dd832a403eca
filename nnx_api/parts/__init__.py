"""What a model is assembled from and hands back: ``models`` (nets from registered factories,
batch adapters), ``datasets`` (dataset wrappers) and ``inference`` (probability-aware predictions,
prediction streams). They depend on ``nnx_api.config`` at most; ``NNModel`` puts them together.
Users import them from ``nnx_api.models``, ``nnx_api.nn.dataset``, ``nnx_api.prediction`` /
``nnx_api.streaming`` (or ``nnx_api``): NNx's paths, declared in ``nnx_api/nnx_paths.py``."""
