"""``mirror``'s Prometheus metrics, rendered when scraped; served by the same HTTP helper
as ``run``'s and ``serve``'s (``/metrics``, ``/health``)."""

from __future__ import annotations

from ..service.metrics_http import ScrapedFigures, build_info, metric_family

#: ``/health`` answers 503 when the mirror's loop has not turned for this many seconds
#: (a batch of a large backlog takes seconds; a store that fails is waited for in the loop).
HEALTH_STALE_SECONDS = 120.0


class MirrorMetrics(ScrapedFigures):
    """The figures of a :class:`~olr_buffer.mirror.Mirror`, with the interface the
    metrics HTTP server asks for (``text()``, ``health()``)."""

    stale_after = HEALTH_STALE_SECONDS

    def __init__(self, mirror) -> None:
        self.mirror = mirror

    def tick(self) -> float:
        return self.mirror.tick

    def collect(self):
        m = self.mirror
        r = m.result

        def family(name: str, kind: str, help_: str, value) -> object:
            return metric_family(f"mirror_{name}", kind, help_, [((), value)])

        yield build_info()
        yield family(
            "last_tx_seq", "gauge", "Every table holds every change up to this tx_seq (-1: none yet).", m.scanned
        )
        yield family(
            "changefeed_last_tx_seq", "gauge", "The changefeed's last tx_seq, as last listed.", m.feed.last_tx_seq
        )
        yield family(
            "transactions_behind",
            "gauge",
            "Transactions of the changefeed the mirror has not read yet.",
            max(0, m.feed.last_tx_seq - m.scanned),
        )
        yield family("transactions_total", "counter", "Transactions read.", r.transactions)
        yield family("changes_total", "counter", "Changes applied to mirror tables.", r.changes)
        yield family("commits_total", "counter", "Commits to mirror tables.", r.commits)
        yield family("retries_total", "counter", "Times a store failed and the mirror tried again.", m.retries)
        yield family("tables", "gauge", "Mirror tables opened.", len(m.tables))
