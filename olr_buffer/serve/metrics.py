"""``serve``'s Prometheus metrics, rendered when scraped; served by the same HTTP server
as ``run``'s (``olr_buffer.service.metrics_http``: ``/metrics``, ``/health``)."""

from __future__ import annotations

from ..service.metrics_http import ScrapedFigures, build_info, metric_family

#: ``/health`` answers 503 when the server's loop has not turned for this many seconds.
HEALTH_STALE_SECONDS = 30.0


class ServeMetrics(ScrapedFigures):
    """The figures of a :class:`~olr_buffer.serve.StreamServer`, with the interface the
    metrics HTTP server asks for (``text()``, ``health()``)."""

    stale_after = HEALTH_STALE_SECONDS

    def __init__(self, server) -> None:
        self.server = server

    def tick(self) -> float:
        return self.server.stats.tick

    def collect(self):
        s = self.server.stats
        confirmed = self.server.confirmed
        db = self.server.opts.database

        def family(name: str, kind: str, help_: str, value) -> object:
            return metric_family(f"serve_{name}", kind, help_, [((db,), value)], ("database",))

        yield build_info()
        yield family(
            "receiver_connected", "gauge", "1 while a receiver is connected.", int(self.server.conn is not None)
        )
        yield family(
            "receiver_streaming",
            "gauge",
            "1 while the receiver is streaming (after REPLICATE).",
            int(bool(self.server.conn and self.server.conn.stream)),
        )
        yield family("connections_total", "counter", "Receiver connections accepted.", s.connections)
        yield family(
            "refused_connections_total", "counter", "Connections refused: another receiver was connected.", s.refused
        )
        yield family(
            "taken_over_total",
            "counter",
            "Receivers closed because a new connection took over from them (no progress for --takeover-after).",
            s.taken_over,
        )
        yield family(
            "bad_requests_total",
            "counter",
            "Requests answered INVALID_COMMAND or INVALID_DATABASE, and oversized frames.",
            s.bad_requests,
        )
        yield family("messages_sent_total", "counter", "JSON messages sent (begin, rows, commit).", s.messages_sent)
        yield family(
            "transactions_sent_total", "counter", "Transactions whose commit message was sent.", s.transactions_sent
        )
        yield family("bytes_sent_total", "counter", "Bytes written to receivers.", s.bytes_sent)
        yield family("confirms_total", "counter", "CONFIRM requests that moved the position.", s.confirms)
        yield family(
            "confirmed_c_scn",
            "gauge",
            "c_scn of the confirmed position (0: none).",
            confirmed.c_scn if confirmed else 0,
        )
        yield family(
            "confirmed_c_idx", "gauge", "c_idx of the confirmed position.", confirmed.c_idx if confirmed else 0
        )
        conn = self.server.conn
        started = conn.started_tx_seq if conn is not None and conn.stream is not None else None
        have = confirmed.tx_seq if confirmed else (started - 1 if started is not None else -1)  # as status counts
        yield family(
            "changefeed_next_tx_seq", "gauge", "The changefeed's next tx_seq, as serve last listed it.", s.next_tx_seq
        )
        yield family(
            "transactions_behind",
            "gauge",
            "Transactions of the changefeed (as last listed) that the receiver has not confirmed whole.",
            max(0, s.next_tx_seq - 1 - have) if have is not None else -1,
        )
