"""Runs on disk: ``NNRun`` and checkpoints, history readers, curves, plots, export."""
