"""An exclusive lock on a directory for one process: a non-blocking ``flock`` on a file
that holds the owner's pid, for the message of a process that is refused. The kernel
drops the lock when its owner dies, so a crash never leaves a stale lock.

Used by the queue (``QUEUE_DIR/LOCK``) and the changefeed (``CF/_olr_buffer/LOCK``).
"""

from __future__ import annotations

import errno
import fcntl
import os


class LockHeldError(Exception):
    """Another process holds the lock; ``pid`` is what it wrote in the file (or ``?``)."""

    def __init__(self, pid: str) -> None:
        super().__init__(f"locked by pid {pid}")
        self.pid = pid


def acquire(lock_path: str) -> int:
    """Lock ``lock_path`` (created 0600) and write our pid in it; returns the descriptor,
    whose closing releases the lock. Raises :class:`LockHeldError`, or ``OSError``."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        owner = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EACCES):
            raise LockHeldError(owner) from None
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass  # the pid is for the message of a refused process only
    return fd
