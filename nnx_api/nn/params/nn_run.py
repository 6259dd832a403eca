"""``nnx.nn.params.nn_run``: ``NNRun``."""

from nnx_api.runs.run import NNRun

__all__ = ["NNRun"]
