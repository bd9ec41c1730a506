"""A standby (``olr-buffer run --standby``): before the run is assembled, wait while
another service writes the changefeed, then take it over.

The standby reads the changefeed's lease (:meth:`Lease.last_holder`; a changefeed in a
local or shared directory is written under the lease too with ``standby``, instead of
its lock) every ``standby_poll_seconds``: while another writer holds it, it waits (role
``standby``, the holder and the end of its lease in the logs, `status` and the metrics).
Once the lease is released, expired (its holder died, lost its network or hangs) or its
holder is provably gone (on this host), the run is assembled as with
``--adopt-changefeed``: the sink takes the lease over (a higher generation) and the
source reads from what the changefeed has published. A lease of another service found
already ended is taken over at once, and counted as a take-over like one waited out.
Without a lease, it starts at once. The queue is held (locked) while it waits."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable

from ..errors import WriterHeldError
from ..fsutil import unlink_quietly
from ..service.logs import iso_time
from ..service.role import ACTIVE, ROLE_FILE, STANDBY, ServiceRole, describe_holder, write_role
from ..store import Lease, LeaseTiming, OutageRetry, StoreError, open_store, store_state
from ..txbuffer import LmdbQueue
from ..txbuffer.metadata import QUEUE_ID_KEY
from .options import PipelineOptions

log = logging.getLogger("olr_buffer")

#: What a standby shows of its holder (the lease document holds more).
_HOLDER_FIELDS = ("writer", "host", "pid", "generation", "owner")
#: What a look at the lease that the store did not answer found: not known to be free.
_UNKNOWN: dict = {}


class Standby:
    """The wait of ``run --standby`` for the changefeed ``changefeed``, with the queue at
    ``queue_dir``; ``role`` is what it is, kept up to date (``on_wait(role)`` at every
    look: metrics and health). ``retry``: the service's, which watches its looks at the
    lease as it does the service's store calls: a look unanswered for the store timeout,
    or one that fails, is an outage (said, and said again when the store answers), and
    once stopped a look is given up (:meth:`OutageRetry.attempt`)."""

    def __init__(
        self,
        changefeed: str,
        queue_dir: str,
        opts: PipelineOptions,
        stop: threading.Event,
        role: ServiceRole,
        on_wait: Callable[[ServiceRole], None] | None = None,
        retry: OutageRetry | None = None,
    ) -> None:
        self.changefeed = changefeed
        self.queue_dir = queue_dir
        self.opts = opts
        self.stop = stop
        self.role = role
        self.on_wait = on_wait
        self.timing = opts.lease or LeaseTiming()
        self._lease: Lease | None = None  # to look at the changefeed's lease (object storage)
        self._waited = False  # another writer held the changefeed since the start
        self._ended: dict | None = None  # the ended lease of another service, found free
        self._recorded: tuple | None = None
        self.retry = retry or OutageRetry(stop, timeout=opts.store_timeout_seconds)
        #: a look at the lease that failed or was given up while stopping: why the wait ended
        self.unanswered: StoreError | None = None

    def wait(self) -> bool:
        """Until no other writer holds the changefeed (True), or ``stop`` (False)."""
        queue = LmdbQueue(self.queue_dir, segment_bytes=self.opts.segment_bytes, durable=self.opts.durable)
        try:
            while not self.stop.is_set():
                holder = self._look(queue)
                if self.stop.is_set():
                    break
                if holder is None:
                    if not self._waited and self._ended is not None:
                        shown = {k: self._ended[k] for k in _HOLDER_FIELDS if self._ended.get(k) is not None}
                        log.warning(
                            "standby: the lease of %s has ended: taking the changefeed %s over",
                            describe_holder(shown),
                            self.changefeed,
                            extra={"changefeed": self.changefeed, "holder": shown},
                        )
                    elif not self._waited:
                        log.info(
                            "standby: nobody writes the changefeed %s: starting at once",
                            self.changefeed,
                            extra={"changefeed": self.changefeed},
                        )
                    else:
                        log.warning(
                            "standby: the lease of %s has ended: taking the changefeed %s over",
                            self.role.describe_holder(),
                            self.changefeed,
                            extra={"changefeed": self.changefeed, "holder": self.role.holder},
                        )
                    queue.close()
                    return True
                if holder is _UNKNOWN:  # the store did not answer (said as an outage): wait on
                    if self.on_wait is not None:
                        self.on_wait(self.role)
                else:
                    self.waiting(holder)
                self.stop.wait(self.opts.standby_poll_seconds)
        except BaseException:
            queue.close()
            raise
        self.forget()
        queue.close_and_remove_if_unused({QUEUE_ID_KEY})
        return False

    def _look(self, queue: LmdbQueue) -> dict | None:
        """The lease of the writer that holds the changefeed, or None if it may be taken;
        :data:`_UNKNOWN` if the store did not answer (the changefeed is not known to be free)."""
        if self._lease is None:
            queue_id = queue.meta(QUEUE_ID_KEY)
            self._lease = self.timing.lease(open_store(self.changefeed), owner=queue_id.decode() if queue_id else None)
        try:
            # (a store that does not answer, or cannot be reached, is said by the retry: an outage)
            holder = self.retry.attempt(
                self._lease.last_holder,
                f"look at the changefeed's lease at {self.changefeed}",
                every=self.opts.standby_poll_seconds,
            )
        except StoreError as exc:
            if not exc.retryable:
                raise
            if self.stop.is_set():
                self.unanswered = exc
                return None
            return _UNKNOWN
        if holder is not None and not self._lease.holds(holder):
            # ended; another service's (not this queue's own, left by its last run): taken over
            owner = holder.get("owner")
            self._ended = holder if owner is None or owner != self._lease.owner else None
            return None
        self._ended = None
        return holder

    def waiting(self, holder: dict) -> None:
        """Another writer holds the changefeed (its lease document, or what its lock says)."""
        shown = {k: holder[k] for k in _HOLDER_FIELDS if holder.get(k) is not None}
        expires = holder.get("expires")
        ends = expires + self.timing.skew if isinstance(expires, (int, float)) else None
        new_holder = not self._waited or shown.get("writer") != (self.role.holder or {}).get("writer")
        if self.role.role != STANDBY:
            self.role.role = STANDBY
        self.role.holder, self.role.lease_ends = shown, ends
        self._waited = True
        if new_holder:
            log.info(
                "standby: the changefeed %s is written by %s; waiting%s",
                self.changefeed,
                describe_holder(shown),
                f": its lease runs until {iso_time(ends)} unless renewed" if ends is not None else " for it to stop",
                extra={"changefeed": self.changefeed, "holder": shown, "lease_ends": iso_time(ends) if ends else None},
            )
        if self._recorded != (shown.get("writer"), shown.get("pid"), ends):
            self._recorded = (shown.get("writer"), shown.get("pid"), ends)
            write_role(self.queue_dir, self.role)
        if self.on_wait is not None:
            self.on_wait(self.role)

    def refused(self, exc: WriterHeldError) -> None:
        """Opening the changefeed was refused: another writer took it meanwhile (or holds
        a local changefeed's lock)."""
        holder = exc.facts.get("holder")
        if not isinstance(holder, dict):
            holder = {"pid": exc.facts.get("pid")}
        log.debug("standby: %s", exc)
        self.waiting(holder)

    def active(self, lease_generation: int | None) -> None:
        """The changefeed is this service's now."""
        took_over = self._waited or self._ended is not None
        self._ended = None
        if took_over:
            self.role.takeovers += 1
        self.role.role, self.role.holder, self.role.lease_ends = ACTIVE, None, None
        self.role.lease_generation = lease_generation
        self._waited = False
        write_role(self.queue_dir, self.role)
        log.warning(
            "standby: %s the changefeed %s: active now%s",
            "took over" if took_over else "writes",
            self.changefeed,
            f", lease generation {lease_generation}" if lease_generation is not None else "",
            extra={"changefeed": self.changefeed, "lease_generation": lease_generation, "role": ACTIVE},
        )

    def stopped(self) -> None:
        """The service stopped while it stood by: its closing line (it read and published
        nothing; who writes the changefeed, as far as it knows; a look at the lease the
        stop gave up, unanswered), its role no longer recorded."""
        self.forget()
        holder = self.role.holder if self._waited else None
        cf = self.changefeed
        if holder is not None:
            writer = f"the changefeed {cf} is written by {self.role.describe_holder()}"
            if self.unanswered is not None:
                writer += f" as last seen; its store {store_state(self.unanswered)}"
        elif self.unanswered is not None:
            writer = f"who writes the changefeed {cf} is not known: its store {store_state(self.unanswered)}"
        elif self.retry.outage_since is not None:
            writer = f"who writes the changefeed {cf} is not known: its store cannot be reached"
        else:
            writer = f"it had not looked at the changefeed {cf} yet"
        log.log(
            logging.INFO if self.unanswered is None else logging.WARNING,
            "stopped cleanly while standing by: this standby read and published nothing; %s",
            writer,
            extra={"changefeed": cf, "holder": holder, "records": 0, "transactions": 0},
        )

    def forget(self) -> None:
        """The service stops: its role is no longer recorded."""
        unlink_quietly(os.path.join(self.queue_dir, ROLE_FILE))
