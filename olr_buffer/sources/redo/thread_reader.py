"""Reader threads: one per redo thread, from its stored position to the end of its input."""

from __future__ import annotations

import codecs
import functools
import io
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from types import ModuleType
from typing import Any, BinaryIO

from ...changes import (
    BEGIN,
    COMPENSATION,
    DDL,
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BLOCK_RECORDS,
    DELETE,
    INSERT,
    LWN,
    MARKER_CODES,
    OP_CODES,
    BlockBuilder,
    Group,
    RecordError,
    encode_record,
)
from ...dead_letters import DeadLetterError, DeadLetters
from ...faults import fault_point
from ...txbuffer import BlockAppender
from .compiled import LINESCAN, READER_LOOP
from .errors import InputError, InputUnreadableError, MissingSequenceError
from .files import (
    CorruptCompressedFile,
    LogFile,
    TruncatedCompressedFile,
    check_contiguous,
    is_log_file,
    read_open_file,
    scan,
)
from .position import ReaderPosition
from .records import AFTER_MARKER, batch_decode, check_order, decode_line

MAX_LINE_BYTES = 64 << 20  # a longer line is refused: it is damage, not a record
_BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark, accepted at the start of a file
#: Follow mode: how long the newest ``.jsonl.zst`` of a thread may stay truncated (empty,
#: or ending inside a zstd frame: still being copied in) before it is bad input.
TRUNCATED_ZST_WAIT_SECONDS = 60.0
#: The shortest wait of a following reader between two looks, and the longest poll interval
#: under which it looks again sooner after finding lines (see :func:`idle_wait`).
IDLE_WAIT_MIN_SECONDS = 0.01
FAST_LOOK_POLL_SECONDS = 0.05
_CHUNK = 1 << 16  # how much of a file is read at once: 64 KiB (1 MiB chunks kept ~4 MB of lines and
# decoded records alive at once and ran no faster than reading line by line: cache misses)
_OK, _BREAK, _STOP = 0, 1, 2  # _slow_line and _fast_lines: go on, stop reading this file, stop set
log = logging.getLogger(__name__)
_loop_logged = False


class _Slow(Exception):
    """A line the fast loop leaves to the general path."""


class _Chained:
    """What the slow path reads: bytes already read from ``fh``, then ``fh`` itself
    (``readline(limit)`` as a binary file has it, and ``read``)."""

    __slots__ = ("_buf", "_at", "_fh")

    def __init__(self, buf: bytes, fh: BinaryIO) -> None:
        self._buf = buf
        self._at = 0
        self._fh = fh

    def readline(self, limit: int = -1) -> bytes:
        buf, at = self._buf, self._at
        if at >= len(buf):
            return self._fh.readline(limit)
        stop = len(buf) if limit < 0 else min(len(buf), at + limit)
        nl = buf.find(b"\n", at, stop)
        if nl >= 0:
            self._at = nl + 1
            return buf[at : nl + 1]
        self._at = stop
        head = buf[at:stop]
        if stop < len(buf) or (limit >= 0 and len(head) >= limit):
            return head
        return head + self._fh.readline(-1 if limit < 0 else limit - len(head))

    def read(self, n: int = -1) -> bytes:
        buf, at = self._buf, self._at
        if at >= len(buf):
            return self._fh.read(n)
        if n < 0:
            self._at = len(buf)
            return buf[at:] + self._fh.read()
        self._at = min(len(buf), at + n)
        return buf[at : self._at]

    def rest(self) -> bytes:
        """The bytes read from ``fh`` that were not read from here."""
        return self._buf[self._at :]


@dataclass(slots=True)
class ReaderStats:
    """What a reader appended this run (its position says how far it read)."""

    records: int = 0
    blocks: int = 0


class ThreadInput:
    """One redo thread's reader as the source and :class:`ReaderGroup` see it, in this
    process (:class:`ThreadReader`) or in a child (``ReaderProcess``) alike: the thread,
    its files and position (the first sequence when none is stored), what it appended
    (``stats``), and how it appends (blocks, ``on_append``) and stops."""

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
    ) -> None:
        self.queue = queue
        self.input_dir = input_dir
        self.thread = thread
        self.files = files
        self.pos = position or ReaderPosition(thread, min(files) if files else 1)
        self.block_records = block_records
        self.block_bytes = block_bytes
        self.on_append = on_append or (lambda: None)
        self.stop = stop or threading.Event()
        self.stats = ReaderStats()


class ThreadReader(ThreadInput):
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
        dead_letters: DeadLetters | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        floor: Callable[[], int] | None = None,
        queue_end: Callable[[], int] | None = None,
        on_closed: Callable[[int], None] | None = None,
        **common: Any,
    ) -> None:
        """``common``: :class:`ThreadInput`'s (``block_records``, ``block_bytes``,
        ``on_append``, ``stop``)."""
        super().__init__(queue, input_dir, thread, files, position, **common)
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
        # read files in chunks (False: line by line, as before; the tests compare the two)
        self.chunked = True
        # the compiled loop that takes the lines of a chunk, where it is built (None: the
        # pure-Python loop, the reference; the tests compare the two; see compiled.py)
        self.linescan: ModuleType | None = LINESCAN
        global _loop_logged
        if not _loop_logged:
            _loop_logged = True
            log.debug("redo reader loop: %s", READER_LOOP)
        self._builder = BlockBuilder(thread)
        self._builder.progress = self.pos.progress
        self._builder.closed = self.pos.closed
        # follow mode: the file being read, held open (descriptor, compressed), so that a
        # copy put in its place (rsync: temporary file, rename; an archive .zst) can be
        # compared with what was read of it
        self._held: dict[int, tuple[int, bool]] = {}
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
                f"thread {self.thread} was read up to sequence {pos.sequence - 1}, "
                f"but the input ends at {max(self.files)}",
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
        is appended as soon as no more complete lines are there, so that latency stays low;
        then it looks again after :func:`idle_wait` (soon after lines were found).
        """
        pos = self.pos
        pos.finished = False  # following: the input is not complete (written with the next block)
        empty_looks = 0  # looks in a row that found no new line
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
            try:
                if read_whole == pos.sequence and nxt is None:
                    read = 0  # nothing can be added to an archived log: wait for the next one
                elif not self._check_not_shrunk(lf) and not complete:
                    read = 0  # still the same unfinished last line
                else:
                    newest_zst = lf.compressed and nxt is None
                    try:
                        read = self._read_file(lf, final=complete, truncated_ok=newest_zst)
                        truncated_since = None
                        if complete:
                            read_whole = pos.sequence
                    except TruncatedCompressedFile as exc:
                        # still being copied in: read again (what it held whole is kept) until whole
                        now = time.monotonic()
                        truncated_since = truncated_since or now
                        if now - truncated_since >= TRUNCATED_ZST_WAIT_SECONDS:
                            raise InputError(
                                lf.path,
                                pos.line + 1,
                                f"{exc}, still after {TRUNCATED_ZST_WAIT_SECONDS:.0f}s",
                                hint="write archived logs under a temporary name and rename them",
                            ) from None
                        read = 0
            except InputError:
                if not os.path.exists(lf.path) and self._moved(lf):
                    continue  # archived (.jsonl -> .jsonl.zst) between the look and the read: read that
                raise
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
                self.stop.wait(idle_wait(poll_interval, empty_looks))
                empty_looks += 1
            else:
                empty_looks = 0
        self._flush()
        for seq in list(self._held):
            self._release(seq)

    def _release(self, seq: int) -> None:
        held = self._held.pop(seq, None)
        if held is not None:
            os.close(held[0])

    def _moved(self, lf: LogFile) -> bool:
        """Whether ``lf``'s sequence is now in another file (its archive, or the other way round)."""
        now = self._log_file(lf.sequence)
        return now is not None and now.path != lf.path

    def _log_file(self, seq: int) -> LogFile | None:
        for compressed, name in (
            (False, f"redo_{self.thread}_{seq}.jsonl"),
            (True, f"redo_{self.thread}_{seq}.jsonl.zst"),
        ):
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
        """A later sequence of the thread exists but ``seq + 1`` does not: a missing log.
        (Both may have appeared since the reader last looked for ``seq + 1``: a reader
        behind by two log switches; it reads on into them.)"""
        seqs = scan(self.input_dir).get(self.thread, {})
        later = [s for s in seqs if s > seq + 1]
        if later and seq + 1 not in seqs:
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
        it; the capture archives the sequence as ``.jsonl.zst`` and removes the plain file)
        is read on if the copy holds the same bytes (decompressed) up to the read position."""
        pos = self.pos
        try:
            st = os.stat(lf.path)
        except FileNotFoundError:
            raise InputError(lf.path, pos.line or None, "file disappeared while being read") from None
        held = self._held.get(lf.sequence)
        if held is None:
            held = self._hold(lf)
        old = os.fstat(held[0])
        if (old.st_dev, old.st_ino) != (st.st_dev, st.st_ino):
            self._adopt_copy(lf, held)
        if not lf.compressed and st.st_size < pos.offset:
            raise InputError(
                lf.path,
                pos.line,
                f"file shrank to {st.st_size} bytes, below the {pos.offset} already read",
                hint="a log file must only grow until the next sequence exists",
            )
        return self._partial_at != (lf.sequence, pos.offset, st.st_size)

    def _hold(self, lf: LogFile) -> tuple[int, bool]:
        try:
            fd = os.open(lf.path, os.O_RDONLY)
        except FileNotFoundError:
            raise InputError(lf.path, self.pos.line or None, "file disappeared while being read") from None
        self._held[lf.sequence] = held = (fd, lf.compressed)
        return held

    def _adopt_copy(self, lf: LogFile, old: tuple[int, bool]) -> None:
        """The file was replaced: read on in the new one if it starts with the same bytes
        as the old one up to the read position, else stop. (Bytes past the old file's end
        were read from the new one already.) A ``.jsonl.zst`` in the place of a plain
        file (or the other way round) is compared decompressed."""
        pos = self.pos
        old_fd, old_compressed = old
        try:
            new_fd = os.open(lf.path, os.O_RDONLY)
        except FileNotFoundError:
            raise InputError(lf.path, pos.line or None, "file disappeared while being read") from None
        try:
            same = _same_content(
                read_open_file(old_fd, old_compressed), read_open_file(new_fd, lf.compressed), pos.offset
            )
        except CorruptCompressedFile as exc:
            os.close(new_fd)
            raise InputError(
                lf.path,
                pos.line or None,
                f"file was replaced while being read (new inode): {exc}",
                hint="write archived logs under a temporary name and rename them",
            ) from None
        if not same:
            os.close(new_fd)
            raise InputError(
                lf.path,
                pos.line or None,
                f"file was replaced while being read (new inode), and the new file differs in the "
                f"{pos.offset} bytes already read (up to line {pos.line})",
                hint="a log file must only grow until the next sequence exists; a copy must keep what was written",
            )
        os.close(old_fd)
        self._held[lf.sequence] = (new_fd, lf.compressed)
        self._partial_at = None

    # -- reading -----------------------------------------------------------------------

    def _read_file(self, lf: LogFile, final: bool, truncated_ok: bool = False) -> int:
        """Read ``lf`` from the position to its end (``final``) or to its last complete
        line; returns the number of lines read. ``truncated_ok``: a ``.zst`` that ends
        inside a frame raises :class:`TruncatedCompressedFile` (what it held whole is kept).

        The file is read in chunks of ``_CHUNK`` bytes; the complete lines of a chunk go
        through :meth:`_fast_lines` (one decode of all of them in C, then a tight loop).
        A line it does not take (an invalid one, one too long, the last one without
        ``\n``) is read by :meth:`_slow_line`, the line-by-line reader that words errors,
        quarantines bad lines and waits for lines still being written; then the chunked
        reading goes on after it.
        """
        pos = self.pos
        first_line = pos.line
        # line, offset, last scn, last sub: the state after the last line taken
        st = [pos.line, pos.offset, pos.scn, pos.sub]
        try:
            fh = lf.open()
        except FileNotFoundError as exc:
            raise InputError(lf.path, None, f"cannot open: {exc.strerror}") from None
        except OSError as exc:
            raise InputUnreadableError(lf.path, None, "open it", exc) from None
        with fh:
            try:
                _skip(fh, st[1], lf, st[0])
                if st[1] == 0 and fh.peek(len(_BOM))[: len(_BOM)] == _BOM:
                    st[1] = len(fh.read(len(_BOM)))  # a byte order mark: not part of the first line
                if self.chunked:
                    status = self._read_chunks(fh, lf, final, st)
                else:  # line by line: the reference that reading in chunks must equal
                    src = _Chained(b"", fh)
                    while (status := self._slow_line(src, lf, final, st)) == _OK:
                        pass
                if status == _STOP:
                    return st[0] - first_line
            except (OSError, CorruptCompressedFile) as exc:
                # keep what was read before the damage; `line` is the last line read whole
                pos.line, pos.offset, pos.scn, pos.sub = st
                self._flush()
                if truncated_ok and isinstance(exc, TruncatedCompressedFile):
                    raise
                if isinstance(exc, OSError):  # the disk, not the input
                    raise InputUnreadableError(lf.path, st[0] + 1, "read it", exc) from None
                raise InputError(lf.path, st[0] + 1, str(exc)) from None
        pos.line, pos.offset, pos.scn, pos.sub = st
        return st[0] - first_line

    def _read_chunks(self, fh: io.BufferedReader, lf: LogFile, final: bool, st: list) -> int:
        """The lines of ``fh`` from where it stands, chunk by chunk: ``_BREAK`` at the end
        (or at a line still being written), ``_STOP`` when ``stop`` was set."""
        buf = b""
        eof = False
        while True:
            if not eof and b"\n" not in buf:
                # only when no complete line is waiting: a read that fails (a damaged .zst)
                # then keeps every line before the damage
                data = fh.read1(_CHUNK)
                if data:
                    buf = buf + data if buf else data
                else:
                    eof = True
            end = buf.rfind(b"\n")
            if end >= 0:
                status, used = self._fast_lines(buf, end, lf.sequence, st)
                if status == _STOP:
                    return _STOP
                if used > end:  # every line taken
                    buf = buf[end + 1 :]
                    continue
                buf = buf[used:]  # a line left to the slow path
            elif not buf:
                if eof:
                    return _BREAK
                continue
            elif not eof and len(buf) < _CHUNK:
                continue  # read on to the line's end
            # the slow path reads one line: an invalid one, one longer than a chunk, or the
            # last one without "\n"; then the chunks go on after it
            src = _Chained(buf, fh)
            status = self._slow_line(src, lf, final, st)
            buf = src.rest()
            if status != _OK:
                return status

    def _fast_lines(self, buf: bytes, end: int, seq: int, st: list) -> tuple[int, int]:
        """Take the complete lines of ``buf[:end]`` (``buf[end]`` is a newline) as the
        line-by-line reader would; ``(status, bytes taken)``. It stops before a line that
        :meth:`_slow_line` must read (an invalid line, or one too long): the bytes taken
        are then fewer than ``end + 1``.

        The lines are decoded in one call (msgspec's ``decode_lines``) when that cannot
        mix them up: every line is one object, ``{`` to ``}``, so that a value spanning
        two lines, or two values on one line, cannot decode (see :func:`batch_decodable`).
        Records the typed decode cannot vouch for go through :func:`decode_line`. The
        block builder's bookkeeping (``BlockBuilder.add``) is folded into the loop.
        """
        if self.linescan is not None:
            return self._compiled_lines(buf, end, seq, st)
        region = buf[:end]
        lines = region.split(b"\n")
        decoded = batch_decode(region, lines, self.max_line_bytes)
        line, start, last_scn, last_sub = st
        line0 = line
        # the offset after the first n lines, from the last one worked out (at flushes, at the end)
        offset_after = _offsets(lines, start, end)

        pos = self.pos
        b = self._builder
        groups = b.groups
        order = b.order
        count, nbytes, progress, closed = b.count, b.nbytes, b.progress, b.closed
        block_records, block_bytes = self.block_records, self.block_bytes
        check_floor = self._check_floor
        encode = encode_record
        op_codes = OP_CODES.get
        utf8 = codecs.utf_8_decode
        status = _OK
        try:
            for r in decoded if decoded is not None else repeat(None, len(lines)):
                line += 1
                if r is not None:
                    try:
                        code = op_codes(r.op)
                        scn = r.scn
                        sub = r.sub or 0
                        if code is None:
                            raise _Slow
                        if code >= LWN:  # lwn, close
                            if scn < last_scn:
                                raise _Slow  # the slow path words it
                            if scn > progress:
                                progress = scn
                            if code == LWN:
                                closed = False
                            else:
                                closed = True
                                check_floor = self._check_floor = self.floor is not None
                            last_scn, last_sub = scn, AFTER_MARKER  # the next record lies above scn
                            continue
                        if check_floor or scn < last_scn or (scn == last_scn and sub < last_sub):
                            raise _Slow
                        xid = r.xid
                        if not xid:
                            raise _Slow
                        if INSERT <= code <= DELETE:
                            owner, table, rid = r.owner, r.table, r.rid
                            if owner is None or table is None or rid is None:
                                raise _Slow
                            before = r.before
                            if before is not None:
                                before = utf8(before)[0]  # straight from the Raw (UTF-8 checked)
                                if before[0] != "{":
                                    if before != "null":
                                        raise _Slow
                                    before = None
                            after = r.after
                            if after is not None:
                                after = utf8(after)[0]
                                if after[0] != "{":
                                    if after != "null":
                                        raise _Slow
                                    after = None
                            if r.rollback:
                                code |= COMPENSATION
                                rec = encode([code, scn, sub, seq, line, rid])
                            else:
                                if (before is None and code != INSERT) or (after is None and code != DELETE):
                                    raise _Slow
                                rec = encode(
                                    [code, scn, sub, seq, line, r.tm, owner, table, r.obj, rid, before, after, None]
                                )
                        elif code == DDL:
                            raise _Slow
                        else:  # begin, commit, rollback
                            tm = r.tm
                            rec = encode([code, scn, sub, seq, line, tm])
                        g = groups.get(xid)
                        if g is None or (code == BEGIN and g.ends):
                            xid.encode()  # a lone surrogate: UnicodeEncodeError, the slow path words it
                            g = Group(xid)
                            groups[xid] = g
                            order.append(g)
                        recs = g.records
                        if not recs:
                            g.first_scn = scn
                        recs.append(rec)
                        if code <= DELETE:
                            if code != BEGIN:
                                g.rows += 1
                            elif g.begin_scn < 0:
                                g.begin_scn = scn
                                g.begin_tm = tm
                        elif code & COMPENSATION:
                            g.comps += 1
                        else:  # commit, rollback
                            g.ends.append([code, scn, seq, line, tm])
                    except (_Slow, UnicodeEncodeError):
                        pass
                    else:
                        count += 1
                        nbytes += len(rec)
                        closed = False
                        if scn - 1 > progress:
                            progress = scn - 1
                        last_scn, last_sub = scn, sub
                        if count >= block_records or nbytes >= block_bytes:
                            b.count, b.nbytes, b.progress, b.closed = count, nbytes, progress, closed
                            pos.line, pos.offset, pos.scn, pos.sub = (
                                line,
                                offset_after(line - line0),
                                last_scn,
                                last_sub,
                            )
                            self._flush()
                            count, nbytes = 0, 0
                            if self.stop.is_set():
                                status = _STOP
                                break
                        continue
                # the general path: any line, as decode_line and BlockBuilder take it
                raw = lines[line - line0 - 1]
                if len(raw) >= self.max_line_bytes:
                    line -= 1
                    break
                b.count, b.nbytes, b.progress, b.closed = count, nbytes, progress, closed
                try:
                    last_scn, last_sub = self._take_line(b, raw, seq, line, last_scn, last_sub)
                except RecordError:
                    line -= 1  # the slow path reads it again, and handles the error
                    check_floor = self._check_floor
                    break
                check_floor = self._check_floor
                count, nbytes, progress, closed = b.count, b.nbytes, b.progress, b.closed
                if count >= block_records or nbytes >= block_bytes:
                    pos.line, pos.offset, pos.scn, pos.sub = line, offset_after(line - line0), last_scn, last_sub
                    self._flush()
                    count, nbytes = 0, 0
                    if self.stop.is_set():
                        status = _STOP
                        break
        finally:
            b.count, b.nbytes, b.progress, b.closed = count, nbytes, progress, closed
            st[0], st[1], st[2], st[3] = line, offset_after(line - line0), last_scn, last_sub
        return status, st[1] - start

    def _compiled_lines(self, buf: bytes, end: int, seq: int, st: list) -> tuple[int, int]:
        """:meth:`_fast_lines` with its loop compiled (``linescan.take_lines``): the same
        records, positions and stops. The compiled loop takes runs of lines and returns at a
        full block (flushed here) and at a line it leaves to the general path (taken here by
        :meth:`_take_line`, as in :meth:`_fast_lines`)."""
        linescan = self.linescan
        assert linescan is not None
        take_lines, general, full_block = linescan.take_lines, linescan.GENERAL, linescan.FULL
        lines = buf[:end].split(b"\n")
        n = len(lines)
        line0, start, last_scn, last_sub = st
        offset_after = _offsets(lines, start, end)

        pos = self.pos
        b = self._builder
        # count, nbytes, progress, closed, last scn, last sub, check floor
        state = [b.count, b.nbytes, b.progress, b.closed, last_scn, last_sub, self._check_floor]
        floor_set = self.floor is not None
        max_line_bytes = self.max_line_bytes
        status = _OK
        i = 0  # lines[:i] are taken
        try:
            while i < n:
                i, why = take_lines(
                    lines,
                    i,
                    seq,
                    line0,
                    state,
                    b.groups,
                    b.order,
                    Group,
                    floor_set,
                    self.block_records,
                    self.block_bytes,
                    max_line_bytes,
                )
                self._check_floor = state[6]
                if why == general:
                    # the general path: any line, as decode_line and BlockBuilder take it
                    raw = lines[i]
                    if len(raw) >= max_line_bytes:
                        break  # the slow path reads it
                    b.count, b.nbytes, b.progress, b.closed = state[:4]
                    try:
                        state[4], state[5] = self._take_line(b, raw, seq, line0 + i + 1, state[4], state[5])
                    except RecordError:
                        break  # the slow path reads it again, and handles the error
                    i += 1
                    state[:4] = b.count, b.nbytes, b.progress, b.closed
                    state[6] = self._check_floor
                    full = b.count >= self.block_records or b.nbytes >= self.block_bytes
                else:
                    full = why == full_block
                if full:
                    b.count, b.nbytes, b.progress, b.closed = state[:4]
                    pos.line, pos.offset, pos.scn, pos.sub = line0 + i, offset_after(i), state[4], state[5]
                    self._flush()
                    state[0] = state[1] = 0
                    if self.stop.is_set():
                        status = _STOP
                        break
        finally:
            b.count, b.nbytes, b.progress, b.closed = state[:4]
            st[0], st[1], st[2], st[3] = line0 + i, offset_after(i), state[4], state[5]
        return status, st[1] - start

    def _slow_line(self, src: _Chained, lf: LogFile, final: bool, st: list) -> int:
        """Read one line from ``src`` as the line-by-line reader always did: the path of
        over-long lines, invalid ones (the error, or the dead-letter file) and a last line
        still being written. Returns ``_OK``, ``_BREAK`` (stop reading this file: at its
        end, or at a line still being written) or ``_STOP`` (``stop`` is set)."""
        pos = self.pos
        b = self._builder
        seq = lf.sequence
        line, offset, last_scn, last_sub = st
        limit = self.max_line_bytes + 1
        raw = src.readline(limit)
        if not raw:
            return _BREAK
        if raw[-1:] != b"\n" and len(raw) < limit and not final:
            # not yet written completely: read once its "\n" is there
            self._partial_at = (seq, offset, offset + len(raw))
            return _BREAK
        line += 1
        try:
            if len(raw) >= limit:
                raise RecordError(f"line longer than {self.max_line_bytes} bytes")
            new_scn, new_sub = self._take_line(b, raw, seq, line, last_scn, last_sub)
        except RecordError as exc:
            if self.dead_letters is None:
                pos.line, pos.offset, pos.scn, pos.sub = line - 1, offset, last_scn, last_sub
                self._flush()
                hint = (
                    exc.hint
                    if isinstance(exc, BelowPublishedError)
                    else _further_bad_lines(src, raw, line, last_scn, last_sub, limit, final)
                )
                raise InputError(lf.path, line, str(exc), hint=hint) from None
            if len(raw) >= limit:
                rest = _rest_of_line(src)
                if not final and not rest.endswith(b"\n"):
                    return _BREAK  # still being written: quarantine it whole, later
                raw += rest
            try:
                self.dead_letters.put(lf.path, line, str(exc), raw)
            except DeadLetterError:  # not taken: what was accepted before it is kept, it is read again
                pos.line, pos.offset, pos.scn, pos.sub = line - 1, offset, last_scn, last_sub
                self._flush()
                raise
            st[0], st[1] = line, offset + len(raw)
            return _OK
        offset += len(raw)
        last_scn, last_sub = new_scn, new_sub
        st[0], st[1], st[2], st[3] = line, offset, last_scn, last_sub
        if b.count >= self.block_records or b.nbytes >= self.block_bytes:
            pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub
            self._flush()
            if self.stop.is_set():
                return _STOP
        return _OK

    def enable_floor(self, value) -> None:
        """Check the first record, and the first after a ``close``, against ``value.value``."""
        self.floor = lambda: value.value
        self._check_floor = True

    def _take_line(self, b, raw: bytes, seq: int, line: int, last_scn: int, last_sub: int) -> tuple[int, int]:
        """Decode and check one line, then add it to block ``b`` (a record) or apply it to
        ``b`` (``lwn``, ``close``); the thread's new ``(last_scn, last_sub)``. On a
        :class:`RecordError` nothing is taken."""
        code, scn, sub, xid, payload = decode_line(raw)
        check_order(code, scn, sub, last_scn, last_sub)
        if code not in MARKER_CODES:
            if self._check_floor:
                self._above_floor(scn)
            b.add(code, scn, sub, xid, seq, line, payload)
            return scn, sub
        if code == LWN:
            b.heartbeat(scn)
        else:
            b.close(scn)
            self._check_floor = self.floor is not None
        return scn, AFTER_MARKER  # scn >= last_scn here; the next record lies above scn

    def _above_floor(self, scn: int) -> None:
        floor = self.floor()  # type: ignore[misc]
        if scn <= floor:
            if self._builder.closed or self.pos.closed:
                why, hint = "the first record after a close of this thread", None
            elif self.pos.scn < 0:
                # no record of this thread in the queue: commits were published without it
                why, hint = f"redo thread {self.thread} is new to this queue, and its first record", NEW_THREAD_HINT
            else:
                why, hint = "the first record after the start of this run", None
            raise BelowPublishedError(
                f"record at scn {scn} is at or below commit scn {floor}, already published ({why} must lie above "
                "every published commit)",
                hint=hint,
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


def idle_wait(poll_interval: float, empty_looks: int) -> float:
    """How long a following reader waits before it looks again, after ``empty_looks``
    looks in a row found no new line (0: the look before found lines).

    A commit is published only once every thread's reader has read past it (the
    watermark), so a full ``poll_interval`` after each read of a busy thread would add up
    to that much to every commit. With a poll interval of ``FAST_LOOK_POLL_SECONDS`` or
    less (``run`` polls at half its flush interval: latency was asked for), a reader whose
    capture is writing looks again after an eighth of it (at least
    ``IDLE_WAIT_MIN_SECONDS``), and the wait doubles with each look that finds nothing,
    up to ``poll_interval``: an idle input is looked at as often as before. A longer poll
    interval is kept as it is: each look that finds lines appends a block (an LMDB write,
    fsynced), which costs CPU where the flush interval hides the gain."""
    if poll_interval > FAST_LOOK_POLL_SECONDS:
        return poll_interval
    short = min(poll_interval, max(IDLE_WAIT_MIN_SECONDS, poll_interval / 8))
    return min(poll_interval, short * 2 ** min(empty_looks, 32))


class BelowPublishedError(RecordError):
    """A thread's first record (of the run, or after its ``close``) at or below a commit
    already published: not a line to fix, but input that this changefeed cannot take."""

    hint = (
        "the changefeed already holds later commits: what is added to its input must lie above them "
        "(the logs the capture writes next); to read other logs, replay them into a new queue and changefeed"
    )

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


#: A thread's first records below what was published without it (see ``_above_floor``).
NEW_THREAD_HINT = (
    "this queue published commits without this thread (a replay takes its input as complete), "
    "and its records at or below them cannot be added in commit order: replay the logs of every "
    "thread together into a new queue and changefeed"
)


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
                if scn < last_scn or (scn == last_scn and sub < last_sub and code not in MARKER_CODES):
                    raise RecordError("SCN goes back")
                last_scn, last_sub = scn, AFTER_MARKER if code in MARKER_CODES else sub
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


def _same_content(old: BinaryIO, new: BinaryIO, length: int, chunk: int = 1 << 20) -> bool:
    """Whether ``new`` starts with the first ``length`` bytes of ``old``, or with all of
    ``old`` if it is shorter (what was read past its end came from ``new`` already)."""
    with old, new:
        at = 0
        while at < length:
            n = min(chunk, length - at)
            a, b = old.read(n), new.read(n)
            if len(a) < n:
                return b[: len(a)] == a and len(b) >= len(a)
            if a != b:
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
                raise InputError(
                    lf.path,
                    None,
                    f"file is shorter ({offset - 1 - left} bytes) than the position already read ({offset})",
                )
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


def _offsets(lines: list[bytes], start: int, end: int) -> Callable[[int], int]:
    """``offset_after(k)``: the file offset after the first ``k`` of ``lines`` (a chunk
    read at ``start``, its complete lines ending at ``end``), worked on from the last one
    asked (asked in growing order: at flushes, at the end)."""
    known = [0, start]

    def offset_after(k: int) -> int:
        if k == len(lines):
            return start + end + 1
        j, off = known
        off += sum(map(len, lines[j:k])) + k - j
        known[0], known[1] = k, off
        return off

    return offset_after
