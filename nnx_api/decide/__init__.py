"""Typed decisions: ``provider`` (``FixedHeadProvider`` and the names of ``nnx.decisions``) and
``jobs`` (deferred ``DecisionJob``s). Users import them from ``nnx_api.decisions``."""
