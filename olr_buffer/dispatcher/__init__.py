"""dispatcher: transactions by XID, progress and watermark, commit order, compensation."""

from .dispatcher import DispatchStats, Dispatcher, TransactionSink
from .errors import DispatchError
from .replay import ReplayStats
from ..changes import Commit, CommitKey
from .transaction import OpenTransaction

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
