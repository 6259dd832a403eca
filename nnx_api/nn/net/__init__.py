"""``nnx.nn.net``: the built-in networks (``nnx_api.nn.net.feed_fwd_nn``, ``nnx_api.nn.net.conv_nn``)."""

from nnx_adapters.pytorch.nets import ConvNN, FeedFwdNN

__all__ = ["ConvNN", "FeedFwdNN"]
