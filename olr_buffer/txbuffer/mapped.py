"""Giving back the pages of a memory-mapped file that a process has read.

LMDB reads through a shared, read-only mapping of each segment file. Every page read
stays mapped into the process (and counted in its RSS, as ``ps``, cgroups and container
limits see it) until the environment is closed or the kernel is short of memory. Reading
back a transaction of millions of rows would then grow the RSS with the transaction.

:func:`release` tells the kernel (``madvise(MADV_DONTNEED)``) that the process no longer
needs the pages of a file's mappings. For a shared file mapping this only unmaps them:
the data stays in the page cache and in the file, and the next read maps it again. It is
safe while another thread reads the same mapping: a page it touches next is faulted in
again, with the same bytes.

Linux only (``/proc/self/maps``); elsewhere it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from collections.abc import Callable

_MADV_DONTNEED = 4  # Linux

_madvise: Callable[[int, int, int], int] | None
try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    _fn = _libc.madvise
    _fn.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    _fn.restype = ctypes.c_int
    _madvise = _fn
except (OSError, AttributeError):  # not a libc with madvise: release() does nothing
    _madvise = None


def mappings(path: str) -> list[tuple[int, int]]:
    """The address ranges ``(start, end)`` at which this process maps the file ``path``,
    matched by device and inode (a path in ``/proc/self/maps`` may be escaped)."""
    if _madvise is None:
        return []
    try:
        st = os.stat(path)
        with open("/proc/self/maps", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}".encode()
    ino = str(st.st_ino).encode()
    ranges = []
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) >= 5 and fields[4] == ino and fields[3] == dev:
            start, _, end = fields[0].partition(b"-")
            ranges.append((int(start, 16), int(end, 16)))
    return ranges


def release(ranges: list[tuple[int, int]]) -> None:
    """Unmap the pages of ``ranges`` from the process (they are read again when needed)."""
    if _madvise is None:
        return
    for start, end in ranges:
        _madvise(start, end - start, _MADV_DONTNEED)  # a failure only leaves the pages mapped
