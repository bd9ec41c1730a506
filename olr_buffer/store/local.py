"""A store in a local directory.

A new object is written to a temporary file under the store's staging folder (a ``_``
folder: Spark and Delta skip it), fsynced, then hard-linked to its name: ``link`` fails if
the name exists, so nothing is ever overwritten, and the object appears whole. The folder
is fsynced after, so the name survives a power cut. A document is replaced with
``rename`` (atomic); a conditional replace compares the document's MD5 under a ``flock``
held by every conditional writer of the store. A process paused inside that section (a
few milliseconds: SIGSTOP, a frozen container) holds up every other conditional write of
the store until it wakes or dies: a wait longer than :data:`LOCK_WAIT_WARNING` seconds
is said, once, naming the process that holds the lock.
"""

from __future__ import annotations

import builtins
import errno
import fcntl
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from ..faults import no_stop_inside
from ..fsutil import fsync_dir, fsync_file, unlink_quietly, write_file
from ..pidlock import holder
from .base import ObjectInfo, Store, Versioned, check_name, content_tag
from .errors import ObjectChangedError, ObjectExistsError, ObjectNotFoundError, StoreAccessError, StoreError

#: Where temporary files are written before they are linked into place.
STAGING = "_olr_buffer/staging"
_CAS_LOCK = ".replace-lock"
_TAGGED = 1 << 20  # a write returns the MD5 tag of documents up to this size (not of data files)
#: Seconds a conditional write waits for the store's lock before it says who holds it.
LOCK_WAIT_WARNING = 10.0

log = logging.getLogger(__name__)


class LocalStore(Store):
    """Objects as files under ``root``; see the module doc. Folders are created with
    ``mode`` (0700 by default), files with ``mode`` less the x bits. ``durable=False``
    skips the fsyncs (tests, benchmarks)."""

    def __init__(
        self, root: str | os.PathLike[str], *, mode: int = 0o700, durable: bool = True, staging: str = STAGING
    ) -> None:
        self.root = os.path.abspath(os.fspath(root))
        self.uri = os.fspath(root)
        self.mode = mode
        self.file_mode = mode & 0o666
        self.durable = durable
        self.staging = check_name(staging)
        self._staging_dir = os.path.join(self.root, staging)

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def location(self, name: str = "") -> str:
        return os.path.join(self.root, name) if name else self.root

    def _path(self, name: str) -> str:
        return os.path.join(self.root, check_name(name))

    # -- reading ------------------------------------------------------------------------

    def list(self, prefix: str = "", *, recursive: bool = False, folders: bool = False) -> list[ObjectInfo]:
        folder, _, start = prefix.rpartition("/")
        if folder:
            check_name(folder)
        out: list[ObjectInfo] = []
        self._scan(folder, start, recursive, out, folders and not recursive)
        out.sort(key=lambda o: o.name)
        return out

    def _scan(
        self, folder: str, start: str, recursive: bool, out: builtins.list[ObjectInfo], folders: bool = False
    ) -> None:
        path = os.path.join(self.root, folder) if folder else self.root
        if path == self._staging_dir:
            return
        try:
            entries = list(os.scandir(path))
        except (FileNotFoundError, NotADirectoryError):
            return
        except OSError as exc:
            raise _os_error(exc, "list", path) from None
        for entry in entries:
            if not entry.name.startswith(start):
                continue
            name = f"{folder}/{entry.name}" if folder else entry.name
            try:
                if entry.is_file():
                    out.append(ObjectInfo(name, entry.stat().st_size))
                elif folders and entry.is_dir():
                    out.append(ObjectInfo(name + "/", 0))
                elif recursive and entry.is_dir():
                    self._scan(name, "", True, out)
            except FileNotFoundError:
                continue  # removed while listed

    def stat(self, name: str) -> ObjectInfo:
        path = self._path(name)
        try:
            st = os.stat(path)
        except OSError as exc:
            raise _os_error(exc, "read", path) from None
        if not os.path.isfile(path):
            raise ObjectNotFoundError(f"{path}: no such object (a folder)", path=path)
        return ObjectInfo(name, st.st_size)

    def read(self, name: str) -> bytes:
        path = self._path(name)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            raise _os_error(exc, "read", path) from None

    def read_range(self, name: str, start: int, length: int) -> bytes:
        path = self._path(name)
        try:
            with open(path, "rb") as fh:
                fh.seek(start)
                return fh.read(length)
        except OSError as exc:
            raise _os_error(exc, "read", path) from None

    def read_versioned(self, name: str) -> Versioned:
        data = self.read(name)
        return Versioned(data, content_tag(data))

    def open_input(self, name: str) -> pa.NativeFile:
        path = self._path(name)
        try:
            return pa.OSFile(path, "r")
        except OSError as exc:
            raise _os_error(exc, "read", path) from None

    # -- writing ------------------------------------------------------------------------

    def create(self, name: str, data: bytes) -> ObjectInfo:
        path = self._path(name)
        with self._staged(data) as tmp:
            self._link(tmp, path)
        return ObjectInfo(name, len(data), content_tag(data) if len(data) <= _TAGGED else None)

    def create_from_file(self, name: str, path: str | os.PathLike[str], *, token: str | None = None) -> ObjectInfo:
        """The file is linked into place where it is on the same filesystem (no copy: the
        caller's file and the object are then one file, which must not change), and copied
        through the staging folder otherwise. (``token``: a local create's outcome is
        always known.)"""
        target = self._path(name)
        src = os.fspath(path)
        try:
            size = os.stat(src).st_size
            if self.durable:
                fsync_file(src)
            os.chmod(src, self.file_mode)
        except OSError as exc:
            raise _os_error(exc, "read", src) from None
        try:
            self._link(src, target)
        except _CrossDevice:
            with self._staged_copy(src) as tmp:
                self._link(tmp, target)
        return ObjectInfo(name, size)

    def stage_from_file(self, name: str, path: str | os.PathLike[str], *, token: str) -> dict:
        """The file must be in the store's root (the changefeed's temporary folder): it
        is synced and stays where it is; the handle names it, with its inode, which the
        object has once it is linked into place."""
        src = os.path.abspath(os.fspath(path))
        rel = os.path.relpath(src, self.root)
        if rel.startswith(".."):
            raise StoreError(f"{src}: cannot stage a file outside the store {self.root}", path=src)
        try:
            if self.durable:
                fsync_file(src)
            os.chmod(src, self.file_mode)
            st = os.stat(src)
        except OSError as exc:
            raise _os_error(exc, "read", src) from None
        return {"staged": check_name(rel.replace(os.sep, "/")), "inode": st.st_ino, "size": st.st_size, "token": token}

    def complete_staged(self, name: str, staged: dict) -> None:
        target = self._path(name)
        src = self._path(str(staged["staged"]))
        try:
            self._link(src, target)
        except ObjectExistsError:
            if self._is_staged(target, staged):
                return
            raise
        except ObjectNotFoundError:
            if self._is_staged(target, staged):
                return  # linked, and the staged name removed since
            raise ObjectNotFoundError(
                f"{target}: its staged file {src} is gone and it was never linked into place", path=target
            ) from None

    @staticmethod
    def _is_staged(target: str, staged: dict) -> bool:
        try:
            return os.stat(target).st_ino == staged.get("inode")
        except OSError:
            return False

    def discard_staged(self, name: str, staged: dict) -> None:
        unlink_quietly(self._path(str(staged["staged"])))

    def replace(self, name: str, data: bytes) -> ObjectInfo:
        path = self._path(name)
        with self._staged(data) as tmp:
            self._ensure_folder(os.path.dirname(path))
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise _os_error(exc, "write", path) from None
            self._sync_folder(os.path.dirname(path))
        return ObjectInfo(name, len(data), content_tag(data) if len(data) <= _TAGGED else None)

    def replace_if(self, name: str, data: bytes, etag: str) -> ObjectInfo:
        path = self._path(name)
        with self._cas_lock():
            current = self.read_versioned(name)  # ObjectNotFoundError if gone
            if current.etag != etag:
                raise ObjectChangedError(
                    f"{path}: changed since it was read (version {current.etag}, expected {etag})",
                    path=path,
                )
            return self.replace(name, data)

    def delete(self, name: str) -> None:
        path = self._path(name)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise _os_error(exc, "delete", path) from None
        self._sync_folder(os.path.dirname(path))

    def clear_staging(self) -> builtins.list[str]:
        removed: builtins.list[str] = []
        try:
            names = os.listdir(self._staging_dir)
        except FileNotFoundError:
            return removed
        for n in names:
            if n == _CAS_LOCK:
                continue
            try:
                os.unlink(os.path.join(self._staging_dir, n))
                removed.append(f"{self.staging}/{n}")
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise _os_error(exc, "delete", os.path.join(self._staging_dir, n)) from None
        return removed

    # -- others' access -----------------------------------------------------------------

    def delta_location(self) -> tuple[str, dict[str, str]]:
        return self.root, {}

    def arrow_filesystem(self) -> tuple[pafs.FileSystem, str]:
        return pafs.LocalFileSystem(), self.root

    # -- helpers ------------------------------------------------------------------------

    def _staged(self, data: bytes) -> AbstractContextManager[str]:
        """A complete, synced temporary file holding ``data``, removed on leaving."""
        return self._staging(
            lambda tmp: write_file(tmp, data, durable=self.durable, mode=self.file_mode, exclusive=True)
        )

    def _staged_copy(self, src: str) -> AbstractContextManager[str]:
        """A complete, synced temporary copy of the file ``src``, removed on leaving."""

        def copy(tmp: str) -> None:
            shutil.copyfile(src, tmp)
            os.chmod(tmp, self.file_mode)
            if self.durable:
                fsync_file(tmp)

        return self._staging(copy)

    @contextmanager
    def _staging(self, fill: Callable[[str], None]) -> Iterator[str]:
        """A new temporary file of the staging folder, written by ``fill``, removed on leaving."""
        tmp = self._tmp_name()
        try:
            fill(tmp)
        except OSError as exc:
            unlink_quietly(tmp)
            raise _os_error(exc, "write", tmp) from None
        try:
            yield tmp
        finally:
            unlink_quietly(tmp)

    def _tmp_name(self) -> str:
        self._ensure_folder(self._staging_dir)
        return os.path.join(self._staging_dir, f"{os.getpid()}-{uuid.uuid4().hex}.tmp")

    def _link(self, src: str, target: str) -> None:
        """``src`` becomes ``target`` as well, unless ``target`` exists."""
        self._ensure_folder(os.path.dirname(target))
        try:
            os.link(src, target)
        except FileExistsError:
            raise ObjectExistsError(
                f"{target}: already exists (a published object is never overwritten)", path=target
            ) from None
        except OSError as exc:
            if exc.errno == errno.EXDEV:
                raise _CrossDevice() from None
            if exc.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP) and os.path.isfile(src):
                raise StoreError(
                    f"{target}: cannot create: the filesystem has no hard links ({exc.strerror})",
                    hint="put the changefeed on a local POSIX filesystem (ext4, xfs, ...), or on object storage",
                    path=target,
                ) from None
            raise _os_error(exc, "create", target) from None
        self._sync_folder(os.path.dirname(target))

    def _ensure_folder(self, path: str) -> None:
        if os.path.isdir(path):
            return
        missing = []
        p = path
        while p and not os.path.isdir(p):
            missing.append(p)
            p = os.path.dirname(p)
        for folder in reversed(missing):
            try:
                os.mkdir(folder, self.mode)
            except FileExistsError:
                continue
            except OSError as exc:
                raise _os_error(exc, "create the folder", folder) from None
            self._sync_folder(os.path.dirname(folder))

    def _sync_folder(self, path: str) -> None:
        if not self.durable:
            return
        try:
            fsync_dir(path)
        except OSError as exc:
            raise _os_error(exc, "sync", path) from None

    @contextmanager
    def _cas_lock(self) -> Iterator[None]:
        self._ensure_folder(self._staging_dir)
        path = os.path.join(self._staging_dir, _CAS_LOCK)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, self.file_mode)
        except OSError as exc:
            raise _os_error(exc, "lock", path) from None
        # (a test's paused instant is not inside it, nor between the section and the
        # close that drops the flock: a pause there would hold the lock)
        with no_stop_inside():
            try:
                _wait_for_flock(fd, path)
                yield
            finally:
                os.close(fd)  # drops the flock


def _wait_for_flock(fd: int, path: str) -> None:
    """``flock`` ``fd``, waiting as long as it takes; a wait of more than
    :data:`LOCK_WAIT_WARNING` seconds is said once, naming the holder."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    warning = threading.Timer(LOCK_WAIT_WARNING, _say_lock_held, (path,))
    warning.daemon = True
    warning.start()
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    finally:
        warning.cancel()


def _say_lock_held(path: str) -> None:
    pid = holder(path)
    who = "another process" if not pid else f"pid {pid}"
    if pid and _process_state(pid) in ("T", "t"):
        who += " (stopped: SIGSTOP, a frozen container, a debugger)"
    log.warning(
        "%s: a conditional write has waited %.0fs for this lock, held by %s: every writer of the store waits "
        "until it wakes or ends",
        path,
        LOCK_WAIT_WARNING,
        who,
        extra={"lock": path, "holder_pid": pid},
    )


def _process_state(pid: int) -> str | None:
    """The state letter of process ``pid`` (``T``: stopped), None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return None


class _CrossDevice(Exception):
    """The source of a link is on another filesystem: copy it instead."""


def _os_error(exc: OSError, doing: str, path: str) -> StoreError:
    """One line for an OS error: ``PATH: cannot DOING: reason``, typed by what the caller
    can do about it."""
    reason = (exc.strerror or str(exc)).splitlines()[0]
    # errno and reason as facts: a caller may word the error its own way (the changefeed does)
    facts: dict[str, Any] = {"path": path, "errno": exc.errno, "reason": reason}
    if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
        return ObjectNotFoundError(f"{path}: no such object", **facts)
    if isinstance(exc, IsADirectoryError):
        return ObjectNotFoundError(f"{path}: no such object (a folder)", **facts)
    if isinstance(exc, FileExistsError):
        return ObjectExistsError(f"{path}: already exists", **facts)
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return StoreAccessError(
            f"{path}: cannot {doing}: {reason}",
            hint="make the changefeed directory writable by this user (read-only mount, permissions)",
            **facts,
        )
    if exc.errno == errno.ENOSPC:
        return StoreError(
            f"{path}: cannot {doing}: no space left on device",
            hint="free disk space, then run the same command again",
            **facts,
        )
    return StoreError(f"{path}: cannot {doing}: {reason}", **facts)
