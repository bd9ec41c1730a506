"""Not for users: what olr-buffer's own tests, models and benchmarks run against, kept
apart from the product (no module of the product imports this package, and nothing here
is a stable interface).

- :class:`MemoryQueue`: an in-memory :class:`~olr_buffer.txbuffer.TxQueue` with the same
  behaviour as :class:`~olr_buffer.txbuffer.LmdbQueue`; nothing survives the process.
"""

from .memory_queue import MemoryQueue

__all__ = ["MemoryQueue"]
