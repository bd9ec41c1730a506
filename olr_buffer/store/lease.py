"""One writer per store, without local locks: a lease object written with conditional
writes, so that writers on different hosts agree through the store alone.

The lease is a small JSON document (``_olr_buffer/lease.json`` by default)::

    {"format": 1, "writer": "<random id>", "owner": "<queue id>", "host": "...", "pid": 123,
     "process": {"boot": "<boot id>", "pid_namespace": "pid:[4026531836]", "start": 26015},
     "generation": 4, "acquired": 1700000000.1, "renewed": 1700000030.2,
     "expires": 1700000090.2, "ttl": 60.0, "released": false}

- **Acquire:** create it (``If-None-Match: *``). If it exists, a lease that has not
  expired (``expires`` plus ``skew`` for the difference between hosts' clocks) or not
  been released is refused with :class:`LeaseHeldError`, naming its holder; an expired or
  released one is taken over with ``If-Match`` on the version read, and ``generation``
  goes up by one (two writers that both see it expired: one wins, one gets the error).
  A lease whose holder is **provably dead** is taken over at once: one written on this
  host, in this boot of its kernel and this PID namespace (``process``), whose process
  is gone, a zombie, or another process with the same pid (another start time; see
  :func:`holder_is_dead`). A holder that cannot be looked at (another host, another
  container, no ``/proc``) is never taken for dead: its lease expires.
  A lease left by the same ``owner`` on the same host is taken over at once too, unless
  its holder is provably alive in another process: the owner is exclusive on its host
  (the queue's lock), so its holder is gone.
- **Renew:** rewrite it with ``If-Match`` on the version this writer wrote last. If it
  has another version, another writer took it over: :class:`LeaseLostError`.
- **While idle**, a keepalive thread renews it (:meth:`Lease.start_keepalive`); a
  renewal that finds it taken over sets :attr:`Lease.taken_over`, which the writer looks
  at between publications, so that a writer with nothing to publish stops too.
- **Before each publish**, :meth:`Lease.ensure` renews the lease if half its time is
  gone and raises :class:`LeaseLostError` if it is lost. The holder counts its time on its
  own monotonic clock from *before* each write of the lease, so it stops publishing
  before any other host may consider the lease expired, as long as clocks differ by less
  than ``skew`` and a publish takes less than half the ``ttl``.

A lease alone cannot fence a writer that stalls for longer than its ``ttl`` between
:meth:`Lease.ensure` and a publish (no lease can): the changefeed's writer makes each
publication conditional on the store's state as of its ``generation`` (its manifest,
written with ``If-Match``; a Delta table's log, put-if-absent), and the writer that takes
the lease over first moves that state to its own generation
(:func:`olr_buffer.sinks.parquet.fence_previous_writers`): an older writer's next
conditional write fails, and it stops with :class:`WriterFencedError`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import orjson

from ..errors import WriterHeldError
from .base import Store
from .errors import ObjectChangedError, ObjectExistsError, ObjectNotFoundError, StoreError

log = logging.getLogger(__name__)

LEASE = "_olr_buffer/lease.json"
LEASE_FORMAT = 1
DEFAULT_TTL = 60.0
DEFAULT_SKEW = 5.0


@dataclass(frozen=True)
class LeaseTiming:
    """How long a lease lasts (``ttl``), how often its holder renews it (``renew``; None:
    a quarter of ``ttl``), and the difference between hosts' clocks allowed for
    (``skew``): another writer takes the lease over ``ttl + skew`` seconds after its
    holder's last renewal at the latest."""

    ttl: float = DEFAULT_TTL
    renew: float | None = None
    skew: float = DEFAULT_SKEW

    def lease(self, store: Store, **kwargs) -> Lease:
        """A :class:`Lease` of ``store`` with these times (``kwargs``: its other arguments)."""
        return Lease(store, ttl=self.ttl, skew=self.skew, renew_seconds=self.renew, **kwargs)


class LeaseHeldError(StoreError, WriterHeldError):
    """Another writer holds the store's lease, and it has not expired."""


class LeaseLostError(StoreError):
    """This writer's lease was taken over, or released: it must not publish any more."""


class WriterFencedError(LeaseLostError):
    """A write conditional on this writer's lease generation was refused by the store: a
    writer of a later generation took the changefeed over. This writer must stop."""


def fenced_error(store: Store, where: str, generation: int, holder: dict | None = None) -> WriterFencedError:
    """The one-line error of a writer of lease ``generation`` fenced at ``where``; the
    writer that took over from ``holder`` (its lease stamp), else from the lease document."""
    if not holder:
        try:
            holder = _parse(store.read(LEASE), store.location(LEASE))
        except StoreError:
            holder = {}
    by = (
        f"writer {holder.get('writer')} on {holder.get('host')} (pid {holder.get('pid')}, "
        f"lease generation {holder.get('generation')})"
        if holder.get("writer")
        else "another writer"
    )
    return WriterFencedError(
        f"{where}: changefeed taken over by {by}: this writer (lease generation {generation}) stops and publishes "
        "nothing more",
        hint="its lease expired while it was paused or cut off; run it again to make it the standby",
        uri=where,
        generation=generation,
        holder=holder,
    )


class Lease:
    """The single-writer lease of ``store``; see the module doc. ``owner``: what the
    writer writes for (the queue id), recorded in the lease; ``info``: more facts for
    the record (JSON values)."""

    def __init__(
        self,
        store: Store,
        name: str = LEASE,
        *,
        owner: str | None = None,
        ttl: float = DEFAULT_TTL,
        skew: float = DEFAULT_SKEW,
        writer_id: str | None = None,
        info: dict | None = None,
        renew_seconds: float | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        watch: Callable[[str, float], AbstractContextManager[None]] | None = None,
    ) -> None:
        if ttl <= 0 or skew < 0:
            raise ValueError("a lease needs ttl > 0 and skew >= 0")
        if renew_seconds is not None and not 0 < renew_seconds < ttl:
            raise ValueError("a lease is renewed more often than it lasts: 0 < renew_seconds < ttl")
        self.store = store
        self.name = name
        self.owner = owner
        self.ttl = ttl
        self.skew = skew
        #: the keepalive renews the lease this often (a quarter of ``ttl`` if not given)
        self.renew_seconds = renew_seconds if renew_seconds is not None else ttl / 4
        self.writer_id = writer_id or uuid.uuid4().hex
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.process = _this_process()  # (with the pid: see holder_is_dead)
        self.info = dict(info or {})
        self.generation = 0  # 0: not held yet
        self._clock = clock
        self._monotonic = monotonic
        self._etag: str | None = None
        self._acquired = 0.0
        self._valid_until = 0.0  # on the monotonic clock
        self._lost: str | None = None  # why it is lost
        self._taken_over = False  # a renewal found another writer's lease there
        self._guard = threading.RLock()
        self._keepalive: threading.Thread | None = None
        self._stop = threading.Event()
        #: around each renewal of the keepalive (what it does, how often it is tried):
        #: :meth:`OutageRetry.watched` (run), so that a store that does not answer it is an
        #: outage even while nothing is published; an outage is then said there, not here
        self._watch = watch or (lambda what, every: nullcontext())
        self._watched = watch is not None

    @property
    def taken_over(self) -> bool:
        """Whether a renewal (the keepalive's too: a writer with nothing to publish) found
        the lease taken over by another writer; it stays so (the writer must stop)."""
        return self._taken_over

    @property
    def held(self) -> bool:
        """Whether this writer holds the lease now, as far as its own clock tells."""
        return self._etag is not None and self._lost is None and self._monotonic() < self._valid_until

    def remaining(self) -> float:
        """Seconds this writer may still count on the lease without renewing it."""
        return max(0.0, self._valid_until - self._monotonic()) if self._etag and not self._lost else 0.0

    # -- taking it ----------------------------------------------------------------------

    def acquire(self) -> None:
        """Take the lease; :class:`LeaseHeldError` if another live writer holds it."""
        with self._guard:
            for _ in range(5):
                started = self._monotonic()
                self._acquired = self._clock()
                doc = self._document(1)
                try:
                    written = self.store.create(self.name, doc)
                except ObjectExistsError:
                    pass
                else:
                    self._held(doc, written.etag, started, 1)
                    log.info(
                        "%s: lease taken by writer %s (generation %d)",
                        self.store.location(self.name),
                        self.writer_id,
                        self.generation,
                    )
                    return
                try:
                    current = self.store.read_versioned(self.name)
                except ObjectNotFoundError:
                    continue  # removed meanwhile: create it again
                holder = _parse(current.data, self.store.location(self.name))
                if holder.get("writer") == self.writer_id:
                    self._held(current.data, current.etag, started, int(holder.get("generation", 1)))
                    return
                self._refuse_if_live(holder)
                generation = int(holder.get("generation") or 0) + 1
                started = self._monotonic()
                self._acquired = self._clock()
                doc = self._document(generation)
                try:
                    written = self.store.replace_if(self.name, doc, current.etag)
                except (ObjectChangedError, ObjectNotFoundError):
                    continue  # another writer moved first: look again
                self._held(doc, written.etag, started, generation)
                log.log(
                    logging.INFO if holder.get("released") else logging.WARNING,
                    "%s: lease taken over from writer %s on %s (pid %s, %s), generation %d",
                    self.store.location(self.name),
                    holder.get("writer"),
                    holder.get("host"),
                    holder.get("pid"),
                    "which released it" if holder.get("released") else "whose lease expired or which stopped",
                    generation,
                )
                return
            raise LeaseHeldError(
                f"{self.store.location(self.name)}: the lease keeps changing hands: other writers are starting",
                hint="run one writer per changefeed",
                uri=self.store.location(self.name),
            )

    def live_holder(self) -> dict | None:
        """The lease document of another writer that holds the lease now (one that
        :meth:`acquire` would refuse), or None: free, released, expired, its holder gone,
        or this writer's own. Reads the lease, takes nothing."""
        holder = self.last_holder()
        return holder if holder is not None and self.holds(holder) else None

    def last_holder(self) -> dict | None:
        """The lease document of the other writer that took the lease last, whether it
        holds it still or not (:meth:`holds`), or None: no lease yet, or this writer's own.
        Reads the lease, takes nothing (a standby looks with it)."""
        try:
            current = self.store.read_versioned(self.name)
        except ObjectNotFoundError:
            return None
        holder = _parse(current.data, self.store.location(self.name))
        return None if holder.get("writer") == self.writer_id else holder

    def holds(self, holder: dict) -> bool:
        """Whether the writer of the lease document ``holder`` (another's) holds the lease
        now: :meth:`acquire` would refuse it."""
        return self._why_free(holder) is None

    def _why_free(self, holder: dict) -> str | None:
        """Why the lease of ``holder`` (another writer's document) may be taken now, or
        None while it holds it: released or expired, or its holder provably gone."""
        now = self._clock()
        expires = holder.get("expires")
        if not isinstance(expires, (int, float)):
            expires = float("inf")
        if holder.get("released") or now > expires + self.skew:
            return "expired"
        if holder.get("host") == self.host:
            if holder_is_dead(holder):
                return "on this host, which is gone (killed, or it crashed)"
            if self.owner is not None and holder.get("owner") == self.owner and not _alive_elsewhere(holder):
                return "on this host, a writer of the same queue that stopped"
        return None

    def _refuse_if_live(self, holder: dict) -> None:
        why = self._why_free(holder)
        if why == "expired":
            return
        if why is not None:
            log.warning(
                "%s: taking over the lease of pid %s %s", self.store.location(self.name), holder.get("pid"), why
            )
            return
        expires = holder.get("expires")
        if not isinstance(expires, (int, float)):
            expires = float("inf")
        until = datetime.fromtimestamp(expires, UTC).isoformat(timespec="seconds")
        raise LeaseHeldError(
            f"{self.store.location(self.name)}: changefeed is written by writer {holder.get('writer')} "
            f"on {holder.get('host')} (pid {holder.get('pid')}), whose lease runs until {until}",
            hint="one process writes a changefeed: stop the other one first; if it died, its lease expires "
            f"{self.ttl:g} s after its last renewal",
            uri=self.store.location(self.name),
            holder=holder,
        )

    def _held(self, doc: bytes, etag: str | None, started: float, generation: int) -> None:
        if etag is None:  # a create whose answer was lost and retried: read our own version
            current = self.store.read_versioned(self.name)
            if _parse(current.data, self.store.location(self.name)).get("writer") != self.writer_id:
                raise LeaseLostError(
                    f"{self.store.location(self.name)}: lease taken over at once", uri=self.store.location(self.name)
                )
            etag = current.etag
        self._etag = etag
        self.generation = generation
        self._valid_until = started + self.ttl
        self._lost = None
        self._taken_over = False

    # -- keeping it ---------------------------------------------------------------------

    def renew(self) -> None:
        """Extend the lease; :class:`LeaseLostError` if another writer took it."""
        with self._guard:
            self._check_not_lost()
            started = self._monotonic()
            doc = self._document(self.generation)
            try:
                written = self.store.replace_if(self.name, doc, self._etag or "")
            except (ObjectChangedError, ObjectNotFoundError):
                if not self._own_renewal(started):
                    self._taken_over = True
                    self._lose("taken over by another writer")
                return
            self._held(doc, written.etag, started, self.generation)

    def _own_renewal(self, started: float) -> bool:
        """After a refused renewal: whether the lease there is this writer's own, written
        by an earlier renewal whose answer was lost (the store became unreachable while
        it went in, and the caller tried again); then it is held as that version."""
        try:
            current = self.store.read_versioned(self.name)
        except ObjectNotFoundError:
            return False
        holder = _parse(current.data, self.store.location(self.name))
        if (
            holder.get("writer") != self.writer_id
            or holder.get("generation") != self.generation
            or holder.get("released")
        ):
            return False
        self._held(current.data, current.etag, started, self.generation)
        # counted from when that renewal was written (this host's clock), not from now
        expires = holder.get("expires")
        left = expires - self._clock() if isinstance(expires, (int, float)) else 0.0
        self._valid_until = min(self._valid_until, self._monotonic() + max(0.0, left))
        return True

    def ensure(self) -> None:
        """Before a publish: the lease is this writer's for at least half its ``ttl`` more,
        renewed if need be; :class:`LeaseLostError` if it is lost."""
        with self._guard:
            self._check_not_lost()
            if self.remaining() < self.ttl / 2:
                self.renew()

    def start_keepalive(self) -> None:
        """Renew the lease every ``renew_seconds`` in a thread, so that an idle writer keeps
        it; a loss ends the thread, is raised by the next :meth:`ensure`, and a take-over
        shows in :attr:`taken_over` (a writer with nothing to publish looks there)."""
        if self._keepalive is not None:
            return
        self._stop.clear()
        self._keepalive = threading.Thread(target=self._renewing, name="lease-keepalive", daemon=True)
        self._keepalive.start()

    def _renewing(self) -> None:
        failing = False  # (an outage is said once, not at every try)
        while not self._stop.wait(self.renew_seconds):
            try:
                with self._watch("renew the changefeed's lease", self.renew_seconds):
                    self.renew()
            except LeaseLostError:
                return
            except StoreError as exc:
                said = failing or (self._watched and exc.retryable)  # (the watch said the outage)
                log.log(
                    logging.DEBUG if said else logging.WARNING,
                    "cannot renew the changefeed's lease (%s); retrying every %g s",
                    exc,
                    self.renew_seconds,
                )
                failing = True
            else:
                if failing:
                    log.log(
                        logging.DEBUG if self._watched else logging.INFO,
                        "%s: lease renewed again",
                        self.store.location(self.name),
                    )
                failing = False

    def abandon(self) -> None:
        """Stop keeping the lease, without a word to the store (which does not answer):
        it is not released, and expires ``ttl`` seconds after its last renewal. The
        keepalive is not waited for (its renewal under way may still go in)."""
        self._stop.set()
        self._keepalive = None
        # (not under the guard: a renewal that waits for the store holds it)
        self._lost = "abandoned: the store did not answer"
        self._etag = None

    def release(self) -> None:
        """Give the lease up (marked released: the next writer takes it at once)."""
        self._stop.set()
        if self._keepalive is not None and self._keepalive is not threading.current_thread():
            self._keepalive.join()
        self._keepalive = None
        with self._guard:
            if self._etag is None or self._lost is not None:
                return
            doc = self._document(self.generation, released=True)
            try:
                self.store.replace_if(self.name, doc, self._etag)
            except (ObjectChangedError, ObjectNotFoundError):
                pass  # taken over already
            except StoreError as exc:
                log.warning("cannot release the changefeed's lease (%s): it expires by itself", exc)
            self._lost = "released"
            self._etag = None

    def stamp(self) -> dict:
        """Who holds the lease, for the documents whose writes it makes conditional."""
        return {"generation": self.generation, "writer": self.writer_id, "host": self.host, "pid": self.pid}

    # -- helpers ------------------------------------------------------------------------

    def _check_not_lost(self) -> None:
        if self._etag is None and self._lost is None:
            raise LeaseLostError(
                f"{self.store.location(self.name)}: the lease is not held", uri=self.store.location(self.name)
            )
        if self._lost is not None:
            raise LeaseLostError(
                f"{self.store.location(self.name)}: lease lost: {self._lost}", uri=self.store.location(self.name)
            )

    def _lose(self, why: str) -> None:
        self._lost = why
        self._etag = None
        raise LeaseLostError(
            f"{self.store.location(self.name)}: lease lost: {why}; this writer stops publishing",
            hint="another writer took the changefeed over: run one writer per changefeed",
            uri=self.store.location(self.name),
        )

    def _document(self, generation: int, *, released: bool = False) -> bytes:
        now = self._clock()
        doc = {
            "format": LEASE_FORMAT,
            "writer": self.writer_id,
            "owner": self.owner,
            "host": self.host,
            "pid": self.pid,
            "process": self.process,
            "generation": generation,
            "acquired": self._acquired,
            "renewed": now,
            "expires": now if released else now + self.ttl,
            "ttl": self.ttl,
            "released": released,
            **self.info,
        }
        return orjson.dumps(doc)


# -- whether a holder on this host is gone ----------------------------------------------


def _read(path: str) -> str | None:
    try:
        with open(path) as fh:
            return fh.read()
    except OSError:
        return None


def _start_time(stat: str | None) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) from a ``/proc/PID/stat`` line."""
    if not stat:
        return None
    fields = stat.rpartition(")")[2].split()  # (the command, in parentheses, may hold spaces)
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _this_process() -> dict | None:
    """What names this process on this host beyond its pid: the kernel's boot id, the
    PID namespace, the start time (None without a Linux ``/proc`` of this namespace)."""
    boot = (_read("/proc/sys/kernel/random/boot_id") or "").strip()
    stat = _read("/proc/self/stat")
    started = _start_time(stat)
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    if not boot or started is None or stat is None or stat.split(" ", 1)[0] != str(os.getpid()):
        return None  # (a /proc of another PID namespace: its pids are not ours)
    return {"boot": boot, "pid_namespace": namespace, "start": started[1]}


def _same_pid_space(holder: dict) -> bool:
    """Whether the holder's pid names a process of this host's kernel, in this boot and
    this PID namespace, as this process sees them."""
    theirs, ours = holder.get("process"), _this_process()
    return (
        ours is not None
        and isinstance(theirs, dict)
        and isinstance(holder.get("pid"), int)
        and isinstance(theirs.get("start"), int)
        and theirs.get("boot") == ours["boot"]
        and theirs.get("pid_namespace") == ours["pid_namespace"]
    )


def _state(pid: int) -> tuple[str, int] | None | Literal[False]:
    """The process ``pid``: False if there is none, (state, start time), or None if it
    exists but cannot be looked at."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's: it exists
    except OSError:
        return None
    return _start_time(_read(f"/proc/{pid}/stat"))


def holder_is_dead(holder: dict) -> bool:
    """Whether the process that wrote the lease document ``holder`` is provably gone:
    it ran in this boot of this host's kernel and this PID namespace, and its pid is
    now free, a zombie, or another process's (another start time). Anything that cannot
    be checked (another host or container, no ``/proc``) is not dead: its lease is left
    to expire."""
    if not _same_pid_space(holder):
        return False
    found = _state(holder["pid"])
    if found is False:
        return True
    if found is None:
        return False
    state, start = found
    return state in ("Z", "X", "x") or start != holder["process"]["start"]


def _alive_elsewhere(holder: dict) -> bool:
    """Whether the holder is provably a live process other than this one."""
    if not _same_pid_space(holder) or holder["pid"] == os.getpid():
        return False
    found = _state(holder["pid"])
    return isinstance(found, tuple) and found[0] not in ("Z", "X", "x") and found[1] == holder["process"]["start"]


def _parse(data: bytes, where: str) -> dict:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = None
    if not isinstance(doc, dict):
        raise StoreError(
            f"{where}: not a lease document",
            hint="if no writer is running, remove it; the next writer creates it again",
            uri=where,
        )
    return doc
