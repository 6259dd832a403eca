"""Experiment plans and hyper-parameter search."""
