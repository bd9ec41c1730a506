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


def holder(lock_path: str) -> int | None:
    """The pid of the process that holds ``lock_path``'s ``flock``, or ``None`` when none
    does, found without taking the lock: in ``/proc/locks``, by the file's device and
    inode. (The pid written in the file stays there after its owner stopped or died, and
    may have been given to another process since.) Where ``/proc/locks`` cannot be read,
    the pid in the file, if a process of that pid exists."""
    try:
        st = os.stat(lock_path)
    except OSError:
        return None
    try:
        with open("/proc/locks") as fh:
            table = fh.read()
    except OSError:
        return _pid_in_file(lock_path)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in table.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2679233 0 EOF"; a waiter has "->" after the number
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5] == device:
            try:
                return int(fields[4])
            except ValueError:
                return 0
    return None


def _pid_in_file(lock_path: str) -> int | None:
    try:
        with open(lock_path) as fh:
            pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return None
    if not pid:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return pid
