"""Redo reader processes: parsing and validation on another core.

A :class:`ReaderProcess` stands in for a :class:`ThreadReader` in the parent: a child
process (forked by :mod:`olr_buffer.sources.runner`, which says why and how) runs the
real ``ThreadReader`` whose queue is a pipe; the parent receives each block with the
position after it and appends both in one LMDB write, exactly as the in-process reader
does. One child per redo thread: on a machine of two cores, a child that starts in
milliseconds (the fork server) counts.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from ...dead_letters import DeadLetters
from ...errors import OlrBufferError
from ...faults import fault_point
from ...txbuffer import BlockCodec, TxQueue
from ..runner import ParentStop, run_child, start_child
from .files import LogFile
from .position import ReaderPosition
from .thread_reader import ThreadInput, ThreadReader

# The reader processes run at a lower priority than the parent: with more runnable
# processes than cores, the scheduler would otherwise give each an equal share, so the
# dispatcher (one thread, in the parent) would get half a core while three readers
# parse ahead, and finish its backlog alone once they are done
# (bench/log/2026-11-performance-history.md).
READER_NICENESS = 10


class ReaderProcess(ThreadInput):
    """The parent's side of one redo thread's reader process (the surface of a
    :class:`ThreadReader` for :class:`ReaderGroup`: ``thread``, ``files``, ``pos``, ``stats``)."""

    queue: TxQueue

    def __init__(
        self,
        queue: TxQueue,
        input_dir: str,
        thread: int,
        files: dict[int, LogFile],
        position: ReaderPosition | None,
        *,
        dead_letter_path: str | None = None,
        queue_end=None,
        **common: Any,
    ) -> None:
        """``common``: :class:`ThreadInput`'s (``block_records``, ``block_bytes``,
        ``on_append``, ``stop``)."""
        super().__init__(queue, input_dir, thread, files, position, **common)
        self.dead_letter_path = dead_letter_path
        self.quarantined = 0  # bad records its child wrote to the dead-letter file
        self.queue_end = queue_end  # shared values, read by the child (see ThreadReader)
        self.floor = None
        self.closed_through = -1

    def enable_floor(self, value) -> None:
        self.floor = value

    def read_to_end(self) -> None:
        self._run(follow=False, poll_interval=0.1)

    def follow(self, poll_interval: float = 0.1) -> None:
        self._run(follow=True, poll_interval=poll_interval)

    def _run(self, follow: bool, poll_interval: float) -> None:
        files = [(lf.sequence, lf.path, lf.compressed) for lf in self.files.values()]
        run_child(
            _child_main,
            (
                self.input_dir,
                self.thread,
                files,
                self.pos.encode(),
                self.block_records,
                self.block_bytes,
                self.dead_letter_path,
                follow,
                poll_interval,
                self.floor,
                self.queue_end,
            ),
            name=f"olr-reader-{self.thread}",
            label=f"the reader process of redo thread {self.thread}",
            stop=self.stop,
            handle=self._handle,
            died=lambda exitcode: _died(self.thread, exitcode),
        )

    def _handle(self, msg: tuple) -> bool:
        """One message of the child; True when it is done."""
        kind = msg[0]
        if kind == "block":
            _, value, count, pos_bytes, nrecords, dead = msg
            self.queue.append_encoded(value, count, {self.pos.key: pos_bytes})
            fault_point("after_append")
            self.pos = ReaderPosition.decode(pos_bytes)
            self.stats.records += nrecords
            self.stats.blocks += 1
            self.quarantined = dead
            self.on_append()
        elif kind == "dead":  # a bad record set aside: counted now, not with the next block
            self.quarantined = msg[1]
        elif kind == "closed":
            self.closed_through = msg[1]
        elif kind == "files":
            for seq, path, compressed in msg[1]:
                self.files[seq] = LogFile(self.thread, seq, path, compressed)  # or its archive, in its place
        elif kind == "done":
            self.quarantined = msg[1]
            return True
        return False


def _died(thread: int, exitcode: int | None) -> OlrBufferError:
    return OlrBufferError(
        f"the reader process of redo thread {thread} died (exit code {exitcode})",
        hint="look for an out-of-memory kill in the system log; run the same command again",
    )


class _PipeQueue:
    """The child's :class:`~olr_buffer.txbuffer.BlockAppender`: every append goes to the
    parent, which does the real one."""

    def __init__(self, conn, reader_ref: list) -> None:
        self._conn = conn
        self._reader_ref = reader_ref
        self._codec = BlockCodec()
        self._files_sent: dict[int, str] = {}  # sequence -> the path the parent was told

    def append(self, records: Sequence[bytes], meta: Mapping[bytes, bytes] | None = None) -> int:
        reader: ThreadReader = self._reader_ref[0]
        new_files = [
            (lf.sequence, lf.path, lf.compressed)
            for s, lf in reader.files.items()
            if self._files_sent.get(s) != lf.path
        ]
        if new_files:
            self._files_sent.update((s, path) for s, path, _ in new_files)
            self._conn.send(("files", new_files))
        (pos_bytes,) = (meta or {}).values()
        nrecords = len(records) - 1  # the summary aside
        dead = reader.dead_letters.count if reader.dead_letters else 0
        # compressed and checksummed here, so that the parent only writes it
        self._conn.send(("block", self._codec.encode(records), len(records), pos_bytes, nrecords, dead))
        return 0


def _child_main(
    conn,
    stop_conn,
    parent_pid,
    input_dir,
    thread,
    files,
    pos_bytes,
    block_records,
    block_bytes,
    dead_letter_path,
    follow,
    poll_interval,
    floor=None,
    queue_end=None,
) -> None:
    start_child(parent_pid)
    os.nice(READER_NICENESS)
    reader_ref: list = []
    dead = None
    try:
        if dead_letter_path:  # each bad record counted in the parent at once (metrics)
            dead = DeadLetters(dead_letter_path, on_put=lambda count: conn.send(("dead", count)))
        reader = ThreadReader(
            _PipeQueue(conn, reader_ref),
            input_dir,
            thread,
            {seq: LogFile(thread, seq, path, compressed) for seq, path, compressed in files},
            ReaderPosition.decode(pos_bytes),
            block_records=block_records,
            block_bytes=block_bytes,
            stop=ParentStop(stop_conn),
            dead_letters=dead,
            queue_end=(lambda: queue_end.value) if queue_end is not None else None,
            on_closed=lambda index: conn.send(("closed", index)),
        )
        if floor is not None:
            reader.enable_floor(floor)
        reader_ref.append(reader)
        if follow:
            reader.follow(poll_interval)
        else:
            reader.read_to_end()
        conn.send(("done", dead.count if dead else 0))
    except OlrBufferError as exc:
        conn.send(("error", exc))
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run
        conn.send(("crash", traceback.format_exc()))
    finally:
        if dead:
            dead.close()
        conn.close()
        os._exit(0)
