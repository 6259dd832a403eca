"""NNx path ``nnx.history``: a re-export module (nnx_api/nnx_paths.py).

The bounded history journal and its readers (docs/history-journal.md)."""

from nnx_core.errors import HistoryCorruptionError
from nnx_api.runs.journal import HistoryJournal, export_history_csv, iter_history, migrate_history

__all__ = ["HistoryCorruptionError", "HistoryJournal", "export_history_csv", "iter_history", "migrate_history"]
