"""dispatcher: transactions by XID, progress and watermark, commit order, compensation."""

from .dispatcher import DispatchStats, Dispatcher, TransactionSink
from .errors import DispatchError
from .replay import ReplayStats
from .transaction import Commit, CommitKey, OpenTransaction

__all__ = [
    "Commit",
    "CommitKey",
    "DispatchError",
    "DispatchStats",
    "Dispatcher",
    "OpenTransaction",
    "ReplayStats",
    "TransactionSink",
]
