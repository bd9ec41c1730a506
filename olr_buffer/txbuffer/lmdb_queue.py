"""The LMDB implementation of the queue.

On disk, ``QUEUE_DIR`` holds::

    LOCK                       flock'ed by the process that owns the queue
    segments/seg-<first>.mdb   one LMDB environment per segment (<first>: 20 digits)
    segments/seg-<first>.mdb-lock

Each segment has two named databases: ``blocks`` (first index -> block) and ``meta``
(key -> value). Metadata is written to the segment being appended to, in the same LMDB
transaction as the block it describes; when a new segment starts, its first transaction
carries a copy of all metadata, so the newest segment always holds the newest values.

An open environment costs three file descriptors. Older segments are opened when read,
and at most ``max_open_segments`` stay open (the least recently read are closed), so a
transaction that pins hundreds of segments does not exhaust the process's descriptors.

Pages read through LMDB's mapping stay in the process's RSS until released: after every
``RELEASE_MAPPED_BYTES`` read, the open segments' mapped pages are given back
(:mod:`.mapped`), so reading back a large transaction does not grow the RSS with it.
"""

from __future__ import annotations

import bisect
import errno
import logging
import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

import lmdb

from .. import pidlock
from ..faults import fault_point
from ..fsutil import fsync_dir
from . import mapped
from .base import SegmentInfo, TxQueue, cleanup_candidates
from .block import Block, index_key, key_index, thread_codec
from .errors import QueueCorruptError, QueueError, QueueFullError, QueueLockedError

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
_SEGMENT_PREFIX = "seg-"
_SEGMENT_SUFFIX = ".mdb"
_MAP_HEADROOM = 1 << 30  # a block may overshoot the roll size; the map is virtual memory only
#: LMDB maps a segment's lock file (its reader table, ~8 KiB for the default 126 readers)
#: and writes it through the map: on a full file system, touching a page of it that has no
#: block yet is a SIGBUS, which kills the process with no word. Its blocks are allocated
#: first (see _reserve_lock_file), so that a full disk is an error like any other.
_LOCK_FILE_BYTES = 64 << 10
DEFAULT_MAX_OPEN_SEGMENTS = 32  # and at most a twelfth of the open-files limit, 3 per segment
RELEASE_MAPPED_BYTES = 16 << 20  # blocks read between two releases of the mapped pages


class _NotInitialised(QueueError):
    """A segment file whose databases its creator has not committed yet."""


def segment_name(first: int) -> str:
    return f"{_SEGMENT_PREFIX}{first:020d}{_SEGMENT_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    if not (name.startswith(_SEGMENT_PREFIX) and name.endswith(_SEGMENT_SUFFIX)):
        return None
    digits = name[len(_SEGMENT_PREFIX) : -len(_SEGMENT_SUFFIX)]
    return int(digits) if digits.isdigit() and len(digits) == 20 else None


class _Segment:
    __slots__ = ("first", "path", "env", "blocks", "meta", "maps")

    def __init__(self, first: int, path: str) -> None:
        self.first = first
        self.path = path
        self.env: lmdb.Environment | None = None
        self.blocks: lmdb._Database | None = None
        self.meta: lmdb._Database | None = None
        self.maps: list[tuple[int, int]] | None = None  # where the environment maps the file


class LmdbQueue(TxQueue):
    """A segmented, append-only log in LMDB environments, owned by one process at a time.

    ``durable=True`` (the default) makes every append reach the disk before it returns
    (LMDB sync and metasync). ``durable=False`` trades that for speed: a machine crash
    (not a process crash) may then lose the last appends.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        durable: bool = True,
        create: bool = True,
        read_only: bool = False,
        max_open_segments: int | None = None,
    ) -> None:
        """``read_only=True`` opens a view for inspection (``olr-buffer status``) while
        another process owns the queue: no lock is taken and nothing is written."""
        self.path = os.fspath(path)
        if max_open_segments is None:
            limit = _fd_limit()
            max_open_segments = (
                min(DEFAULT_MAX_OPEN_SEGMENTS, limit // 12) if isinstance(limit, int) else DEFAULT_MAX_OPEN_SEGMENTS
            )
        self.max_open_segments = max(2, int(max_open_segments))
        self._open: OrderedDict[int, _Segment] = OrderedDict()  # open environments, least recently used first
        self.read_only = read_only
        self.segment_bytes = int(segment_bytes)
        self.durable = durable
        self._write_lock = threading.RLock()
        self._read_since_release = 0  # bytes of blocks read since the mapped pages were released
        # never open one environment twice in a process, nor close one while it is read
        self._env_lock = threading.RLock()
        self._closed = False
        self._lock_fd: int | None = None
        self._seg_dir = os.path.join(self.path, "segments")
        self.created = False  # this object made the directory (see close_and_remove_if_unused)
        try:
            if not _is_dir(self._seg_dir):  # (a directory it may not enter: PermissionError)
                if not create or read_only:
                    raise QueueError(f"{self.path}: no queue here", hint="check --queue", path=self.path)
                self.created = not os.path.lexists(self.path)
                os.makedirs(self.path, mode=0o700, exist_ok=True)
                os.makedirs(self._seg_dir, mode=0o700, exist_ok=True)
            if not read_only:
                for d in (self.path, self._seg_dir):
                    _owner_only(d)
        except OSError as exc:
            raise _os_failure(exc, self.path, "open the queue directory") from None
        self._segments: list[_Segment] = []
        if not read_only:
            self._acquire_lock()
        try:
            try:
                names = set(os.listdir(self._seg_dir))
            except OSError as exc:
                raise _os_failure(exc, self._seg_dir, "read the queue directory") from None
            for name in sorted(names):
                first = parse_segment_name(name)
                if first is not None:
                    self._segments.append(_Segment(first, os.path.join(self._seg_dir, name)))
                elif name.endswith(_SEGMENT_SUFFIX + "-lock") and name[: -len("-lock")] not in names and not read_only:
                    _unlink(os.path.join(self._seg_dir, name))  # left by a cleanup cut short
            self._firsts = [s.first for s in self._segments]
            self._next = 0
            self._meta: dict[bytes, bytes] = {}
            try:
                self._recover_tail()
            except lmdb.Error as exc:
                raise QueueCorruptError(
                    f"{self.path}: the newest segment cannot be read: {exc}",
                    hint="restore the queue directory from a backup, or replay the input into a new queue",
                    path=self.path,
                ) from exc
        except BaseException:
            for seg in self._segments:
                self._close_segment(seg)
            self._release_lock()
            raise

    # -- ownership ---------------------------------------------------------------------

    def _acquire_lock(self) -> None:
        try:
            self._lock_fd = pidlock.acquire(os.path.join(self.path, "LOCK"))
        except OSError as exc:
            raise _os_failure(exc, os.path.join(self.path, "LOCK"), "lock the queue") from None
        except pidlock.LockHeldError as held:
            raise QueueLockedError(
                f"{self.path}: queue is in use by another process (pid {held.pid})",
                hint="stop the other olr-buffer process first, or use another --queue",
                path=self.path,
            ) from None

    @staticmethod
    def owner_pid(path: str) -> int | None:
        """The pid of the process that has the queue at ``path`` open for writing, or
        ``None``; without taking its lock (see :func:`olr_buffer.pidlock.holder`)."""
        return pidlock.holder(os.path.join(path, "LOCK"))

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing drops the flock
            self._lock_fd = None

    # -- segments ----------------------------------------------------------------------

    def _open_env(self, seg: _Segment) -> _Segment:
        if seg.env is not None:
            return seg
        with self._env_lock:
            if seg.env is not None:
                return seg
            self._close_least_used()
            if not self.read_only:
                try:
                    self._reserve_lock_file(seg.path + "-lock")
                except OSError as exc:  # out of descriptors
                    raise self._out_of_files(seg, exc) from None
            try:
                env = lmdb.open(
                    seg.path,
                    subdir=False,
                    map_size=self.segment_bytes + _MAP_HEADROOM,
                    max_dbs=2,
                    sync=self.durable,
                    metasync=self.durable,
                    readahead=False,
                    mode=0o600,
                    readonly=self.read_only,
                )
            except lmdb.Error as exc:
                if _out_of_descriptors(exc):
                    raise self._out_of_files(seg, exc) from exc
                if not self.read_only and ("No space" in str(exc) or _disk_full(self._seg_dir)):
                    raise QueueFullError(
                        f"{seg.path}: no space left on device creating the segment",
                        hint="free disk space, then run the same command again",
                        path=seg.path,
                    ) from exc
                raise QueueCorruptError(f"{seg.path}: cannot open segment: {exc}", path=seg.path) from exc
            env.reader_check()
            if self.read_only:
                try:
                    seg.blocks = env.open_db(b"blocks", create=False)
                    seg.meta = env.open_db(b"meta", create=False)
                except lmdb.NotFoundError:
                    env.close()
                    raise _NotInitialised(f"{seg.path}: segment not initialised yet", path=seg.path) from None
            else:
                try:
                    seg.blocks = env.open_db(b"blocks")
                    seg.meta = env.open_db(b"meta")
                except lmdb.Error as exc:  # creating them is a write: a full disk shows here
                    env.close()
                    if "No space" in str(exc) or _disk_full(self._seg_dir):
                        raise QueueFullError(
                            f"{seg.path}: no space left on device creating the segment",
                            hint="free disk space, then run the same command again",
                            path=seg.path,
                        ) from exc
                    raise QueueError(f"{seg.path}: cannot create the segment: {exc}", path=seg.path) from exc
            seg.env = env
            self._open[seg.first] = seg
        return seg

    def _close_least_used(self) -> None:
        """Make room for one more environment; the current segment stays open."""
        current = self._segments[-1] if self._segments else None
        for first in list(self._open):
            if len(self._open) < self.max_open_segments:
                return
            seg = self._open[first]
            if seg is not current:
                self._close_segment(seg)

    def _recover_tail(self) -> None:
        """Find the next index and the newest metadata from the last non-empty segment."""
        while self._segments:
            try:
                seg = self._open_env(self._segments[-1])
            except _NotInitialised:
                # read-only, while the owner creates the segment: as if it did not exist yet
                self._segments.pop()
                self._firsts.pop()
                continue
            except QueueCorruptError:
                seg = self._segments[-1]
                if not _unfinished_segment(seg.path):
                    raise
                # the newest segment, which LMDB never finished creating (its two meta pages
                # are not both there: the disk was full, or the process died creating it):
                # no block was ever stored in it
                if not self.read_only:
                    log.warning("%s: removing a segment whose creation did not finish", seg.path)
                    for suffix in ("", "-lock"):
                        _unlink(seg.path + suffix)
                self._segments.pop()
                self._firsts.pop()
                if not self._segments:
                    self._next = seg.first
                    return
                continue
            assert seg.env is not None  # opened by _open_env
            with seg.env.begin(db=seg.blocks) as txn:
                cur = txn.cursor()
                if cur.last():
                    first = key_index(cur.key())
                    block = thread_codec().decode(first, cur.value(), f" in {seg.path}")
                    self._next = block.end
                    self._meta = dict(txn.cursor(db=seg.meta).iternext())
                    return
            assert seg.env is not None  # opened by _open_env
            with seg.env.begin(db=seg.meta) as txn:
                meta = dict(txn.cursor().iternext())
            if meta or len(self._segments) == 1:
                # No block yet, but metadata (which a write into an empty segment always
                # carries in full): the segment is the current one.
                self._meta = meta
                self._next = seg.first
                return
            # The newest segment was created but its first write never committed.
            if self.read_only:
                self._segments.pop()
                self._firsts.pop()
                continue
            self._close_segment(seg)
            for suffix in ("", "-lock"):
                _unlink(seg.path + suffix)
            self._segments.pop()
            self._firsts.pop()

    def _out_of_files(self, seg: _Segment, exc: BaseException) -> QueueError:
        return QueueError(
            f"{seg.path}: cannot open segment: the process has too many open files "
            f"(limit {_fd_limit()}, {len(self._open)} segments open)",
            hint="raise the open-files limit (ulimit -n, LimitNOFILE=) and run again",
            path=seg.path,
        )

    @staticmethod
    def _reserve_lock_file(path: str) -> None:
        """Allocate the blocks of an LMDB lock file before LMDB maps it (``_LOCK_FILE_BYTES``)."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.posix_fallocate(fd, 0, _LOCK_FILE_BYTES)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise QueueFullError(
                    f"{path}: no space left on device creating the segment's lock file",
                    hint="free disk space, then run the same command again",
                    path=path,
                ) from None
            if exc.errno in (errno.EMFILE, errno.ENFILE):
                raise  # named by the caller, as LMDB's own failure to open would be
            if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # no fallocate here: LMDB's own way
                raise QueueError(f"{path}: cannot create the segment's lock file: {exc.strerror}", path=path) from None

    def _current_segment(self, roll: bool) -> _Segment:
        if self._segments and not roll:
            return self._open_env(self._segments[-1])
        seg = _Segment(self._next, os.path.join(self._seg_dir, segment_name(self._next)))
        self._segments.append(seg)
        self._firsts.append(seg.first)
        try:
            return self._open_env(seg)
        except BaseException:
            # a segment LMDB could not finish creating (a full disk): gone, not left as a
            # file that no later run can open
            self._close_segment(seg)
            self._segments.pop()
            self._firsts.pop()
            for suffix in ("", "-lock"):
                _unlink(seg.path + suffix)
            raise

    def _segment_full(self, seg: _Segment) -> bool:
        if seg.first == self._next:
            return False  # nothing in it yet: never roll an empty segment
        assert seg.env is not None  # opened by _open_env
        info = seg.env.info()
        return (info["last_pgno"] + 1) * seg.env.stat()["psize"] >= self.segment_bytes

    def _close_segment(self, seg: _Segment) -> None:
        with self._env_lock:
            if seg.env is not None:
                seg.env.close()
                seg.env = seg.blocks = seg.meta = seg.maps = None
            self._open.pop(seg.first, None)

    # -- TxQueue -----------------------------------------------------------------------

    @property
    def first_index(self) -> int:
        return self._firsts[0] if self._firsts else self._next

    @property
    def next_index(self) -> int:
        return self._next

    def append(self, records: Sequence[bytes], meta: Mapping[bytes, bytes] | None = None) -> int:
        value = thread_codec().encode(records) if records else None
        return self.append_encoded(value, len(records), meta)

    def append_encoded(self, value: bytes | None, count: int, meta: Mapping[bytes, bytes] | None = None) -> int:
        self._check_open()
        self._check_writable()
        if value is not None and count <= 0:
            raise QueueError(f"{self.path}: an encoded block must hold at least one record")
        with self._write_lock:
            seg = self._current_segment(roll=not self._segments)
            if value is not None and self._segment_full(seg):
                seg = self._current_segment(roll=True)
            # Until a segment holds a block, every write into it carries all metadata, so
            # a failed first write cannot leave it with only part of the metadata.
            new_segment = seg.first == self._next and len(self._segments) > 1
            first = self._next
            try:
                assert seg.env is not None  # opened by _open_env
                with seg.env.begin(write=True) as txn:
                    if new_segment:
                        for k, v in self._meta.items():
                            if meta is None or k not in meta:
                                txn.put(k, v, db=seg.meta)
                    if value is not None:
                        # The index is taken inside the write transaction that stores it.
                        first = self._next
                        if not txn.put(index_key(first), value, db=seg.blocks, append=True):
                            raise QueueCorruptError(f"{seg.path}: index {first} already stored", index=first)
                    if meta:
                        for k, v in meta.items():
                            txn.put(k, v, db=seg.meta)
            except lmdb.MapFullError as exc:
                raise QueueFullError(
                    f"{seg.path}: segment map is full writing index {first}",
                    hint="a single block exceeded the segment map; lower the block size",
                    index=first,
                ) from exc
            except lmdb.Error as exc:
                if "No space" in str(exc) or getattr(exc, "errno", None) == errno.ENOSPC or _disk_full(self._seg_dir):
                    # a short write on a full disk reaches LMDB as EIO, not ENOSPC
                    raise QueueFullError(
                        f"{seg.path}: no space left on device writing index {first}",
                        hint="free disk space, then run the same command again",
                        index=first,
                    ) from exc
                raise QueueError(f"{seg.path}: write failed at index {first}: {exc}", index=first) from exc
            if value is not None:
                self._next = first + count
            if meta:
                self._meta.update(meta)
            return first

    def read_block(self, index: int) -> Block:
        self._check_open()
        if not (self.first_index <= index < self._next):
            raise IndexError(f"queue index {index} is not stored ({self.first_index}..{self._next - 1})")
        pos = bisect.bisect_right(self._firsts, index) - 1
        with self._env_lock:  # not closed for another's room while read
            seg = self._open_env(self._segments[pos])
            self._open.move_to_end(seg.first)
            try:
                assert seg.env is not None  # opened by _open_env
                with seg.env.begin(db=seg.blocks, buffers=True) as txn:
                    cur = txn.cursor()
                    key = index_key(index)
                    if cur.set_range(key):
                        found = cur.key() == key or cur.prev()
                    else:
                        found = cur.last()
                    if not found:
                        raise QueueCorruptError(f"{seg.path}: no block holds index {index}", index=index)
                    first = key_index(bytes(cur.key()))
                    value = cur.value()
                    block = thread_codec().decode(first, value, f" in {seg.path}")
            except lmdb.Error as exc:
                raise QueueCorruptError(f"{seg.path}: cannot read index {index}: {exc}", index=index) from exc
            self._read_since_release += len(value)
            if self._read_since_release >= RELEASE_MAPPED_BYTES:
                self.release_mapped_pages()
        if not block.first <= index < block.end:
            raise QueueCorruptError(f"{seg.path}: no block holds index {index}", index=index)
        return block

    def release_mapped_pages(self) -> None:
        """Give back the pages of the open segments that reading has mapped into the
        process (they stay in the page cache; see :mod:`.mapped`)."""
        with self._env_lock:
            self._read_since_release = 0
            for seg in self._open.values():
                if seg.maps is None:
                    seg.maps = mapped.mappings(seg.path)
                mapped.release(seg.maps)

    def meta(self, key: bytes) -> bytes | None:
        return self._meta.get(key)

    def meta_items(self, prefix: bytes = b"") -> dict[bytes, bytes]:
        return {k: v for k, v in self._meta.items() if k.startswith(prefix)}

    def segments(self) -> list[SegmentInfo]:
        out = []
        for i, seg in enumerate(self._segments):
            end = self._segments[i + 1].first if i + 1 < len(self._segments) else self._next
            try:
                size = os.path.getsize(seg.path)
            except FileNotFoundError:
                size = 0
            out.append(SegmentInfo(seg.first, end, seg.path, size, i == len(self._segments) - 1))
        return out

    def delete_segments_before(
        self, index: int, *, retain_segments: int = 0, retain_seconds: float = 0.0
    ) -> list[SegmentInfo]:
        self._check_open()
        self._check_writable()
        with self._write_lock:
            deleted = []
            for info in cleanup_candidates(self.segments(), index, retain_segments, retain_seconds, _mtime):
                seg = self._segments[0]
                self._close_segment(seg)
                _unlink(seg.path)
                fault_point("during_cleanup")
                _unlink(seg.path + "-lock")
                self._segments.pop(0)
                self._firsts.pop(0)
                deleted.append(info)
            if deleted:
                fsync_dir(self._seg_dir)
            return deleted

    def close(self) -> None:
        if self._closed:
            return
        with self._write_lock:
            for seg in self._segments:
                self._close_segment(seg)
            self._closed = True
            self._release_lock()

    def close_and_remove_if_unused(self, ignore_meta: Iterable[bytes] = ()) -> bool:
        """Close the queue and, if this object created its directory and it holds nothing
        (no block, no metadata but ``ignore_meta``), remove the directory: a run refused
        before it did anything leaves nothing behind. True if removed.

        Removed under the lock, the lock file last: a process that opens the queue
        meanwhile is refused (it is in use), or finds no queue and makes a new one, or
        stops on a directory gone under it; never opens a segment being removed."""
        if self._closed:
            return False
        if not (self.created and not self.read_only and self._next == 0 and set(self._meta) <= set(ignore_meta)):
            self.close()
            return False
        with self._write_lock:
            for seg in self._segments:
                self._close_segment(seg)
            self._closed = True
            try:
                for name in os.listdir(self._seg_dir):
                    if parse_segment_name(name) is not None or name.endswith(_SEGMENT_SUFFIX + "-lock"):
                        os.unlink(os.path.join(self._seg_dir, name))
                os.rmdir(self._seg_dir)  # not if anything else is in it
                if set(os.listdir(self.path)) != {"LOCK"}:
                    return False
                os.unlink(os.path.join(self.path, "LOCK"))
            except OSError:
                return False
            finally:
                self._release_lock()
            try:
                os.rmdir(self.path)
            except OSError:
                return False  # another process made a queue there meanwhile
        log.debug("%s: removed the queue directory this run made: it holds nothing", self.path)
        return True

    def _check_open(self) -> None:
        if self._closed:
            raise QueueError(f"{self.path}: queue is closed")

    def _check_writable(self) -> None:
        if self.read_only:
            raise QueueError(f"{self.path}: queue is opened read-only")


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False


def _os_failure(exc: OSError, path: str, doing: str) -> QueueError:
    """One line for an OS error on the queue directory: ``PATH: cannot DOING: reason``,
    and what to do (exit 1: the environment)."""
    reason = (exc.strerror or str(exc)).splitlines()[0].lower()
    where = exc.filename if isinstance(exc.filename, str) else path
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        hint = (
            "this user must be able to read and write the queue directory (and, to create it, its parent): "
            "permissions, owner, read-only mount"
        )
    elif exc.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = "free disk space, then run the same command again"
    else:
        hint = "check --queue"
    return QueueError(f"{where}: cannot {doing}: {reason}", hint=hint, path=path)


def _owner_only(path: str) -> None:
    """A queue directory that other users may read is tightened to the owner (0700)."""
    mode = os.stat(path).st_mode & 0o777
    if not mode & 0o077:
        return
    try:
        os.chmod(path, mode & 0o700)
    except OSError as exc:
        raise QueueError(
            f"{path}: mode {mode:04o} lets other users read the queue, and it cannot be tightened: {exc.strerror}",
            hint="chmod 700 it, or run as its owner",
            path=path,
        ) from None
    log.info("%s: mode %04o tightened to %04o: the queue holds row data", path, mode, mode & 0o700)


def _out_of_descriptors(exc: lmdb.Error) -> bool:
    return getattr(exc, "errno", None) in (errno.EMFILE, errno.ENFILE) or "Too many open files" in str(exc)


def _fd_limit() -> int | str:
    """The soft limit of open files, or ``"?"`` where it cannot be known."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):
        return "?"
    return soft if soft != resource.RLIM_INFINITY else "?"


def _unfinished_segment(path: str) -> bool:
    """Whether an LMDB file that cannot be opened is one whose creation did not finish:
    LMDB writes two meta pages before anything else."""
    try:
        return os.path.getsize(path) < 2 * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return False


def _disk_full(path: str, margin: int = 16 << 20) -> bool:
    """Whether the filesystem of ``path`` has (almost) no space left."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < margin


def _mtime(path: str) -> float:
    try:
        return os.path.getmtime(path)
    except FileNotFoundError:
        return 0.0


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
