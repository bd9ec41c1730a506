"""Reader threads: one per redo thread, from its stored position to the end of its input."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..faults import fault_point
from ..txbuffer import TxQueue
from .blocks import BlockBuilder
from .errors import InputError
from .files import CorruptCompressedFile, LogFile, check_contiguous, scan
from .position import POSITION_PREFIX, ReaderPosition, load_positions
from .records import LWN, RecordError, parse_line, validate

DEFAULT_BLOCK_RECORDS = 4096
DEFAULT_BLOCK_BYTES = 1 << 20


@dataclass(slots=True)
class ReaderStats:
    records: int = 0
    bytes: int = 0
    blocks: int = 0


class ThreadReader:
    """Reads one redo thread's log files into the queue, one block per append.

    Each append carries the position after its last record, so after a crash the reader
    resumes exactly there. On bad input, the records before the bad line are appended
    first, then :class:`InputError` is raised: nothing accepted is lost.
    """

    def __init__(
        self,
        queue: TxQueue,
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
        self._builder = BlockBuilder(thread)
        self._builder.progress = self.pos.progress

    # -- offline -----------------------------------------------------------------------

    def read_to_end(self) -> None:
        """Read every remaining file of the thread, then mark the thread's input complete."""
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
            self._flush(end_of_thread=True)

    def _read_file(self, lf: LogFile, final: bool) -> None:
        pos = self.pos
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
                _skip(fh, offset, lf)
                for raw in fh:
                    line += 1
                    if raw[-1:] != b"\n" and not final:
                        break  # not yet written completely
                    try:
                        code, scn, sub, xid, payload = validate(parse_line(raw))
                        if scn < last_scn or (scn == last_scn and sub < last_sub and code != LWN):
                            raise RecordError(
                                f"SCN goes back: (scn {scn}, sub {sub}) after (scn {last_scn}, sub {last_sub})"
                            )
                    except RecordError as exc:
                        pos.line, pos.offset, pos.scn, pos.sub = line - 1, offset, last_scn, last_sub
                        self._flush()
                        raise InputError(lf.path, line, str(exc)) from None
                    offset += len(raw)
                    if code == LWN:
                        b.heartbeat(scn)
                        if scn > last_scn:
                            last_scn, last_sub = scn, sub
                    else:
                        add(code, scn, sub, xid, seq, line, payload)  # type: ignore[arg-type]
                        last_scn, last_sub = scn, sub
                    if b.count >= self.block_records or b.nbytes >= self.block_bytes:
                        pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub
                        self._flush()
                        if self.stop.is_set():
                            return
            except (OSError, CorruptCompressedFile) as exc:
                # keep what was read before the damage; `line` is the last line read whole
                pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub
                self._flush()
                reason = str(exc) if isinstance(exc, CorruptCompressedFile) else f"read failed: {exc}"
                raise InputError(lf.path, line + 1, reason) from None
        pos.line, pos.offset, pos.scn, pos.sub = line, offset, last_scn, last_sub

    def _flush(self, end_of_thread: bool = False) -> None:
        b = self._builder
        if not b.count and not end_of_thread and b.progress == self.pos.progress:
            return
        self.pos.progress = b.progress
        records = b.build(end_of_thread=end_of_thread)
        self.queue.append(records, {self.pos.key: self.pos.encode()})
        fault_point("after_append")
        self.stats.records += b.count
        self.stats.blocks += 1
        self.stats.bytes = self.pos.offset
        b.reset()
        self.on_append()


def _skip(fh, offset: int, lf: LogFile) -> None:
    if offset <= 0:
        return
    if not lf.compressed:
        fh.seek(offset)
        return
    left = offset
    while left:
        chunk = fh.read(min(left, 1 << 20))
        if not chunk:
            raise InputError(lf.path, None, f"file is shorter ({offset - left} bytes) than the position already read ({offset})")
        left -= len(chunk)


@dataclass
class ReaderGroup:
    """All reader threads of a run, one :class:`threading.Thread` per redo thread."""

    queue: TxQueue
    input_dir: str
    block_records: int = DEFAULT_BLOCK_RECORDS
    block_bytes: int = DEFAULT_BLOCK_BYTES
    on_append: Callable[[], None] | None = None
    readers: dict[int, ThreadReader] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def prepare(self) -> list[int]:
        """Scan the input, check every thread's sequences; return the threads in play."""
        found = scan(self.input_dir)
        positions = load_positions(self.queue.meta_items(POSITION_PREFIX))
        for thread in sorted(set(found) | set(positions)):
            files = found.get(thread, {})
            if files:
                check_contiguous(self.input_dir, thread, files)
            self.readers[thread] = ThreadReader(
                self.queue,
                self.input_dir,
                thread,
                files,
                positions.get(thread),
                block_records=self.block_records,
                block_bytes=self.block_bytes,
                on_append=self.on_append,
                stop=self.stop,
            )
        return sorted(self.readers)

    def start(self) -> None:
        for thread, reader in self.readers.items():
            t = threading.Thread(target=self._run, args=(reader,), name=f"reader-{thread}", daemon=True)
            self._threads.append(t)
            t.start()

    def _run(self, reader: ThreadReader) -> None:
        try:
            reader.read_to_end()
        except BaseException as exc:  # handed to the main thread
            self.errors.append(exc)
            self.stop.set()
        finally:
            if self.on_append:
                self.on_append()

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def join(self) -> None:
        for t in self._threads:
            t.join()

    @property
    def bytes_total(self) -> int:
        return sum(os.path.getsize(f.path) for r in self.readers.values() for f in r.files.values())

    @property
    def records_read(self) -> int:
        return sum(r.stats.records for r in self.readers.values())
