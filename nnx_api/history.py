"""``nnx.history``: the bounded history journal and its readers (``nnx_api.runs.journal``)."""

from nnx_core.errors import HistoryCorruptionError
from nnx_api.runs.journal import HistoryJournal, export_history_csv, iter_history, migrate_history

__all__ = ["HistoryCorruptionError", "HistoryJournal", "export_history_csv", "iter_history", "migrate_history"]
