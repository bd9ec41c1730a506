"""dispatcher: transactions by XID, progress and watermark, commit order, compensation."""

from .batch import BATCH_STEP
from .checkpoint import Checkpoint, DispatchStats, decode_checkpoint
from .dispatcher import AbandonedTransaction, Dispatcher
from .errors import DispatchError
from .figures import ReplayFigures
from .replay import ReplayStats
from .transaction import OpenTransaction

__all__ = [
    "BATCH_STEP",
    "AbandonedTransaction",
    "Checkpoint",
    "DispatchError",
    "DispatchStats",
    "Dispatcher",
    "OpenTransaction",
    "ReplayFigures",
    "ReplayStats",
    "decode_checkpoint",
]
