"""Finding the redo-op log files of an input directory: ``redo_<thread>_<sequence>.jsonl[.zst]``."""

from __future__ import annotations

import io
import os
import re
import stat
from dataclasses import dataclass
from typing import Any, BinaryIO

import zstandard

from .errors import InputError, InputUnreadableError, MissingSequenceError

_NAME = re.compile(r"redo_([0-9]+)_([0-9]+)\.jsonl(\.zst)?")  # matched whole: fullmatch


@dataclass(frozen=True, slots=True)
class LogFile:
    """One redo log file: one thread's records for one log sequence."""

    thread: int
    sequence: int
    path: str
    compressed: bool

    def open(self) -> io.BufferedReader:
        """A binary stream of the file's (decompressed) content.

        A damaged or truncated ``.zst`` raises :class:`CorruptCompressedFile` while reading.
        """
        fh = open(self.path, "rb")
        if not self.compressed:
            return fh
        return io.BufferedReader(_ZstdRaw(fh), buffer_size=1 << 20)


def read_open_file(fd: int, compressed: bool) -> io.BufferedReader:
    """The content of the open file ``fd`` from its start (decompressed if ``compressed``),
    read with ``pread``: its offset does not move, and closing the stream leaves it open."""
    raw = _PreadRaw(fd)
    return io.BufferedReader(_ZstdRaw(raw) if compressed else raw, buffer_size=1 << 20)


def read_stream(fh: Any, compressed: bool) -> io.BufferedReader:
    """The content of ``fh``, any binary stream with ``read(n)`` (an object-store input
    file), decompressed if ``compressed``; closing the result closes ``fh``."""
    raw = _ReadRaw(fh)
    return io.BufferedReader(_ZstdRaw(raw) if compressed else raw, buffer_size=1 << 20)


class _ReadRaw(io.RawIOBase):
    def __init__(self, fh: Any) -> None:
        self._fh = fh

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self._fh.read(len(b))
        n = len(data)
        b[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            self._fh.close()
        super().close()


class _PreadRaw(io.RawIOBase):
    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._at = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = os.pread(self._fd, len(b), self._at)
        n = len(data)
        b[:n] = data
        self._at += n
        return n


class CorruptCompressedFile(Exception):
    """A ``.jsonl.zst`` file that is damaged or ends inside a frame."""


class TruncatedCompressedFile(CorruptCompressedFile):
    """A ``.jsonl.zst`` file that ends inside a frame: damaged, or still being copied in."""


class _ZstdRaw(io.RawIOBase):
    """Decompresses every frame of a zstd file and, unlike zstandard's stream reader,
    refuses a file that ends inside a frame (a truncated archive is not a short one), and
    a file of no bytes at all: not a zstd file (an empty log compresses to a frame of its
    own), but one emptied or not copied yet, whose records would be lost for good."""

    _CHUNK = 1 << 20

    def __init__(self, fh: BinaryIO | io.RawIOBase) -> None:
        self._fh = fh
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._in_frame = False
        self._buf = memoryview(b"")
        self._done = False
        self._empty = True  # no byte read yet

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while not self._buf:
            if self._done:
                return 0
            chunk = self._fh.read(self._CHUNK)
            if not chunk:
                self._done = True
                if self._empty:
                    raise TruncatedCompressedFile("empty .zst file (0 bytes): not a zstd frame")
                if self._in_frame:
                    raise TruncatedCompressedFile("truncated zstd data: the file ends inside a frame")
                return 0
            self._empty = False
            self._buf = memoryview(self._feed(chunk))
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            try:
                out.append(self._obj.decompress(data))
            except zstandard.ZstdError as exc:
                raise CorruptCompressedFile(f"corrupt zstd data: {exc}") from None
            if self._obj.eof:
                data = self._obj.unused_data
                self._obj = self._dctx.decompressobj()
                self._in_frame = False
            else:
                data = b""
                self._in_frame = True
        return b"".join(out)

    def close(self) -> None:
        self._fh.close()
        super().close()


def parse_name(name: str) -> tuple[int, int, bool] | None:
    """``(thread, sequence, compressed)`` for a log file name, ``None`` for any other name."""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    thread, seq = int(m.group(1)), int(m.group(2))
    if thread <= 0 or seq <= 0:
        return None
    return thread, seq, m.group(3) is not None


def scan(input_dir: str) -> dict[int, dict[int, LogFile]]:
    """Every log file of ``input_dir``, by thread and sequence. Other files are ignored."""
    try:
        names = os.listdir(input_dir)
    except FileNotFoundError:
        raise InputError(input_dir, None, "input directory does not exist") from None
    except NotADirectoryError:
        raise InputError(input_dir, None, "not a directory") from None
    except OSError as exc:
        raise InputUnreadableError(input_dir, None, "list the input directory", exc) from None
    threads: dict[int, dict[int, LogFile]] = {}
    for name in names:
        parsed = parse_name(name)
        if parsed is None:
            continue
        thread, seq, compressed = parsed
        path = os.path.join(input_dir, name)
        if not is_log_file(input_dir, path):
            continue
        seqs = threads.setdefault(thread, {})
        if seq in seqs:
            raise InputError(
                path,
                None,
                f"thread {thread} sequence {seq} is also in {os.path.basename(seqs[seq].path)}",
                hint="keep one file per thread and sequence",
            )
        seqs[seq] = LogFile(thread, seq, path, compressed)
    return threads


#: The names of log files, as errors show them.
LOG_FILE_NAMES = "redo_<thread>_<sequence>.jsonl or redo_<thread>_<sequence>.jsonl.zst"


def require_log_files(input_dir: str) -> None:
    """Raise :class:`InputError` naming ``input_dir`` and the names it should hold if it
    holds no log file (an empty or a wrong directory)."""
    if scan(input_dir):
        return
    others = sorted(os.listdir(input_dir))
    held = (
        f"it holds {len(others)} other name(s): {', '.join(others[:5])}{', ...' if len(others) > 5 else ''}"
        if others
        else "it is empty"
    )
    raise InputError(
        input_dir,
        None,
        f"no redo log files ({held}); expected names like {LOG_FILE_NAMES}",
        hint="check the input directory (olr-buffer simulate DIR writes a sample)",
    )


def is_log_file(input_dir: str, path: str) -> bool:
    """Whether ``path`` (in ``input_dir``) is a regular file to read. A symbolic link is
    followed only if it stays inside the input directory; one that leads out is refused,
    and so is one that leads nowhere (dangling, a loop) or a name of a log that is not a
    regular file: its records would be missing without a word."""
    # one stat decides: a log that appears (being created) or goes (archived) while it is
    # looked at is there or not, never "not a regular file"
    reason: str | None
    try:
        st = os.stat(path)  # follows a link
    except FileNotFoundError:
        if not os.path.islink(path):
            return False  # not there (yet, or any more)
        reason = f"symbolic link to {_link_target(path)}, which does not exist"
    except OSError as exc:  # a loop of links, ...
        why = (exc.strerror or str(exc)).lower()
        reason = (
            f"symbolic link to {_link_target(path)}, which cannot be followed: {why}"
            if os.path.islink(path)
            else f"cannot be read: {why}"
        )
    else:
        if stat.S_ISREG(st.st_mode):
            reason = None
        elif os.path.islink(path):
            reason = f"symbolic link to {_link_target(path)}, which is not a regular file"
        else:
            reason = "named like a log file, but not a regular file"
    if reason is not None:
        raise InputError(path, None, reason, hint="restore the log file, or remove what has its name")
    if os.path.islink(path):
        target = os.path.realpath(path)
        root = os.path.realpath(input_dir)
        if os.path.commonpath([root, target]) != root:
            raise InputError(
                path,
                None,
                f"symbolic link to {target}, outside the input directory",
                hint="copy or move the log file into the input directory; links are followed only within it",
            )
    return True


def _link_target(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def check_contiguous(input_dir: str, thread: int, files: dict[int, LogFile], start: int | None = None) -> list[LogFile]:
    """The files of one thread from sequence ``start`` (default: the lowest) in order.

    Raises :class:`MissingSequenceError` naming the thread and the first missing number.
    """
    if not files:
        return []
    seqs = sorted(files)
    first = seqs[0] if start is None else start
    last = seqs[-1]
    ordered = []
    for seq in range(first, last + 1):
        f = files.get(seq)
        if f is None:
            raise MissingSequenceError(
                os.path.join(input_dir, f"redo_{thread}_{seq}.jsonl"),
                None,
                f"thread {thread} is missing sequence {seq}"
                + (f" (files run from {seqs[0]} to {last})" if seq >= seqs[0] else f" (files start at {seqs[0]})"),
                hint="the redo must be complete: restore the missing log file",
            )
        ordered.append(f)
    return ordered
