"""NNx path ``nnx.history``: a re-export module (nnx_api/nnx_paths.py).

The bounded history journal and its readers (docs/history-journal.md)."""

from nnx_core.errors import HistoryCorruptionError
from nnx_core.journal_format import JOURNAL_FORMAT, JOURNAL_VERSION
from nnx_api.runs.journal import HistoryJournal, export_history_csv, iter_history, migrate_history

__all__ = [
    "JOURNAL_FORMAT", "JOURNAL_VERSION", "HistoryCorruptionError", "HistoryJournal", "export_history_csv", "iter_history",
    "migrate_history",
]
