"""Training: the session that drives the core lifecycle, objectives, step utilities."""
