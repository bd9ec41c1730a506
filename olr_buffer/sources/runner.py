"""Running a source's reader in a child process: what every source shares and none owns.

Python runs one thread at a time per process, and parsing is most of olr-buffer's work.
A source may run its reader in a child process, on another core than the dispatcher: the
child's queue is a pipe (:class:`PipeAppender`), each block goes to the parent already
encoded and compressed, with the source's state after it, and the parent appends both in
one LMDB write. The parent stays the queue's only writer; a full pipe holds the child back.

Children are forked by multiprocessing's ``forkserver``: a process started once, from a
fresh interpreter (LMDB environments must not cross a fork, and the parent has them open),
that imports the child's module and forks a child per reader. A child then starts in a
few milliseconds instead of the ~0.2 s of CPU that a fresh interpreter and its imports
take (``spawn``). If the parent dies, the fork server sees its pipe close and exits, and
each child, which asked to be killed with its parent (the fork server), is killed. The
fork server and the children ignore SIGINT and SIGTERM: the parent stops them
(``forkserver_signals``).

This module knows no particular source: a source gives :func:`run_child` its child's
entry point and a handler for the messages the child sends.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from ..errors import OlrBufferError
from ..txbuffer import BlockCodec, TxQueue

#: The multiprocessing context of every source's child processes (and of the values they
#: share with the parent).
CONTEXT = mp.get_context("forkserver")

_PR_SET_PDEATHSIG = 1


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
    CONTEXT.set_forkserver_preload([target.__module__, f"{__package__}.forkserver_signals"])
    recv_conn, send_conn = CONTEXT.Pipe(duplex=False)
    stop_recv, stop_send = CONTEXT.Pipe(duplex=False)
    proc = CONTEXT.Process(target=target, args=(send_conn, stop_recv, os.getpid(), *args), name=name, daemon=True)
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


class ParentStop:
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


class PipeAppender:
    """A child's :class:`~olr_buffer.txbuffer.BlockAppender`: each append is encoded and
    compressed here and sent to the parent as ``("append", value, count, meta, extra)``
    (``value`` None for a metadata-only append), so that the parent only writes it.
    ``extra()`` rides along (a source's figures, its new files)."""

    def __init__(self, conn, extra: Callable[[], object] = lambda: None) -> None:
        self._conn = conn
        self._codec = BlockCodec()
        self.extra = extra

    def append(self, records: Sequence[bytes], meta: Mapping[bytes, bytes] | None = None) -> int:
        value = self._codec.encode(records) if records else None
        self._conn.send(("append", value, len(records), dict(meta or {}), self.extra()))
        return 0


class ChildAppends:
    """The parent's side of a reader in a child process that appends through a
    :class:`PipeAppender` (one stream: the PostgreSQL and OpenLogReplicator sources): each
    block is appended with its metadata in one write, the figures the child sends are
    kept (``figures``), its log records logged again. :meth:`handle` is
    :func:`run_child`'s ``handle``."""

    def __init__(self, queue: TxQueue, figures: Any, on_append: Callable[[], None] | None) -> None:
        self.queue = queue
        self.figures = figures
        self.on_append = on_append or (lambda: None)

    def handle(self, msg: tuple) -> bool:
        """One message of the child; True when it is done."""
        kind = msg[0]
        if kind == "append":
            _, value, count, meta, figures = msg
            self.queue.append_encoded(value, count, meta)
            self.figures = figures
            if value is not None:
                self.on_append()
        elif kind == "figures":
            self.figures = msg[1]
        elif kind == "log":
            relog(msg[1])
        return kind == "done"


def child_main(conn, stop_conn, parent_pid: int, log_level: int, body: Callable[[ParentStop], None]) -> NoReturn:
    """What a child that :class:`ChildAppends` serves does: :func:`start_child`, its log
    records to the parent, ``body(stop)`` (the reader, until ``stop``), then ``("done",)``,
    or its error (``("error", exc)``; ``("crash", text)`` for one that is not olr-buffer's
    or does not pickle) to the parent; and it exits."""
    start_child(parent_pid)
    root = logging.getLogger("olr_buffer")
    root.handlers[:] = [LogToParent(conn)]
    root.setLevel(log_level)
    root.propagate = False
    try:
        body(ParentStop(stop_conn))
        conn.send(("done",))
    except OlrBufferError as exc:
        try:
            conn.send(("error", exc))
        except Exception:  # noqa: BLE001 - an exception that does not pickle
            conn.send(("crash", f"{type(exc).__name__}: {exc}"))
    except BaseException:  # noqa: BLE001 - reported to the parent, which stops the run
        conn.send(("crash", traceback.format_exc()))
    finally:
        conn.close()
        os._exit(0)


class LogToParent(logging.Handler):
    """A child's log handler: each record goes to the parent, which logs it again
    (:func:`relog`)."""

    def __init__(self, conn) -> None:
        super().__init__()
        self._conn = conn

    def emit(self, record: logging.LogRecord) -> None:
        try:
            d = dict(record.__dict__)
            d["msg"] = record.getMessage()
            d["args"] = None
            d["exc_info"] = None
            d["exc_text"] = None
            self._conn.send(("log", d))
        except Exception:  # noqa: BLE001 - a log record is never worth the reader
            pass


def relog(doc: dict) -> None:
    """Log in the parent a record a child sent (``("log", doc)``)."""
    record = logging.makeLogRecord(doc)
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


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


def start_child(parent_pid: int) -> None:
    """A child's first step: have the kernel kill it when its parent (the fork server,
    which exits when the service does) dies (Linux), however it dies; ignore SIGINT and
    SIGTERM, which a terminal's Ctrl-C or a supervisor's stop sends to every process of
    the service: the service stops its children itself (see ``forkserver_signals``); and
    leave fault injection to the parent (it kills itself after its own append)."""
    from .. import faults

    faults.disable()
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
