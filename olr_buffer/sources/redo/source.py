"""The redo-file source behind the Source contract (:mod:`olr_buffer.sources.base`): one
reader per redo thread, in threads or child processes."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ...changes import CommitKey
from ...dead_letters import DeadLetters
from ...txbuffer import TxQueue
from ..base import Acknowledgement, Reader, SourceFigures, SourceKind, SourceSettings, SourceUsageError
from ..runner import CONTEXT
from .errors import MissingSequenceError
from .files import LogFile, check_contiguous, require_log_files, scan
from .position import POSITION_PREFIX, ReaderPosition, load_positions, status, status_lines
from .process import ReaderProcess
from .thread_reader import ThreadReader

log = logging.getLogger(__name__)

# A replay whose input is estimated below this many bytes of text reads it in threads of
# its own process: starting the reader processes costs more than reading a few MiB takes
# (0.5 s of wall time and 1 s of CPU when they were spawned; 0.3-0.5 s of wall time with
# the fork server, with which the two still cross at about 9 MiB: docs/performance.md,
# "Smaller figures"; bench/log/2026-11-performance-history.md, "Small replays").
SMALL_REPLAY_BYTES = 8 << 20
ZSTD_RATIO = 5  # the text bytes a .zst byte of redo ops is estimated to hold


def replay_in_processes(input_dir: str, processes: bool | None) -> bool:
    """Whether the readers of ``input_dir`` run in child processes: as ``processes`` says,
    or (None) if its log files hold an estimated SMALL_REPLAY_BYTES or more."""
    if processes is not None:
        return processes
    estimate = sum(
        os.path.getsize(f.path) * (ZSTD_RATIO if f.compressed else 1)
        for files in scan(input_dir).values()
        for f in files.values()
    )
    return estimate >= SMALL_REPLAY_BYTES


class NoThreadsError(SourceUsageError):
    """``run`` with no thread in play: nothing would hold the watermark back."""


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
            log.warning(
                "%s: empty (0 bytes), while sequence %d exists: read as a sequence without records "
                "(if it was emptied or not copied in full, its records are missing)",
                lf.path,
                seq + 1,
            )


class RedoSource:
    """The redo log files of ``input_dir``: one reader per redo thread, a
    :class:`ThreadReader` in a thread of its own or a :class:`ReaderProcess` (a child
    process, ``settings.processes``)."""

    state_prefix = POSITION_PREFIX
    watches_stalls = True  # a silent redo thread in play holds the watermark: `run` warns

    def __init__(self, input_dir: str, queue: TxQueue, settings: SourceSettings) -> None:
        self.input_dir = self.name = input_dir
        self.queue = queue
        self.settings = settings
        self.processes = settings.processes  # None: decided by prepare (replay_in_processes)
        self.thread_readers: dict[int, ThreadReader | ReaderProcess] = {}
        self._follow = False
        self._poll_interval = 0.1
        self._in_play: list[int] = []
        self.dead_letters: DeadLetters | None = None  # the readers' in threads (processes have their own)
        # shared with the readers (child processes too): the SCN of the last commit published,
        # and the queue's next index after the last append (see ThreadReader: floor, queue_end)
        self.published_scn = CONTEXT.Value("q", -1, lock=False)
        self.queue_end = CONTEXT.Value("q", self.queue.next_index, lock=False)

    def _appended(self) -> None:
        self.queue_end.value = self.queue.next_index
        self.settings.on_append()

    def prepare(self, threads: list[int] | None, resume: Mapping[bytes, bytes]) -> list[int]:
        """Scan the input, check every thread's sequences; return the threads in play:
        ``threads`` if given, else every thread with files (or a stored position)."""
        self.processes = replay_in_processes(self.input_dir, self.processes)
        if self.settings.dead_letter and not self.processes and self.dead_letters is None:
            self.dead_letters = DeadLetters(self.settings.dead_letter)
        found = scan(self.input_dir)
        positions = load_positions(resume)
        for thread in sorted(set(found) | set(positions) | set(threads or ())):
            self._add(thread, found.get(thread, {}), positions.get(thread))
            _warn_empty_sequences(found.get(thread, {}), positions.get(thread))
        self._in_play = sorted(threads) if threads else sorted(self.thread_readers)
        return self._in_play

    def _add(
        self, thread: int, files: dict[int, LogFile], position: ReaderPosition | None
    ) -> ThreadReader | ReaderProcess:
        if files:
            check_contiguous(self.input_dir, thread, files)
        s = self.settings
        common: dict[str, Any] = dict(
            block_records=s.block_records, block_bytes=s.block_bytes, on_append=self._appended, stop=s.stop
        )
        reader: ThreadReader | ReaderProcess
        if self.processes:
            reader = ReaderProcess(
                self.queue,
                self.input_dir,
                thread,
                files,
                position,
                dead_letter_path=s.dead_letter,
                queue_end=self.queue_end,
                **common,
            )
        else:
            end = self.queue_end
            reader = ThreadReader(
                self.queue,
                self.input_dir,
                thread,
                files,
                position,
                dead_letters=self.dead_letters,
                queue_end=lambda: end.value,
                **common,
            )
        self.thread_readers[thread] = reader
        return reader

    def start_from(self, run_from: Mapping[int, int]) -> None:
        """A new queue adopting a changefeed: each thread of ``run_from`` is read from the
        start of that sequence (the changefeed's commits below are skipped as published),
        the files before it need not be there; the file itself must."""
        started = []
        for thread, seq in sorted(run_from.items()):
            reader = self.thread_readers.get(thread)
            if reader is None or not reader.files:
                continue  # (no file yet: it starts at its first one, which comes later)
            if seq not in reader.files:
                raise MissingSequenceError(
                    os.path.join(self.input_dir, f"redo_{thread}_{seq}.jsonl"),
                    None,
                    f"the changefeed adopted needs redo thread {thread} from sequence {seq}, which is not here "
                    f"(sequences {min(reader.files)}..{max(reader.files)} are)",
                    hint="put the log files of the thread from that sequence on back (docs/failure-scenarios.md, "
                    "which files a standby needs)",
                )
            if seq > reader.pos.sequence:
                reader.pos = ReaderPosition(thread, seq)
            started.append(f"thread {thread} from sequence {seq}")
        if started:
            log.info(
                "%s: reading from where the changefeed needs it (its run_from: the oldest transaction still open "
                "at its last commit): %s; the files before are not read",
                self.input_dir,
                ", ".join(started),
            )

    def refuse_below(self, threads: Iterable[int], published: CommitKey | None) -> None:
        """The first record of each of ``threads`` (and the first after a ``close``) must lie
        above ``published``, which :meth:`acknowledge` keeps up to date."""
        self.published_scn.value = -1 if published is None else published.scn
        for t in set(threads) & set(self.thread_readers):
            self.thread_readers[t].enable_floor(self.published_scn)

    def readers(self, follow: bool, poll_interval: float) -> list[Reader]:
        """One reader per redo thread: to the end of the input, or following it."""
        if follow and not self._in_play:
            raise _no_threads(self.input_dir)
        self._follow, self._poll_interval = follow, poll_interval
        if follow:
            waiting = [
                t
                for t in self._in_play
                if not self.thread_readers[t].files and not _has_written(self.thread_readers[t].pos)
            ]
            if waiting:
                log.warning(
                    "waiting for the first records of redo thread(s) %s: nothing is published until each "
                    "thread in play has written",
                    ", ".join(map(str, waiting)),
                )
        return [self._reader(r) for r in self.thread_readers.values()]

    def _reader(self, reader: ThreadReader | ReaderProcess) -> Reader:
        poll = self._poll_interval
        run = (lambda: reader.follow(poll)) if self._follow else reader.read_to_end
        return Reader(f"reader-{reader.thread}", run, reader.thread)

    def new_readers(self) -> list[Reader]:
        """Follow mode: readers for redo threads whose first files appeared since."""
        return [
            self._reader(self._add(thread, files, None))
            for thread, files in scan(self.input_dir).items()
            if thread not in self.thread_readers
        ]

    def acknowledge(self, ack: Acknowledgement) -> None:
        if ack.published is not None:
            self.published_scn.value = ack.published.scn

    def closed_through(self) -> dict[int, int]:
        return {t: r.closed_through for t, r in self.thread_readers.items() if r.closed_through >= 0}

    def threads(self) -> dict[int, bool]:
        return {t: r.pos.finished for t, r in self.thread_readers.items()}

    # -- figures -------------------------------------------------------------------------

    def figures(self) -> SourceFigures:
        return SourceFigures(
            records_read=sum(r.stats.records for r in self.thread_readers.values()),
            quarantined=self._quarantined(),
        )

    def input_size(self) -> tuple[int, int]:
        """Bytes on disk of the files read past, plus the current file's offset (capped at
        its size: offsets count decompressed bytes); and of all the files. A file gone
        while it is looked at (archived to its ``.zst`` in the meantime) counts 0 this once."""
        read = total = 0
        for r in self.thread_readers.values():
            pos = r.pos
            for seq, f in list(r.files.items()):
                size = _size(f.path)
                total += size
                if seq < pos.sequence:
                    read += size
                elif seq == pos.sequence:
                    read += min(pos.offset, size)
        return read, total

    def _quarantined(self) -> int:
        """Bad records written to the dead-letter file by this run."""
        if self.processes:
            return sum(r.quarantined for r in self.thread_readers.values() if isinstance(r, ReaderProcess))
        return self.dead_letters.count if self.dead_letters else 0

    def close(self) -> None:
        if self.dead_letters:
            self.dead_letters.close()


def _no_threads(input_dir: str) -> NoThreadsError:
    return NoThreadsError(
        f"{input_dir}: no redo thread has log files yet and --threads is not given: "
        "nothing would hold back a commit whose other threads' rows are still to come",
        hint="give every redo thread of the database with --threads (e.g. --threads 1,2,3), "
        "or start the service once the capture process has written its first files",
    )


def check_new_run(input_dir: str, threads: list[int] | None) -> None:
    """``run`` on a new queue: with no thread given and none with files, nothing would be
    in play; refused before the queue and changefeed directories are made."""
    if not threads and not scan(input_dir):
        raise _no_threads(input_dir)


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _has_written(pos: ReaderPosition) -> bool:
    """Whether a thread's stored position shows records already (progress, or a close)."""
    return pos.progress >= 0 or pos.closed


def build(input_dir: str, queue: TxQueue, settings: SourceSettings, **options) -> RedoSource:
    if options:
        raise TypeError(f"the redo-file source takes no options: {', '.join(sorted(options))}")
    return RedoSource(input_dir, queue, settings)


KIND = SourceKind("redo", build, status, "readers", status_lines, require_log_files, check_new_run=check_new_run)
