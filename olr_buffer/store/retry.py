"""Riding out an unreachable store: what ``olr-buffer run`` does when S3 does not answer.

:meth:`OutageRetry.call` runs a store operation; while it fails with an error that says
retrying may help (:class:`~olr_buffer.store.StoreUnreachableError`: refused, timed out,
5xx, throttled), it waits and tries again, the wait doubling from ``first`` up to ``cap``
seconds, until the store answers or ``stop`` is set (then the last error is raised).
Errors that retrying cannot fix (access denied, a missing bucket) are raised at once.

It says so: one WARNING when an outage starts, one every ``log_every`` seconds while it
lasts, one INFO when the store answers again; and it keeps figures for metrics
(outages, retried calls, how long the current outage has lasted).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TypeVar

from .errors import StoreError

log = logging.getLogger(__name__)

T = TypeVar("T")


class OutageRetry:
    """See the module doc. ``on_wait`` is called while waiting (at least every second):
    the service's loop is blocked meanwhile, and keeps its metrics and health fresh."""

    def __init__(self, stop: threading.Event | None = None, *, first: float = 0.5, cap: float = 30.0,
                 log_every: float = 60.0, on_wait: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stop = stop or threading.Event()
        self.first = first
        self.cap = cap
        self.log_every = log_every
        self.on_wait = on_wait
        self._clock = clock
        self.outages = 0  # outages met
        self.retries = 0  # calls tried again
        self.outage_since: float | None = None  # on the monotonic clock, while an outage lasts

    def outage_seconds(self) -> float:
        """How long the current outage has lasted (0 while the store answers)."""
        return self._clock() - self.outage_since if self.outage_since is not None else 0.0

    def call(self, fn: Callable[[], T], what: str) -> T:
        """``fn()``, retried while the store cannot be reached; ``what`` says what it does
        (``publish part-….parquet``) in the log."""
        delay = self.first
        last_log = None
        while True:
            try:
                result = fn()
            except StoreError as exc:
                if not exc.retryable:
                    raise
                now = self._clock()
                if self.outage_since is None:
                    self.outage_since = now
                    self.outages += 1
                    last_log = now
                    log.warning("the changefeed's store cannot be reached (%s); retrying to %s, every %g s at most",
                                exc, what, self.cap, extra={"error": str(exc)})
                elif last_log is None or now - last_log >= self.log_every:
                    last_log = now
                    log.warning("the changefeed's store is still unreachable after %.0f s (%d retries): %s",
                                now - self.outage_since, self.retries, exc, extra={"error": str(exc)})
                if self._wait(delay):
                    raise
                self.retries += 1
                delay = min(delay * 2, self.cap)
                continue
            if self.outage_since is not None:
                log.info("the changefeed's store answers again after %.1f s (%d retries)", self.outage_seconds(),
                         self.retries)
                self.outage_since = None
            return result

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
