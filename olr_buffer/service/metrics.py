"""`run`'s metrics: the running service's figures (:class:`RunFigures`, which the runtime
takes from its pipeline) in the Prometheus text format, and its health."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, PlatformCollector, ProcessCollector, generate_latest
from prometheus_client.core import InfoMetricFamily, SummaryMetricFamily

from .metrics_http import build_info, loop_health, metric_family

#: ``/health`` answers 503 when the service's loop has not ticked for this many seconds
#: (``run --health-timeout``).
HEALTH_STALE_SECONDS = 30.0
#: The figures are taken from the running service at most this often.
FIGURES_SECONDS = 1.0


@dataclass
class RunFigures:
    """What `run`'s metrics show: the figures of the running service, taken by the
    runtime from its pipeline (``Pipeline.run_figures``) and handed down here, which
    renders them and never looks into the pipeline. Counts are the process's since it
    started; per thread, its progress ``P(t)`` and its state (open, closed, finished);
    seconds to the millisecond."""

    records_read: int = 0
    dead_letters: int = 0
    queue_bytes: int = 0
    queue_segments: int = 0
    open_transactions: int = 0
    oldest_open_age_seconds: float = 0.0
    thread_progress: dict[int, int] = field(default_factory=dict)
    thread_states: dict[int, str] = field(default_factory=dict)
    threads_waiting: int = 0
    watermark: int = -1
    watermark_lag: int = 0
    seconds_behind_source: float = 0.0
    late_records: int = 0
    abandoned_transactions: int = 0
    abandoned_rows: int = 0
    abandoned_records: int = 0
    rolled_back: int = 0
    unmatched_compensations: int = 0
    transactions_published: int = 0
    rows_published: int = 0
    next_tx_seq: int = 0
    unpublished_seconds: float = 0.0
    store_outages: int = 0
    store_retries: int = 0
    store_outage_seconds: float = 0.0
    clock_ahead: int = 0
    latencies: list[float] = field(default_factory=list)  # recent commit-to-visible latencies, sorted
    source_metrics: list[Any] = field(default_factory=list)  # the source's own (name, kind, help, value)
    lease_generation: int | None = None
    lease_seconds_left: float | None = None
    retry: Any = None  # the run's store.OutageRetry: its figures are read when scraped


class Metrics:
    """The service's figures in the Prometheus text format (rendered by prometheus_client):
    the service's (:class:`RunFigures`), taken at most once a second from its loop
    (:meth:`tick`, :meth:`update`), and the store's
    (``olr_buffer_store_*``), read when asked: a loop blocked in a call to a store that
    does not answer shows its outage. ``/health`` says whether that loop still ticks:
    503 once it has not for ``stale_after`` seconds."""

    def __init__(self, stale_after: float = HEALTH_STALE_SECONDS) -> None:
        self.stale_after = stale_after
        self._families: list | None = None
        self._retry = None  # the run's OutageRetry: its figures are read when asked
        self._last = 0.0
        self._tick = time.monotonic()
        self._lock = threading.Lock()

    def tick(self) -> bool:
        """The service's loop ticked (``/health``); True when its figures are due (once a
        second): then :meth:`update`."""
        now = time.monotonic()
        self._tick = now
        if now - self._last < FIGURES_SECONDS:
            return False
        self._last = now
        return True

    def watch_store(self, retry) -> None:
        """The run's :class:`~olr_buffer.store.OutageRetry`, from its start: its figures
        (``olr_buffer_store_*``) are shown from then on, a standby's too."""
        with self._lock:
            self._retry = retry

    def update(self, figures: RunFigures, role=None) -> None:
        """The service's figures; ``role``: a :class:`~.role.ServiceRole` of ``run
        --standby``, shown too."""
        self._tick = time.monotonic()
        families = list(_families(figures))  # (the store's: replaced by fresh ones in text())
        if role is not None:
            families.extend(_role_families(role, figures.lease_generation, figures.lease_seconds_left))
        with self._lock:
            self._families = families
            if figures.retry is not None:
                self._retry = figures.retry

    def standing_by(self, role) -> None:
        """A standby waits (no pipeline yet): its role, the holder and its lease's end."""
        self._tick = time.monotonic()
        families = [build_info(), *_role_families(role, None, None)]
        with self._lock:
            self._families = families

    def text(self) -> bytes:
        with self._lock:
            families, retry = self._families, self._retry
        if retry is not None:  # the store's, fresh: a loop blocked in a call does not update them
            store = list(_store_families(retry))
            names = {f.name for f in store}
            families = [f for f in families or [build_info()] if f.name not in names] + store
        if families is None:
            return b"# no data yet\n"
        return _render(families)

    def health(self) -> tuple[bool, dict]:
        """(healthy, document): healthy while the loop ticked within ``stale_after``
        seconds (a loop that waits for an unreachable store to answer again ticks; one
        blocked in a call that does not return does not)."""
        ok, doc = loop_health(self._tick, self.stale_after)
        with self._lock:
            retry = self._retry
        outage = retry.outage_seconds() if retry is not None else 0.0
        if outage > 0:
            doc["store_outage_seconds"] = round(outage, 3)
        return ok, doc


def _role_families(role, lease_generation: int | None, lease_seconds_left: float | None):
    """``run --standby``'s role: ``olr_buffer_standby`` (1 while it waits), the holder it
    waits for, when the holder's lease ends (or its own does), its lease generation, the
    take-overs it made."""
    standby = role.role == "standby"
    holder = role.holder or {}
    info = InfoMetricFamily(
        "olr_buffer_role",
        "The service's role (active: it writes the changefeed; standby: it waits) and the writer it waits for.",
        value={
            "role": role.role,
            "holder_writer": str(holder.get("writer") or ""),
            "holder_host": str(holder.get("host") or ""),
            "holder_pid": str(holder.get("pid") or ""),
        },
    )
    yield info
    yield metric_family(
        "standby",
        "gauge",
        "1 while the service stands by (another one writes the changefeed), else 0.",
        [((), 1 if standby else 0)],
    )
    ends = (
        role.lease_ends if standby else (time.time() + lease_seconds_left if lease_seconds_left is not None else None)
    )
    if ends is not None:
        yield metric_family(
            "lease_ends_timestamp_seconds",
            "gauge",
            "Standby: when the holder's lease may be taken over unless it renews it; active: when its own lease "
            "ends unless renewed (seconds since the epoch).",
            [((), round(ends, 3))],
        )
    generation = lease_generation if not standby else holder.get("generation")
    if isinstance(generation, int):
        yield metric_family(
            "lease_generation",
            "gauge",
            "Generation of the changefeed's lease: this service's (active), or the holder's (standby).",
            [((), generation)],
        )
    yield metric_family(
        "takeovers_total",
        "counter",
        "Times this service took the changefeed over from another one.",
        [((), role.takeovers)],
    )


def render_metrics(figures: RunFigures) -> bytes:
    """The service's metrics in the Prometheus text exposition format, with the process's
    own (``process_*``: memory, CPU, open file descriptors; ``python_info``)."""
    return _render(list(_families(figures)))


def _render(families: list) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    return generate_latest(registry)


class _Snapshot:
    """A prometheus_client collector that hands out families collected beforehand."""

    def __init__(self, families: list) -> None:
        self._families = families

    def collect(self):
        return iter(self._families)


#: ``run``'s metrics of one value each: (name, type, help, the :class:`RunFigures` field).
_SCALARS = (
    ("records_appended_total", "counter", "Redo records appended to the queue by this process.", "records_read"),
    ("queue_bytes", "gauge", "Bytes of the queue's segment files.", "queue_bytes"),
    ("queue_segments", "gauge", "Segments in the queue.", "queue_segments"),
    ("open_transactions", "gauge", "Transactions held by the dispatcher.", "open_transactions"),
    (
        "oldest_open_age_seconds",
        "gauge",
        "Age of the oldest open transaction (from its begin's tm).",
        "oldest_open_age_seconds",
    ),
    (
        "threads_waiting",
        "gauge",
        "Threads in play that have not written a record yet (nothing is published).",
        "threads_waiting",
    ),
    ("watermark_scn", "gauge", "min P(t) over the threads in play.", "watermark"),
    (
        "watermark_lag_scn",
        "gauge",
        "How far the watermark is behind the most advanced thread, in SCN.",
        "watermark_lag",
    ),
    (
        "seconds_behind_source",
        "gauge",
        "Like Debezium's MilliSecondsBehindSource, in seconds: now minus the tm of the oldest commit waiting for the "
        "watermark, else the delay of the last published commit.",
        "seconds_behind_source",
    ),
    (
        "late_records_total",
        "counter",
        "Records not published because they came after their transaction, or a later commit, was published (threads "
        "not in play).",
        "late_records",
    ),
    (
        "abandoned_transactions_total",
        "counter",
        "Transactions without an end abandoned by the retention limit (--transaction-retention[-scn]): never "
        "published.",
        "abandoned_transactions",
    ),
    ("abandoned_rows_total", "counter", "Rows of the abandoned transactions, not published.", "abandoned_rows"),
    (
        "abandoned_records_total",
        "counter",
        "Records of abandoned transactions that came after they were abandoned (their end among them), not published.",
        "abandoned_records",
    ),
    (
        "dead_letters_total",
        "counter",
        "Bad records written to the --dead-letter file by this run (its reader processes).",
        "dead_letters",
    ),
    ("transactions_rolled_back_total", "counter", "Transactions ended by a rollback (not published).", "rolled_back"),
    (
        "unmatched_compensations_total",
        "counter",
        "Compensating records (rollback: true) that matched no row of their transaction.",
        "unmatched_compensations",
    ),
    (
        "transactions_published_total",
        "counter",
        "Transactions handed to the changefeed's writer (visible once their file is published).",
        "transactions_published",
    ),
    ("rows_published_total", "counter", "Rows handed to the changefeed's writer.", "rows_published"),
    ("changefeed_next_tx_seq", "gauge", "The tx_seq the next transaction will get.", "next_tx_seq"),
    (
        "changefeed_unpublished_seconds",
        "gauge",
        "How long the oldest transaction handed to the changefeed's writer but not yet in a visible file has waited "
        "(0: none waits).",
        "unpublished_seconds",
    ),
    (
        "store_outages_total",
        "counter",
        "Times the changefeed's object store could not be reached (each outage once; run retries until it answers).",
        "store_outages",
    ),
    (
        "store_retries_total",
        "counter",
        "Calls to the changefeed's object store tried again because it could not be reached.",
        "store_retries",
    ),
    (
        "store_outage_seconds",
        "gauge",
        "How long the changefeed's object store has been unreachable (0 while it answers).",
        "store_outage_seconds",
    ),
    (
        "publish_latency_clock_ahead_total",
        "counter",
        "Published transactions whose commit tm was later than their publication (the source's clock ahead of this "
        "machine's): left out of olr_buffer_publish_latency_seconds.",
        "clock_ahead",
    ),
)


_STORE_SCALARS = tuple(s for s in _SCALARS if s[3].startswith("store_"))


def _store_families(retry):
    """The figures of the store's outages, read now (numbers other threads may change at
    any time; each read once)."""
    now = {"store_outages": retry.outages, "store_retries": retry.retries}
    now["store_outage_seconds"] = round(retry.outage_seconds(), 3)
    for name, kind, text, figure in _STORE_SCALARS:
        yield metric_family(name, kind, text, [((), now[figure])])


def _families(f: RunFigures):
    yield build_info()
    for name, kind, text, figure in _SCALARS:
        yield metric_family(name, kind, text, [((), getattr(f, figure))])
    yield metric_family(
        "thread_progress_scn",
        "gauge",
        "Progress P(t) of each redo thread.",
        [((str(t),), v) for t, v in sorted(f.thread_progress.items())],
        ("thread",),
    )
    yield metric_family(
        "thread_state",
        "gauge",
        "State of each redo thread: open, closed (by a close record) or finished "
        "(input read to the end); 1 for the thread's state.",
        [
            ((str(t), s), int(s == state))
            for t, state in f.thread_states.items()
            for s in ("open", "closed", "finished")
        ],
        ("thread", "state"),
    )
    for m in f.source_metrics:  # the source's own (PostgreSQL: slot, lag), without labels
        yield metric_family(m.name, m.kind, m.help, [((), m.value)])
    lat = f.latencies
    latency = SummaryMetricFamily(
        "olr_buffer_publish_latency_seconds",
        "Commit-to-visible latency of recent transactions (publication time minus the commit's tm; those whose tm "
        "is later than their publication are left out, see olr_buffer_publish_latency_clock_ahead_total).",
        count_value=len(lat),
        sum_value=round(sum(lat), 4),
    )
    for q in (0.5, 0.9, 0.99) if lat else ():
        latency.add_sample(
            "olr_buffer_publish_latency_seconds",
            {"quantile": str(q)},
            round(lat[min(len(lat) - 1, int(q * len(lat)))], 4),
        )
    yield latency
