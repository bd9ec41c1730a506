"""``--dead-letter FILE``: where bad records go instead of stopping the run."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable

import orjson

from .errors import OlrBufferError
from .fsutil import write_all

log = logging.getLogger(__name__)

_TAIL_CHUNK = 1 << 16


class DeadLetterError(OlrBufferError):
    """The dead-letter file cannot be opened or written (a full disk, its permissions):
    the environment, exit 1. Nothing is lost: the record was not taken, and the same
    command writes it again."""


class DeadLetters:
    """``--dead-letter FILE``: bad records are written here (one JSON object per line:
    file, line, reason, the raw line) and skipped instead of stopping the run; the
    pipeline writes transactions abandoned by the retention limit here too.

    A line is written (and fsynced) before the reader's position moves past it, so a
    crash may write it twice, never lose it. A line cut short (a full disk, a kill in the
    middle of a write) is cut off before the next line is appended, so that every line
    stays a JSON object; its record is written again by the run that resumes. Reader
    processes append to the same file: each line is written under an ``flock``.
    """

    def __init__(self, path: str, on_put: Callable[[int], None] | None = None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.count = 0
        self.on_put = on_put  # called with the count after each line written
        parent = os.path.dirname(os.path.abspath(path))
        try:
            os.makedirs(parent, exist_ok=True)
            # owner-only: the lines hold row data (an existing file is tightened too)
            self._fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _error(path, "cannot open it", exc) from None
        try:
            os.fchmod(self._fd, os.fstat(self._fd).st_mode & 0o600)
        except PermissionError:
            pass  # another user's file: its owner chose its mode

    def put(self, file: str, line: int, reason: str, raw: bytes) -> None:
        self.put_doc(
            {"file": file, "line": line, "reason": reason, "raw": raw.decode("utf-8", errors="backslashreplace")},
            what=f"the bad record of {file}:{line}",
        )

    def put_doc(self, doc: dict, what: str = "a record") -> None:
        """One JSON line (an abandoned transaction: ``"kind": "abandoned_transaction"``),
        whole and fsynced, or :class:`DeadLetterError` and nothing of it in the file."""
        data = memoryview(orjson.dumps(doc) + b"\n")
        with self._lock:
            fd = self._fd
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError as exc:
                raise _error(self.path, f"cannot write {what}", exc) from None
            try:
                start = drop_torn_tail(fd, self.path)
                try:
                    write_all(fd, data)
                    os.fsync(fd)
                except OSError as exc:
                    try:
                        os.ftruncate(fd, start)  # no part of it stays (a full disk takes this back)
                    except OSError:
                        pass  # the next writer cuts it off
                    raise _error(self.path, f"cannot write {what}", exc) from None
            except OSError as exc:
                raise _error(self.path, f"cannot write {what}", exc) from None
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self.count += 1
            if self.on_put is not None:
                self.on_put(self.count)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class BadRecordLog:
    """`run`: each bad record its readers set aside in the dead-letter file, logged at
    WARNING (``FILE:LINE: reason``), read back from the file since the run started (the
    readers may be other processes): the first ``per_minute`` of each minute, then one
    line saying how many more. Abandoned transactions are logged where they are written."""

    def __init__(self, path: str, per_minute: int = 10) -> None:
        self.path = path
        self.per_minute = per_minute
        self.offset = whole_lines_end(path)  # this run's lines come after it
        self.count = 0  # bad records set aside since the run started
        self._window = -1e18  # when the current minute started
        self._logged = 0  # lines logged in it
        self._more = 0  # bad records of it not logged one by one

    def check(self, now: float, final: bool = False) -> None:
        """Log what came since the last check; ``final``: and what was left unsaid."""
        for doc in self._new_lines():
            if "kind" in doc:  # an abandoned transaction, not a bad record
                continue
            self.count += 1
            if now - self._window >= 60.0:
                self._close_window()
                self._window = now
            if self._logged < self.per_minute:
                self._logged += 1
                log.warning(
                    "%s:%s: bad record set aside in %s: %s",
                    doc.get("file"),
                    doc.get("line"),
                    self.path,
                    doc.get("reason"),
                    extra={
                        "file": doc.get("file"),
                        "line": doc.get("line"),
                        "reason": doc.get("reason"),
                        "dead_letter": self.path,
                    },
                )
            else:
                self._more += 1
        if final or now - self._window >= 60.0:
            self._close_window()

    def _close_window(self) -> None:
        if self._more:
            log.warning(
                "%d more bad record(s) set aside in %s within a minute, not logged one by one "
                "(%d in all since the start)",
                self._more,
                self.path,
                self.count,
                extra={"bad_records": self._more, "dead_letter": self.path, "total": self.count},
            )
        self._logged = self._more = 0

    def _new_lines(self) -> list[dict]:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return []  # not written yet
        try:
            size = os.fstat(fd).st_size
            data = os.pread(fd, size - self.offset, self.offset) if size > self.offset else b""
        finally:
            os.close(fd)
        data = data[: data.rfind(b"\n") + 1]  # whole lines: a line being written is read next time
        self.offset += len(data)
        docs = []
        for text in data.splitlines():
            try:
                doc = orjson.loads(text)
            except orjson.JSONDecodeError:
                continue
            if isinstance(doc, dict):
                docs.append(doc)
        return docs


def drop_torn_tail(fd: int, path: str) -> int:
    """Cut off a last line without ``\\n`` (a write cut short) of the open file ``fd``;
    returns the file's size after it."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return size
    keep = whole_lines_end_fd(fd, size)
    os.ftruncate(fd, keep)
    log.warning(
        "%s: cut off a last line of %d bytes without its end (a write cut short by a full disk or a kill); "
        "the run that resumes writes its record again",
        path,
        size - keep,
        extra={"dead_letter": path, "bytes": size - keep},
    )
    return keep


def whole_lines_end_fd(fd: int, size: int) -> int:
    """The offset just after the last ``\\n`` of the first ``size`` bytes of ``fd`` (0 if none)."""
    end = size
    while end > 0:
        begin = max(0, end - _TAIL_CHUNK)
        i = os.pread(fd, end - begin, begin).rfind(b"\n")
        if i >= 0:
            return begin + i + 1
        end = begin
    return 0


def whole_lines_end(path: str | None) -> int:
    """Where the whole lines of the dead-letter file ``path`` end: where a run's lines
    begin (a torn last line is cut off before they are written); 0 if there is none."""
    if not path:
        return 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return 0
    try:
        return whole_lines_end_fd(fd, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _error(path: str, doing: str, exc: OSError) -> DeadLetterError:
    reason = (exc.strerror or str(exc)).lower()
    return DeadLetterError(
        f"{path}: {doing}: {reason}",
        hint="free space on its disk, or fix its permissions (or give another --dead-letter file); nothing is lost: "
        "the same command resumes and writes it again",
        path=path,
    )
