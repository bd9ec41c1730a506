"""Riding out an unreachable store: what ``olr-buffer run`` does when S3 does not answer.

:meth:`OutageRetry.call` runs a store operation; while it fails with an error that says
retrying may help (:class:`~olr_buffer.store.StoreUnreachableError`: refused, timed out,
5xx, throttled), it waits and tries again, the wait doubling from ``first`` up to ``cap``
seconds, until the store answers or ``stop`` is set (then the last error is raised).
Errors that retrying cannot fix (access denied, a missing bucket) are raised at once.

A store that stops answering (a hung server, a network that drops packets) fails no call
until the client's own timeouts run out, retries included (minutes): with ``timeout``,
a call that has not returned after that many seconds is an outage from then on, said and
counted at once by a watchdog thread, while the call goes on waiting for its answer or
its timeout. The watchdog sees the calls of every thread: :meth:`OutageRetry.call`'s, and
those a thread with retries of its own makes inside :meth:`OutageRetry.watched` (the
lease's keepalive: the only calls of a service that has nothing to publish) or with
:meth:`OutageRetry.attempt` (a standby's looks at the lease). A call
inside another one of the same thread is timed with the outer one.

A stop does not wait out the client's timeouts either: with ``timeout``, each call of
:meth:`OutageRetry.call` runs in a thread of its own while the caller waits for it, and
once ``stop`` is set a call still unanswered after ``timeout`` seconds (at once when
``hurry`` is set: a second stop signal) is given up: :class:`CallGivenUpError` is raised
to the caller, the call left to finish or fail on its own (what it may have done in the
store is what a kill at that instant leaves, which the changefeed recovers from), and
every later call fails with it at once, untried (:attr:`OutageRetry.given_up`). A call
that fails while stopping, for any reason retrying might fix, gives up the same way.

It says so: one WARNING when an outage starts, one every ``log_every`` seconds while it
lasts, one INFO when the store answers again (a call returns, and no other one has been
waiting for longer than ``timeout``); and it keeps figures for metrics
(outages, retried calls, how long the current outage has lasted), which other threads
may read at any time.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from .errors import CallGivenUpError, StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: the threads that run a call of :meth:`OutageRetry.call` for their caller: a call made
#: inside one is made there, inline
_inside = threading.local()


class OutageRetry:
    """See the module doc. ``on_wait`` is called while waiting (at least every second):
    the service's loop is blocked meanwhile, and keeps its metrics and health fresh.
    ``hurry``: set with ``stop``, a call under way is given up at once."""

    def __init__(
        self,
        stop: threading.Event | None = None,
        *,
        first: float = 0.5,
        cap: float = 30.0,
        log_every: float = 60.0,
        timeout: float | None = None,
        on_wait: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        hurry: threading.Event | None = None,
    ) -> None:
        if timeout is not None and timeout <= 0:
            raise ValueError("a store timeout is a number of seconds above 0")
        self.stop = stop or threading.Event()
        self.hurry = hurry or threading.Event()
        #: the error a call was given up with, the service stopping: every later call fails with it
        self.given_up: StoreError | None = None
        self.first = first
        self.cap = cap
        self.log_every = log_every
        self.timeout = timeout
        self.on_wait = on_wait
        self._clock = clock
        self.outages = 0  # outages met
        self.retries = 0  # calls tried again
        self.outage_since: float | None = None  # on the monotonic clock, while an outage lasts
        self._last_log: float | None = None  # when the outage was last said
        self._calling: dict[int, tuple[float, str, str]] = {}  # per thread: (since, what, how retried) of its call
        self._guard = threading.Lock()
        self._watchdog: threading.Thread | None = None
        self._idle: list[_CallThread] = []  # threads that ran a call and wait for the next one

    def outage_seconds(self) -> float:
        """How long the current outage has lasted (0 while the store answers)."""
        since = self.outage_since
        return self._clock() - since if since is not None else 0.0

    def call(self, fn: Callable[[], T], what: str) -> T:
        """``fn()``, retried while the store cannot be reached; ``what`` says what it does
        (``publish part-….parquet``) in the log."""
        delay = self.first
        while True:
            if self.given_up is not None:
                raise self.given_up
            try:
                with self._try(what, f"every {self.cap:g} s at most"):
                    return self._run(fn, what)
            except StoreError as exc:
                if not exc.retryable:
                    raise
                if self._wait(delay):
                    if self.given_up is None:
                        self.given_up = exc
                    raise
                self.retries += 1
                delay = min(delay * 2, self.cap)

    def attempt(self, fn: Callable[[], T], what: str, every: float | None = None) -> T:
        """One try of ``fn()`` by a caller that tries again on its own, ``every`` so many
        seconds (a standby's look at the lease): not retried here, but watched as
        :meth:`watched` does (an outage said once it has waited ``timeout``, or once it
        fails), and given up as a try of :meth:`call` is once ``stop`` is set
        (:class:`CallGivenUpError`)."""
        if self.given_up is not None:
            raise self.given_up
        with self.watched(what, every):
            return self._run(fn, what)

    def _run(self, fn: Callable[[], T], what: str) -> T:
        """``fn()``; with ``timeout``, in another thread (:class:`_CallThread`), given up if it has not
        returned ``timeout`` seconds after it started once ``stop`` is set (at once with
        ``hurry``): see the module doc."""
        if self.timeout is None or getattr(_inside, "call", False):
            return fn()
        call = _Call(fn)
        with self._guard:
            thread = self._idle.pop() if self._idle else None
        if thread is None:
            thread = _CallThread(self._idle, self._guard)
        started = self._clock()
        thread.calls.put(call)
        done, outcome = call.done, call.outcome
        while not done.wait(0.1):
            if not self.stop.is_set():
                continue
            waited = self._clock() - started
            if self.hurry.is_set() or waited >= self.timeout:
                self.given_up = CallGivenUpError(f"no answer to {what} for {waited:.1f} s")
                raise self.given_up
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    @contextmanager
    def watched(self, what: str, every: float | None = None) -> Iterator[None]:
        """One try of a store call (``what`` it does) by a thread that retries it on its
        own (the lease's keepalive, ``every`` so many seconds), seen by the watchdog while
        it waits: a failure that retrying may fix is an outage (started, or going on) and
        counts as a retry; an answer ends the outage."""
        try:
            with self._try(what, f"every {every:g} s" if every is not None else "again later"):
                yield
        except StoreError as exc:
            if exc.retryable and not isinstance(exc, CallGivenUpError):  # (given up: not tried again)
                self.retries += 1
            raise

    @contextmanager
    def _try(self, what: str, how: str) -> Iterator[None]:
        """One try of a call, seen by the watchdog while it waits (see :meth:`watched`);
        ``how``: how often it is tried again (``every 30 s at most``), for the log."""
        if self.timeout is not None and self._watchdog is None:
            with self._guard:
                if self._watchdog is None:
                    self._watchdog = threading.Thread(target=self._watch, name="store-watchdog", daemon=True)
                    self._watchdog.start()
        me = threading.get_ident()
        with self._guard:
            outer = me in self._calling  # (a call inside another one: the outer one is timed)
            if not outer:
                self._calling[me] = (self._clock(), what, how)
        try:
            yield
        except StoreError as exc:
            self._returned(me, outer, answered=not exc.retryable)  # (refused, not found: answers)
            if exc.retryable and not isinstance(exc, CallGivenUpError):
                self._failed(exc, what, how)
            raise
        except BaseException:
            self._returned(me, outer, answered=False)
            raise
        self._returned(me, outer, answered=True)

    def _returned(self, me: int, outer: bool, answered: bool) -> None:
        """A call of thread ``me`` returned; ``answered``: the store answered it, which
        ends an outage, unless another call has been waiting for ``timeout`` or more."""
        if outer:
            return
        with self._guard:
            self._calling.pop(me, None)
            if answered and self.outage_since is not None and self._unanswered(self._clock()) is None:
                log.info(
                    "the changefeed's store answers again after %.1f s (%d retries)",
                    self.outage_seconds(),
                    self.retries,
                )
                self.outage_since = None

    def _unanswered(self, now: float) -> tuple[float, str, str] | None:
        """The call under way that has waited longest, if for ``timeout`` or more (the
        guard held)."""
        if self.timeout is None or not self._calling:
            return None
        oldest = min(self._calling.values())
        return oldest if now - oldest[0] >= self.timeout else None

    def _failed(self, exc: StoreError, what: str, how: str) -> None:
        """A call failed because the store cannot be reached: an outage starts, or goes on."""
        with self._guard:
            now = self._clock()
            if self.outage_since is None:
                self._start_outage(now, f"{exc}", what, how, extra={"error": str(exc)})
            elif self._last_log is None or now - self._last_log >= self.log_every:
                self._last_log = now
                log.warning(
                    "the changefeed's store is still unreachable after %.0f s (%d retries): %s",
                    now - self.outage_since,
                    self.retries,
                    exc,
                    extra={"error": str(exc)},
                )

    def _start_outage(self, since: float, why: str, what: str, how: str, extra: dict) -> None:
        self.outage_since = since
        self.outages += 1
        self._last_log = self._clock()
        log.warning("the changefeed's store cannot be reached (%s); retrying to %s, %s", why, what, how, extra=extra)

    def _watch(self) -> None:
        """The watchdog: a call under way for longer than ``timeout`` starts an outage
        (from when it started), and is said again every ``log_every`` seconds."""
        assert self.timeout is not None
        period = min(1.0, self.timeout / 4)
        while not self.stop.wait(period):
            with self._guard:
                now = self._clock()
                waiting = self._unanswered(now)
                if waiting is None:
                    continue
                since, what, how = waiting
                waited = now - since
                if self.outage_since is None:
                    self._start_outage(
                        since,
                        f"no answer to {what} for {waited:.1f} s",
                        what,
                        how,
                        extra={"error": "timeout", "waited_seconds": round(waited, 3)},
                    )
                elif self._last_log is not None and now - self._last_log >= self.log_every:
                    self._last_log = now
                    log.warning(
                        "the changefeed's store is still unreachable after %.0f s (%d retries): no answer "
                        "to %s for %.1f s",
                        now - self.outage_since,
                        self.retries,
                        what,
                        waited,
                        extra={"error": "timeout", "waited_seconds": round(waited, 3)},
                    )

    def _wait(self, seconds: float) -> bool:
        """Wait ``seconds`` (calling ``on_wait`` at least every second); True if stopped."""
        deadline = self._clock() + seconds
        while True:
            if self.on_wait is not None:
                self.on_wait()
            left = deadline - self._clock()
            if left <= 0:
                return self.stop.is_set()
            if self.stop.wait(min(left, 1.0)):
                return True


class _Call:
    """One call of :meth:`OutageRetry.call` run by a :class:`_CallThread`: ``outcome``
    holds ``(True, value)`` or ``(False, exception)`` once ``done`` is set."""

    __slots__ = ("fn", "done", "outcome")

    def __init__(self, fn: Callable[[], object]) -> None:
        self.fn = fn
        self.done = threading.Event()
        self.outcome: list = []


class _CallThread:
    """A thread that runs :meth:`OutageRetry.call`'s calls one at a time for their callers:
    once a call has returned, it waits (in ``idle``) for the next one, so that a service
    publishing every few milliseconds does not start a thread for each of its calls. A
    call given up on keeps its thread (it is not idle until the call returns); a thread
    left idle for ``IDLE_SECONDS`` ends."""

    IDLE_SECONDS = 5.0

    def __init__(self, idle: list[_CallThread], guard: threading.Lock) -> None:
        self.calls: queue.SimpleQueue[_Call] = queue.SimpleQueue()
        self._idle = idle
        self._guard = guard
        threading.Thread(target=self._serve, name="store-call", daemon=True).start()

    def _serve(self) -> None:
        _inside.call = True
        while True:
            try:
                call = self.calls.get(timeout=self.IDLE_SECONDS)
            except queue.Empty:
                with self._guard:
                    if self in self._idle:  # (else taken for a call meanwhile: it comes)
                        self._idle.remove(self)
                        return
                continue
            try:
                call.outcome.append((True, call.fn()))
            except BaseException as exc:  # noqa: BLE001 - raised again by the caller
                call.outcome.append((False, exc))
            with self._guard:  # idle before its caller goes on: its next call finds it
                self._idle.append(self)
            call.done.set()
