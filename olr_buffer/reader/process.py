"""Reader processes: parsing and validation on another core.

Python runs one thread at a time per process, and parsing is most of olr-buffer's work.
A :class:`ReaderProcess` stands in for a :class:`ThreadReader` in the parent: a child
process runs the real ``ThreadReader`` whose queue is a pipe; the parent receives each
block with the position after it and appends both in one LMDB write, exactly as the
in-process reader does. The parent stays the only writer of the queue; a full pipe holds
the child back.

Children are forked by multiprocessing's ``forkserver``: a process started once, from a
fresh interpreter (LMDB environments must not cross a fork, and the parent has them open),
that imports the child's module and forks a child per reader. A child then starts in a
few milliseconds instead of the ~0.2 s of CPU that a fresh interpreter and its imports
take (``spawn``), which counts with a reader per redo thread on a machine of two cores.
If the parent dies, the fork server sees its pipe close and exits, and each child, which
asked to be killed with its parent (the fork server), is killed. The fork server and the
children ignore SIGINT and SIGTERM: the parent stops them (``forkserver_signals``).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from typing import Callable, Mapping, Sequence

from ..errors import OlrBufferError
from ..faults import fault_point
from ..txbuffer import BlockCodec, TxQueue
from .files import LogFile
from .position import ReaderPosition
from .dead_letters import DeadLetters
from .thread_reader import ReaderStats, ThreadReader

_CTX = mp.get_context("forkserver")
# The reader processes run at a lower priority than the parent: with more runnable
# processes than cores, the scheduler would otherwise give each an equal share, so the
# dispatcher (one thread, in the parent) would get half a core while three readers
# parse ahead, and finish its backlog alone once they are done (docs/performance.md).
READER_NICENESS = 10


class ReaderProcess:
    """The parent's side of one redo thread's reader process (same surface as ThreadReader
    for :class:`ReaderGroup`: ``thread``, ``files``, ``pos``, ``stats``)."""

    def __init__(
        self,
        queue: TxQueue,
        input_dir: str,
        thread: int,
        files: dict[int, LogFile],
        position: ReaderPosition | None,
        *,
        block_records: int,
        block_bytes: int,
        on_append: Callable[[], None] | None,
        stop: threading.Event,
        dead_letter_path: str | None = None,
        queue_end=None,
    ) -> None:
        self.queue = queue
        self.input_dir = input_dir
        self.thread = thread
        self.files = files
        self.pos = position or ReaderPosition(thread, min(files) if files else 1)
        self.block_records = block_records
        self.block_bytes = block_bytes
        self.on_append = on_append or (lambda: None)
        self.stop = stop
        self.dead_letter_path = dead_letter_path
        self.quarantined = 0  # bad records its child wrote to the dead-letter file
        self.stats = ReaderStats()
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
            (self.input_dir, self.thread, files, self.pos.encode(), self.block_records, self.block_bytes,
             self.dead_letter_path, follow, poll_interval, self.floor, self.queue_end),
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
        elif kind == "closed":
            self.closed_through = msg[1]
        elif kind == "files":
            for seq, path, compressed in msg[1]:
                self.files[seq] = LogFile(self.thread, seq, path, compressed)  # or its archive, in its place
        elif kind == "done":
            self.quarantined = msg[1]
            return True
        return False


def run_child(
    target: Callable[..., None],
    args: tuple,
    *,
    name: str,
    label: str,
    stop: threading.Event,
    handle: Callable[[tuple], bool],
    died: Callable[[int | None], BaseException],
    tick: Callable[[], None] | None = None,
) -> None:
    """Run ``target(conn, stop_conn, parent_pid, *args)`` in a child and hand each
    message it sends to ``handle`` until that returns True. The child's ``("error", exc)``
    is raised here, its ``("crash", text)`` too (as a RuntimeError naming ``label``), and a
    child that dies without a word is ``died(exitcode)``. ``tick`` runs before each wait.

    Stopping the child is closing a pipe once ``stop`` is set: it takes no lock, so a child
    killed at any instant cannot block the parent (a multiprocessing Event could: its lock
    dies held), and the child sees EOF when the parent dies. The child is reaped (killed
    if it does not end) on every path.
    """
    # (once the fork server runs, no effect)
    _CTX.set_forkserver_preload([target.__module__, f"{__package__}.forkserver_signals"])
    recv_conn, send_conn = _CTX.Pipe(duplex=False)
    stop_recv, stop_send = _CTX.Pipe(duplex=False)
    proc = _CTX.Process(target=target, args=(send_conn, stop_recv, os.getpid(), *args), name=name, daemon=True)
    proc.start()
    send_conn.close()
    stop_recv.close()
    try:
        while True:
            if stop.is_set():
                stop_send.close()
            if tick:
                tick()
            if not recv_conn.poll(0.1):
                if not proc.is_alive() and not recv_conn.poll(0):
                    proc.join(5)
                    raise died(proc.exitcode)
                continue
            try:
                msg = recv_conn.recv()
            except EOFError:
                proc.join(5)
                raise died(proc.exitcode) from None
            kind = msg[0]
            if kind == "error":
                raise msg[1]
            if kind == "crash":
                raise RuntimeError(f"{label} failed: {msg[1]}")
            if handle(msg):
                return
    finally:
        stop_send.close()
        proc.join(10)
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        recv_conn.close()


def _died(thread: int, exitcode: int | None) -> OlrBufferError:
    return OlrBufferError(
        f"the reader process of redo thread {thread} died (exit code {exitcode})",
        hint="look for an out-of-memory kill in the system log; run the same command again",
    )


class _ParentStop:
    """The child's stop event: set by the parent closing its end of a pipe, or by the
    parent's death (EOF); ``wait`` sleeps on the pipe, so a stop wakes it at once."""

    _EVERY = 0.02  # seconds between two looks at the pipe: a look costs microseconds, readers ask per record

    def __init__(self, conn) -> None:
        self._conn = conn
        self._set = False
        self._next_look = 0.0

    def is_set(self) -> bool:
        if not self._set:
            now = time.monotonic()
            if now >= self._next_look:
                self._next_look = now + self._EVERY
                if self._conn.poll(0):
                    self._set = True
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        if not self._set and self._conn.poll(timeout):
            self._set = True
        return self._set

    def set(self) -> None:
        self._set = True


def stop_fork_server() -> None:
    """Stop the fork server, if this process started one, and reap it: the process then
    exits without leaving it behind for a moment, and its CPU time (with the readers',
    which it reaped) counts as this process's children's, as a spawned reader's did (what
    ``time`` and the benchmarks measure). multiprocessing has no public call for it; its
    own tests use ``ForkServer._stop``, which is looked up, not assumed."""
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        try:
            stop()
        except (OSError, ChildProcessError):  # already gone
            pass


def _start_child(parent_pid: int) -> None:
    """A child's first step: have the kernel kill it when its parent (the fork server,
    which exits when the service does) dies (Linux), however it dies; and ignore SIGINT
    and SIGTERM, which a terminal's Ctrl-C or a supervisor's stop sends to every process
    of the service: the service stops its children itself (see ``forkserver_signals``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the stop pipe's EOF still ends an idle child
        return
    if os.getppid() == 1 or not _alive(parent_pid):  # the fork server or the service died before prctl
        os._exit(1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - another user's process took the pid
        return False
    return True


_PR_SET_PDEATHSIG = 1


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
        new_files = [(lf.sequence, lf.path, lf.compressed) for s, lf in reader.files.items()
                     if self._files_sent.get(s) != lf.path]
        if new_files:
            self._files_sent.update((s, path) for s, path, _ in new_files)
            self._conn.send(("files", new_files))
        (pos_bytes,) = (meta or {}).values()
        nrecords = len(records) - 1  # the summary aside
        dead = reader.dead_letters.count if reader.dead_letters else 0
        # compressed and checksummed here, so that the parent only writes it
        self._conn.send(("block", self._codec.encode(records), len(records), pos_bytes, nrecords, dead))
        return 0


def _child_main(conn, stop_conn, parent_pid, input_dir, thread, files, pos_bytes, block_records, block_bytes,
                dead_letter_path, follow, poll_interval, floor=None, queue_end=None) -> None:
    from .. import faults

    _start_child(parent_pid)
    faults._SPEC = None  # faults are the parent's: it kills itself after its own append
    os.nice(READER_NICENESS)
    reader_ref: list = []
    dead = None
    try:
        dead = DeadLetters(dead_letter_path) if dead_letter_path else None
        reader = ThreadReader(
            _PipeQueue(conn, reader_ref),
            input_dir,
            thread,
            {seq: LogFile(thread, seq, path, compressed) for seq, path, compressed in files},
            ReaderPosition.decode(pos_bytes),
            block_records=block_records,
            block_bytes=block_bytes,
            stop=_ParentStop(stop_conn),  # type: ignore[arg-type]
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
