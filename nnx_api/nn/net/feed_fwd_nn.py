"""``nnx.nn.net.feed_fwd_nn``: ``FeedFwdNN``."""

from nnx_adapters.pytorch.nets import FeedFwdNN

__all__ = ["FeedFwdNN"]
