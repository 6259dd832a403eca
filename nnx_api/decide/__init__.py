"""Typed decisions: ``provider`` (``FixedHeadProvider`` and the names of ``nnx.decisions``),
``jobs`` (deferred ``DecisionJob``s), ``values`` (a job's errors, limits, outcomes and tree) and
``runner`` (how a job runs). Users import them from ``nnx_api.decisions``."""
