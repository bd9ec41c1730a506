"""All the redo-file readers of a run: one per redo thread, in threads or child processes."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

from ..txbuffer import TxQueue
from .dead_letters import DeadLetters
from .errors import InputError
from .files import LogFile, check_contiguous, scan
from .position import POSITION_PREFIX, ReaderPosition, load_positions
from .process import _CTX, ReaderProcess
from .thread_reader import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS, ThreadReader

log = logging.getLogger(__name__)


def run_reported(
    body: Callable[[], None],
    errors: list[BaseException],
    stop: threading.Event,
    on_append: Callable[[], None] | None,
    *,
    stop_on_input_error: bool = True,
) -> None:
    """Run a reader's ``body`` in its thread: an error is handed to the main thread
    (appended to ``errors``) and stops the other readers (bad input only if
    ``stop_on_input_error``); the main thread is woken (``on_append``) either way."""
    try:
        body()
    except InputError as exc:
        errors.append(exc)
        if stop_on_input_error:
            stop.set()
    except BaseException as exc:
        errors.append(exc)
        stop.set()
    finally:
        if on_append:
            on_append()


def _warn_empty_sequences(files: dict[int, LogFile], position: ReaderPosition | None) -> None:
    """A plain log of 0 bytes whose next sequence exists, not yet read, is read as a
    sequence without records (the contract does not forbid one), but it may as well be a
    log emptied or not copied: say so. (An empty ``.jsonl.zst`` is bad input: not zstd.)"""
    for seq, lf in sorted(files.items()):
        if lf.compressed or seq + 1 not in files or (position is not None and seq < position.sequence):
            continue
        try:
            empty = os.path.getsize(lf.path) == 0
        except OSError:
            continue
        if empty:
            log.warning("%s: empty (0 bytes), while sequence %d exists: read as a sequence without records "
                        "(if it was emptied or not copied in full, its records are missing)", lf.path, seq + 1)


@dataclass
class ReaderGroup:
    """All reader threads of a run, one :class:`threading.Thread` per redo thread."""

    queue: TxQueue
    input_dir: str
    block_records: int = DEFAULT_BLOCK_RECORDS
    block_bytes: int = DEFAULT_BLOCK_BYTES
    on_append: Callable[[], None] | None = None
    readers: dict[int, ThreadReader | ReaderProcess] = field(default_factory=dict)
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    dead_letter_path: str | None = None
    processes: bool = False  # parse in one child process per redo thread (see process.py)
    dead_letters: DeadLetters | None = None
    _follow: bool = False
    _poll_interval: float = 0.1
    # shared with the readers (child processes too): the SCN of the last commit published,
    # and the queue's next index after the last append (see ThreadReader: floor, queue_end)
    published_scn: Any = None
    queue_end: Any = None
    floor_threads: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        # shared with the reader processes: made by the context that starts them
        self.published_scn = _CTX.Value("q", -1, lock=False)
        self.queue_end = _CTX.Value("q", self.queue.next_index, lock=False)

    def _appended(self) -> None:
        self.queue_end.value = self.queue.next_index
        if self.on_append:
            self.on_append()

    def check_floor(self, threads: Iterable[int], published_scn: int | None) -> None:
        """The first record of each of ``threads`` (and the first after a ``close``) must lie
        above ``published_scn``, which the caller keeps up to date in ``published_scn``."""
        self.published_scn.value = -1 if published_scn is None else published_scn
        self.floor_threads = set(threads)
        for t in self.floor_threads & set(self.readers):
            self.readers[t].enable_floor(self.published_scn)

    def prepare(self, threads: list[int] | None = None) -> list[int]:
        """Scan the input, check every thread's sequences; return the threads in play:
        ``threads`` if given, else every thread with files (or a stored position)."""
        if self.dead_letter_path and not self.processes and self.dead_letters is None:
            self.dead_letters = DeadLetters(self.dead_letter_path)
        found = scan(self.input_dir)
        positions = load_positions(self.queue.meta_items(POSITION_PREFIX))
        for thread in sorted(set(found) | set(positions) | set(threads or ())):
            self._add(thread, found.get(thread, {}), positions.get(thread))
            _warn_empty_sequences(found.get(thread, {}), positions.get(thread))
        return sorted(threads) if threads else sorted(self.readers)

    def _add(self, thread: int, files: dict[int, LogFile], position: ReaderPosition | None) -> ThreadReader | ReaderProcess:
        if files:
            check_contiguous(self.input_dir, thread, files)
        common = dict(
            block_records=self.block_records, block_bytes=self.block_bytes, on_append=self._appended, stop=self.stop
        )
        reader: ThreadReader | ReaderProcess
        if self.processes:
            reader = ReaderProcess(
                self.queue, self.input_dir, thread, files, position, dead_letter_path=self.dead_letter_path,
                queue_end=self.queue_end, **common
            )
        else:
            end = self.queue_end
            reader = ThreadReader(
                self.queue, self.input_dir, thread, files, position, dead_letters=self.dead_letters,
                queue_end=lambda: end.value, **common
            )
        self.readers[thread] = reader
        return reader

    def start(self, follow: bool = False, poll_interval: float = 0.1) -> None:
        """Start one thread per reader: to the end of the input, or following it."""
        self._follow, self._poll_interval = follow, poll_interval
        for reader in self.readers.values():
            self._start(reader)

    def _start(self, reader: ThreadReader | ReaderProcess) -> None:
        t = threading.Thread(target=self._run, args=(reader,), name=f"reader-{reader.thread}", daemon=True)
        self._threads.append(t)
        t.start()

    def add_new_threads(self) -> list[int]:
        """Follow mode: start readers for redo threads whose first files appeared since."""
        new = []
        for thread, files in scan(self.input_dir).items():
            if thread not in self.readers:
                self._start(self._add(thread, files, None))
                new.append(thread)
        return new

    def _run(self, reader: ThreadReader | ReaderProcess) -> None:
        # Offline, the other threads read on after bad input: their records are accepted,
        # and what the failing thread's progress allows is published. Following, all stop.
        run_reported(
            (lambda: reader.follow(self._poll_interval)) if self._follow else reader.read_to_end,
            self.errors, self.stop, self.on_append, stop_on_input_error=self._follow,
        )

    def alive(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    @property
    def following(self) -> bool:
        """Whether the readers follow their input (``run``) rather than read it to its end."""
        return self._follow

    watches_stalls = True  # a silent redo thread in play holds the watermark: `run` warns

    @property
    def source_id(self) -> str | None:
        """The source's own identity, recorded in the changefeed beside the queue's: redo
        files have none (the queue's id binds them)."""
        return None

    def join(self) -> None:
        for t in self._threads:
            t.join()

    @property
    def bytes_total(self) -> int:
        return sum(os.path.getsize(f.path) for r in self.readers.values() for f in r.files.values())

    @property
    def bytes_read(self) -> int:
        """Bytes on disk of the files read past, plus the current file's offset (capped at
        its size: offsets count decompressed bytes)."""
        total = 0
        for r in self.readers.values():
            for seq, f in r.files.items():
                if seq < r.pos.sequence:
                    total += os.path.getsize(f.path)
                elif seq == r.pos.sequence:
                    total += min(r.pos.offset, os.path.getsize(f.path))
        return total

    @property
    def records_read(self) -> int:
        return sum(r.stats.records for r in self.readers.values())

    @property
    def quarantined(self) -> int:
        """Bad records written to the dead-letter file by this run."""
        if self.processes:
            return sum(r.quarantined for r in self.readers.values() if isinstance(r, ReaderProcess))
        return self.dead_letters.count if self.dead_letters else 0

    def close(self) -> None:
        if self.dead_letters:
            self.dead_letters.close()
