"""Durable local file operations: the one home of fsync and atomic replace.

A file that must survive a crash whole is written to a temporary file, fsynced, renamed
over its name, and the directory fsynced so that the new name survives a power cut too
(:func:`atomic_write`). Everything here raises the plain :class:`OSError` (its
``filename`` set where the call knows it): the caller names what it was doing and adds
its own hint.
"""

from __future__ import annotations

import os

#: Mode a new file gets when the caller asks for none (less the umask), as ``open`` does.
DEFAULT_FILE_MODE = 0o666


def fsync_file(path: str) -> None:
    """Flush the file ``path`` (its data and size) to the device."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: str) -> None:
    """Flush the directory ``path`` to the device: the names just created, renamed or
    removed in it survive a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes | memoryview) -> None:
    """Write all of ``data`` to the descriptor ``fd`` (``os.write`` may write less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def open_with_mode(path: str, flags: int, mode: int) -> int:
    """A descriptor of ``path`` opened with ``flags``; a file created or found there ends up
    with mode ``mode`` whatever the umask or its mode before."""
    fd = os.open(path, flags, mode)
    try:
        if os.fstat(fd).st_mode & 0o777 != mode:
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_file(path: str, data: bytes, *, durable: bool, mode: int | None = None, exclusive: bool = False) -> None:
    """Create ``path`` (truncate it if it is there, unless ``exclusive``: then it must not
    be) holding ``data``, fsynced when ``durable``. ``mode``: the file's mode whatever the
    umask (None: ``0666`` less the umask)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, DEFAULT_FILE_MODE) if mode is None else open_with_mode(path, flags, mode)
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, durable: bool, mode: int | None = None, tmp: str | None = None) -> None:
    """``path`` holds ``data`` or its old content, never a mix: ``data`` goes to the
    temporary file ``tmp`` (``path + ".tmp"`` by default, in the same directory), which is
    fsynced, renamed over ``path``, and the directory fsynced (the fsyncs only when
    ``durable``). On an error the temporary file is removed and ``path`` is as it was."""
    tmp = path + ".tmp" if tmp is None else tmp
    try:
        write_file(tmp, data, durable=durable, mode=mode)
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    if durable:
        fsync_dir(os.path.dirname(path) or ".")


def unlink_quietly(path: str) -> None:
    """Remove ``path`` if it can be (a temporary file on the way out of an error)."""
    try:
        os.unlink(path)
    except OSError:
        pass
