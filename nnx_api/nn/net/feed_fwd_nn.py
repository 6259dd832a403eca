"""NNx path ``nnx.nn.net.feed_fwd_nn``: a re-export module (nnx_api/nnx_paths.py)."""

from nnx_adapters.pytorch.nets import FeedFwdNN

__all__ = ["FeedFwdNN"]
