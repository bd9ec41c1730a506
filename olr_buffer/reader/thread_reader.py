"""Reader threads: one per redo thread, from its stored position to the end of its input."""

from __future__ import annotations

import functools
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable

from ..changes import LWN, MARKER_CODES, BlockBuilder, RecordError
from ..faults import fault_point
from ..txbuffer import BlockAppender
from .dead_letters import DeadLetters
from .errors import InputError, MissingSequenceError
from .files import CorruptCompressedFile, LogFile, TruncatedCompressedFile, check_contiguous, is_log_file, scan
from .position import ReaderPosition
from .records import decode_line

DEFAULT_BLOCK_RECORDS = 4096
DEFAULT_BLOCK_BYTES = 1 << 20
MAX_LINE_BYTES = 64 << 20  # a longer line is refused: it is damage, not a record
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, accepted at the start of a file
#: Follow mode: how long the newest ``.jsonl.zst`` of a thread may stay truncated (empty,
#: or ending inside a zstd frame: still being copied in) before it is bad input.
TRUNCATED_ZST_WAIT_SECONDS = 60.0


@dataclass(slots=True)
class ReaderStats:
    """What a reader appended this run (its position says how far it read)."""

    records: int = 0
    blocks: int = 0


class ThreadReader:
    """Reads one redo thread's log files into the queue, one block per append.

    Each append carries the position after its last record, so after a crash the reader
    resumes exactly there. On bad input, the records before the bad line are appended
    first, then :class:`InputError` is raised: nothing accepted is lost.
    """

    def __init__(
        self,
        queue: BlockAppender,
        input_dir: str,
        thread: int,
        files: dict[int, LogFile],
        position: ReaderPosition | None,
        *,
        block_records: int = DEFAULT_BLOCK_RECORDS,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        on_append: Callable[[], None] | None = None,
        stop: threading.Event | None = None,
        dead_letters: DeadLetters | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        floor: Callable[[], int] | None = None,
        queue_end: Callable[[], int] | None = None,
        on_closed: Callable[[int], None] | None = None,
    ) -> None:
        self.queue = queue
        # ``floor()``: the SCN of the last commit published. The first record this reader
        # reads, and the first after a ``close``, must lie above it: only there can a
        # thread in play go back below what was published (after a replay that took its
        # input as complete, or a close). Other records lie above the thread's progress.
        self.floor = floor
        self._check_floor = floor is not None
        # follow mode, while closed: ``queue_end()`` is read before looking at the file; if
        # nothing came after the close, the thread is confirmed closed through that index
        # (``closed_through``, and ``on_closed(index)``)
        self.queue_end = queue_end
        self.on_closed = on_closed
        self.closed_through = -1
        self.dead_letters = dead_letters
        self.max_line_bytes = max_line_bytes
        self.input_dir = input_dir
        self.thread = thread
        self.files = files
        self.pos = position or ReaderPosition(thread, min(files) if files else 1)
        self.block_records = block_records
        self.block_bytes = block_bytes
        self.on_append = on_append or (lambda: None)
        self.stop = stop or threading.Event()
        self.stats = ReaderStats()
        self._builder = BlockBuilder(thread)
        self._builder.progress = self.pos.progress
        self._builder.closed = self.pos.closed
        # follow mode: the file being read, held open, so that a copy put in its place
        # (rsync: temporary file, rename) can be compared with what was read of it
        self._held: dict[int, int] = {}
        # follow mode: (sequence, offset, size) when the file ended inside a line: the
        # line is read again only once the file has grown
        self._partial_at: tuple[int, int, int] | None = None

    # -- offline -----------------------------------------------------------------------

    def read_to_end(self) -> None:
        """Read every remaining file of the thread; the position is then marked finished.

        The queue gets only the thread's real progress: that the input is complete is the
        replay's knowledge (it releases every commit at the end), not the queue's, so the
        same queue can later take more input, by ``replay`` or ``run``.
        """
        pos = self.pos
        if self.files and pos.sequence > max(self.files):
            raise InputError(
                os.path.join(self.input_dir, f"redo_{self.thread}_{pos.sequence - 1}.jsonl"),
                None,
                f"thread {self.thread} was read up to sequence {pos.sequence - 1}, but the input ends at {max(self.files)}",
                hint="the input directory no longer holds the logs this queue was built from",
            )
        files = check_contiguous(self.input_dir, self.thread, self.files, start=pos.sequence) if self.files else []
        for i, lf in enumerate(files):
            if self.stop.is_set():
                self._flush()
                return
            self._read_file(lf, final=True)
            if i + 1 < len(files):
                pos.sequence, pos.offset, pos.line = files[i + 1].sequence, 0, 0
        if self.stop.is_set():
            self._flush()
            return
        if not pos.finished or self._builder.count:
            pos.finished = True
            self._flush(force=True)

    # -- follow ------------------------------------------------------------------------

    def follow(self, poll_interval: float = 0.1) -> None:
        """Tail the thread's logs as they grow and switch, until ``stop`` is set.

        Sequence ``s`` is complete once ``redo_<t>_<s+1>`` exists (or when it is an archived
        ``.jsonl.zst``); until then a last line without ``\n`` is not read. Whatever was read
        is appended as soon as no more complete lines are there, so that latency stays low.
        """
        pos = self.pos
        pos.finished = False  # following: the input is not complete (written with the next block)
        last_gap_check = 0.0
        read_whole: int | None = None  # a complete (archived) sequence read to its end
        truncated_since: float | None = None  # the newest .zst has been truncated since then
        while not self.stop.is_set():
            # read before looking at the file: every block below it was written before
            confirm = self.queue_end() if pos.closed and self.queue_end else None
            lf = self._log_file(pos.sequence)
            if lf is None:
                if pos.offset or pos.line:
                    raise InputError(
                        os.path.join(self.input_dir, f"redo_{self.thread}_{pos.sequence}.jsonl"),
                        None,
                        "file disappeared while being read",
                        hint="a log file must stay until the next sequence exists and has been read",
                    )
                if not self.files:
                    self._adopt_first_sequence()
                self._flush()
                self.stop.wait(poll_interval)
                continue
            nxt = self._log_file(pos.sequence + 1)
            complete = nxt is not None or lf.compressed
            if read_whole == pos.sequence and nxt is None:
                read = 0  # nothing can be added to an archived log: wait for the next one
            elif not self._check_not_shrunk(lf) and not complete:
                read = 0  # still the same unfinished last line
            else:
                newest_zst = lf.compressed and nxt is None
                try:
                    if newest_zst and os.path.getsize(lf.path) == 0:
                        raise TruncatedCompressedFile("empty .zst file")
                    read = self._read_file(lf, final=complete, truncated_ok=newest_zst)
                    truncated_since = None
                    if complete:
                        read_whole = pos.sequence
                except TruncatedCompressedFile as exc:
                    # still being copied in: read again (what it held whole is kept) until whole
                    now = time.monotonic()
                    truncated_since = truncated_since or now
                    if now - truncated_since >= TRUNCATED_ZST_WAIT_SECONDS:
                        raise InputError(lf.path, pos.line + 1, f"{exc}, still after {TRUNCATED_ZST_WAIT_SECONDS:.0f}s",
                                         hint="write archived logs under a temporary name and rename them") from None
                    read = 0
            if self.stop.is_set():
                break
            if nxt is not None:
                self._flush()
                pos.sequence, pos.offset, pos.line = nxt.sequence, 0, 0
                self._release(lf.sequence)
                continue
            now = time.monotonic()
            if now - last_gap_check > 5.0:
                last_gap_check = now
                self._check_no_gap_after(pos.sequence)
            if not read:
                self._flush()
                if confirm is not None and pos.closed and confirm != self.closed_through:
                    self.closed_through = confirm
                    if self.on_closed:
                        self.on_closed(confirm)
                self.stop.wait(poll_interval)
        self._flush()
        for seq in list(self._held):
            self._release(seq)

    def _release(self, seq: int) -> None:
        fd = self._held.pop(seq, None)
        if fd is not None:
            os.close(fd)

    def _log_file(self, seq: int) -> LogFile | None:
        for compressed, name in ((False, f"redo_{self.thread}_{seq}.jsonl"), (True, f"redo_{self.thread}_{seq}.jsonl.zst")):
            path = os.path.join(self.input_dir, name)
            if is_log_file(self.input_dir, path):
                lf = LogFile(self.thread, seq, path, compressed)
                self.files[seq] = lf
                return lf
        return None

    def _adopt_first_sequence(self) -> None:
        """A thread in play without files yet starts at its lowest sequence once one appears."""
        seqs = scan(self.input_dir).get(self.thread)
        if seqs:
            self.pos.sequence = min(seqs)

    def _check_no_gap_after(self, seq: int) -> None:
        later = [s for s in scan(self.input_dir).get(self.thread, {}) if s > seq + 1]
        if later:
            raise MissingSequenceError(
                os.path.join(self.input_dir, f"redo_{self.thread}_{seq + 1}.jsonl"),
                None,
                f"thread {self.thread} is missing sequence {seq + 1} (sequence {min(later)} exists)",
                hint="the redo must be complete: restore the missing log file",
            )

    def _check_not_shrunk(self, lf: LogFile) -> bool:
        """Check that the file only grew since it was last read; whether it may hold more
        to read than the unfinished line seen last time.

        A file replaced by a copy (a new inode: rsync writes a temporary file and renames
        it) is read on if the copy holds the same bytes up to the read position."""
        pos = self.pos
        try:
            st = os.stat(lf.path)
        except FileNotFoundError:
            raise InputError(lf.path, pos.line or None, "file disappeared while being read") from None
        held = self._held.get(lf.sequence)
        if held is None:
            held = self._hold(lf)
        old = os.fstat(held)
        if (old.st_dev, old.st_ino) != (st.st_dev, st.st_ino):
            self._adopt_copy(lf, held, old.st_size)
        if not lf.compressed and st.st_size < pos.offset:
            raise InputError(lf.path, pos.line, f"file shrank to {st.st_size} bytes, below the {pos.offset} already read",
                             hint="a log file must only grow until the next sequence exists")
        return self._partial_at != (lf.sequence, pos.offset, st.st_size)

    def _hold(self, lf: LogFile) -> int:
        try:
            fd = os.open(lf.path, os.O_RDONLY)
        except FileNotFoundError:
            raise InputError(lf.path, self.pos.line or None, "file disappeared while being read") from None
        self._held[lf.sequence] = fd
        return fd

    def _adopt_copy(self, lf: LogFile, old_fd: int, old_size: int) -> None:
        """The file was replaced: read on in the new one if it starts with the same bytes
        as the old one up to the read position, else stop. (Bytes past the old file's end
        were read from the new one already.)"""
        pos = self.pos
        try:
            new_fd = os.open(lf.path, os.O_RDONLY)
        except FileNotFoundError:
            raise InputError(lf.path, pos.line or None, "file disappeared while being read") from None
        if lf.compressed or not _same_prefix(old_fd, new_fd, min(pos.offset, old_size)):
            os.close(new_fd)
            raise InputError(
                lf.path,
                pos.line or None,
                f"file was replaced while being read (new inode), and the new file differs in the "
                f"{pos.offset} bytes already read (up to line {pos.line})",
                hint="a log file must only grow until the next sequence exists; a copy must keep what was written",
            )
        os.close(old_fd)
        self._held[lf.sequence] = new_fd
        self._partial_at = None

    # -- reading -----------------------------------------------------------------------

    def _read_file(self, lf: LogFile, final: bool, truncated_ok: bool = False) -> int:
        """Read ``lf`` from the position to its end (``final``) or to its last complete
        line; returns the number of lines read. ``truncated_ok``: a ``.zst`` that ends
        inside a frame raises :class:`TruncatedCompressedFile` (what it held whole is kept)."""
        pos = self.pos
        first_line = pos.line
        b = self._builder
        add = b.add
        seq = lf.sequence
        line = pos.line
        offset = pos.offset
        last_scn, last_sub = pos.scn, pos.sub
        try:
            fh = lf.open()
        except OSError as exc:
            raise InputError(lf.path, None, f"cannot open: {exc.strerror}") from None
        with fh:
            try:
                _skip(fh, offset, lf, line)
                if offset == 0 and fh.peek(len(_BOM))[: len(_BOM)] == _BOM:
                    offset = len(fh.read(len(_BOM)))  # a byte order mark: not part of the first line
                limit = self.max_line_bytes + 1
                for raw in iter(functools.partial(fh.readline, limit), b""):
                    if raw[-1:] != b"\n" and len(raw) < limit and not final:
                        # not yet written completely: read once its "\n" is there
                        self._partial_at = (seq, offset, offset + len(raw))
                        break
                    line += 1
                    try:
                        if len(raw) >= limit:
                            raise RecordError(f"line longer than {self.max_line_bytes} bytes")
                        code, scn, sub, xid, payload = decode_line(raw)
                        if scn < last_scn or (scn == last_scn and sub < last_sub and code not in MARKER_CODES):
                            raise RecordError(
                                f"SCN goes back: (scn {scn}, sub {sub}) after (scn {last_scn}, sub {last_sub})"
                            )
                        if code not in MARKER_CODES:
                            if self._check_floor:
                                self._above_floor(scn)
                            add(code, scn, sub, xid, seq, line, payload)  # type: ignore[arg-type]
                    except RecordError as exc:
                        if self.dead_letters is None:
                            pos.line, pos.offset, pos.scn, pos.sub = line - 1, offset, last_scn, last_sub
                            self._flush()
                            raise InputError(
                                lf.path, line, str(exc), hint=_further_bad_lines(fh, raw, line, last_scn, last_sub,
                                                                                 limit, final),
                            ) from None
                        if len(raw) >= limit:
                            rest = _rest_of_line(fh)
                            if not final and not rest.endswith(b"\n"):
                                line -= 1  # still being written: quarantine it whole, later
                                break
                            raw += rest
                        self.dead_letters.put(lf.path, line, str(exc), raw)
                        offset += len(raw)
                        continue
                    offset += len(raw)
                    if code in MARKER_CODES:
                        if code == LWN:
                            b.heartbeat(scn)
                        else:
                            b.close(scn)
                            self._check_floor = self.floor is not None
                        if scn > last_scn:
                            last_scn, last_sub = scn, sub
                    else:
                        last_scn, last_sub = scn, sub
                    if b.count >= self.block_records or b.nbytes >= self.block_bytes:
                        pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub
                        self._flush()
                        if self.stop.is_set():
                            return line - first_line
            except (OSError, CorruptCompressedFile) as exc:
                # keep what was read before the damage; `line` is the last line read whole
                pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub
                self._flush()
                if truncated_ok and isinstance(exc, TruncatedCompressedFile):
                    raise
                reason = str(exc) if isinstance(exc, CorruptCompressedFile) else f"read failed: {exc}"
                raise InputError(lf.path, line + 1, reason) from None
        pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub
        return line - first_line

    def enable_floor(self, value) -> None:
        """Check the first record, and the first after a ``close``, against ``value.value``."""
        self.floor = lambda: value.value
        self._check_floor = True

    def _above_floor(self, scn: int) -> None:
        floor = self.floor()  # type: ignore[misc]
        if scn <= floor:
            after = "a close of this thread" if self._builder.closed or self.pos.closed else "the start of this run"
            raise RecordError(
                f"record at scn {scn} is at or below commit scn {floor}, already published (the first record "
                f"after {after} must lie above every published commit)"
            )
        self._check_floor = False

    def _flush(self, force: bool = False) -> None:
        b = self._builder
        if not b.count and not force and b.progress == self.pos.progress and b.closed == self.pos.closed:
            return
        self.pos.progress = b.progress
        self.pos.closed = b.closed
        records = b.build()
        self.queue.append(records, {self.pos.key: self.pos.encode()})
        fault_point("after_append")
        self.stats.records += b.count
        self.stats.blocks += 1
        b.reset()
        self.on_append()


#: How much of a file the scan after a bad line reads at most.
SCAN_BUDGET_BYTES = 64 << 20


def _further_bad_lines(fh, raw: bytes, line: int, last_scn: int, last_sub: int, limit: int, final: bool) -> str:
    """The hint of a bad line's error: the bad lines that a quick scan of the rest of the
    file finds (those that ``--dead-letter`` would set aside), so that all are fixed at once."""
    bad: list[int] = []
    complete = True
    scanned = 0
    try:
        if len(raw) >= limit:
            _rest_of_line(fh)
        for raw in iter(functools.partial(fh.readline, limit), b""):
            if raw[-1:] != b"\n" and len(raw) < limit and not final:
                break
            line += 1
            scanned += len(raw)
            if scanned > SCAN_BUDGET_BYTES:
                complete = False
                break
            try:
                if len(raw) >= limit:
                    _rest_of_line(fh)
                    raise RecordError("line too long")
                code, scn, sub, _xid, _payload = decode_line(raw)
                if scn < last_scn or (scn == last_scn and sub < last_sub and code != LWN):
                    raise RecordError("SCN goes back")
                if code != LWN or scn > last_scn:
                    last_scn, last_sub = scn, sub
            except RecordError:
                bad.append(line)
    except (OSError, CorruptCompressedFile):
        complete = False
    where = "the rest of this file" if complete else f"the next {scanned >> 20} MiB of this file"
    if not bad:
        found = f"a quick scan of {where} found no other bad line"
    else:
        shown = ", ".join(map(str, bad[:10])) + (", ..." if len(bad) > 10 else "")
        found = f"a quick scan of {where} found {len(bad)} more bad line(s): {shown}"
    return (
        f"{found}; fix them, then run the same command again (it resumes here), "
        "or set bad lines aside with --dead-letter FILE"
    )


def _same_prefix(fd_a: int, fd_b: int, length: int, chunk: int = 1 << 20) -> bool:
    """Whether two open files hold the same first ``length`` bytes."""
    at = 0
    while at < length:
        n = min(chunk, length - at)
        a, b = os.pread(fd_a, n, at), os.pread(fd_b, n, at)
        if a != b or len(a) < n:
            return False
        at += n
    return True


def _rest_of_line(fh) -> bytes:
    """Consume the rest of an over-long line (up to its newline) in pieces."""
    parts = []
    while True:
        chunk = fh.readline(1 << 20)
        parts.append(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return b"".join(parts)


def _skip(fh, offset: int, lf: LogFile, line: int) -> None:
    """Move to ``offset``, the start of line ``line + 1``: check that the byte before it
    still ends a line (else the file changed before the resume point)."""
    if offset <= 0:
        return
    if not lf.compressed:
        fh.seek(offset - 1)
    else:
        left = offset - 1
        while left:
            chunk = fh.read(min(left, 1 << 20))
            if not chunk:
                raise InputError(lf.path, None, f"file is shorter ({offset - 1 - left} bytes) than the position already read ({offset})")
            left -= len(chunk)
    last = fh.read(1)
    if not last:
        raise InputError(lf.path, None, f"file is shorter than the position already read ({offset})")
    if line and last != b"\n":
        raise InputError(
            lf.path,
            line + 1,
            f"the file changed before the resume point: byte {offset}, where this line was to start, is inside a line",
            hint="a log file must only grow; lines already read may not be rewritten: restore the file as it was, "
                 "or replay it into a new queue and changefeed",
        )
