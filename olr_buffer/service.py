"""What `olr-buffer run` needs around the pipeline: metrics, structured logs, config."""

from __future__ import annotations

import json
import logging
import threading
import time
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .errors import OlrBufferError, printable
from .changes import INFINITE_SCN


class ConfigError(OlrBufferError):
    """The configuration file cannot be used."""


def load_config(path: str) -> dict[str, Any]:
    """A TOML file whose keys are `run`'s option names (``flush_interval``, ``threads`` ...)."""
    try:
        with open(path, "rb") as fh:
            doc = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: configuration file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    return {k.replace("-", "_"): v for k, v in doc.items()}


# -- logs ------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, logger, msg, and any ``extra`` fields."""

    _STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update({k: v for k, v in vars(record).items() if k not in self._STANDARD})
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class TextFormatter(logging.Formatter):
    """``time LEVEL logger: message``, one line per message: control characters that
    data brings into a message are escaped (a traceback below it stays as it is)."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = printable(record.message)
        return super().formatMessage(record)


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


# -- metrics ---------------------------------------------------------------------------


class Metrics:
    """A snapshot of the service's figures in the Prometheus text format, renewed at most
    once a second from the pipeline's loop; the HTTP thread only reads the last text."""

    def __init__(self) -> None:
        self._text = "# no data yet\n"
        self._last = 0.0
        self._lock = threading.Lock()

    def update(self, pipeline, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 1.0:
            return
        self._last = now
        text = _render(pipeline)
        with self._lock:
            self._text = text

    def text(self) -> str:
        with self._lock:
            return self._text


def _render(p) -> str:
    d, sink, readers = p.dispatcher, p.sink, p.readers
    totals = d.totals()
    progress = {t: v for t, v in d.progress.items()}
    finite = [v for v in progress.values() if v < INFINITE_SCN]
    watermark = d.watermark
    now_ns = time.time_ns()
    tms = [t.begin_tm for t in d.open.values() if t.begin_tm]
    oldest_age = (now_ns - min(tms)) / 1e9 if tms else 0.0
    lat = sorted(sink.latencies)
    out = []

    def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
        out.append(f"# HELP olr_buffer_{name} {help_}")
        out.append(f"# TYPE olr_buffer_{name} {kind}")
        for labels, value in samples:
            out.append(f"olr_buffer_{name}{labels} {value}")

    metric("records_appended_total", "counter", "Redo records appended to the queue by this process.",
           [("", readers.records_read)])
    segments = p.queue.segments()
    metric("queue_bytes", "gauge", "Bytes of the queue's segment files.", [("", sum(s.bytes for s in segments))])
    metric("queue_segments", "gauge", "Segments in the queue.", [("", len(segments))])
    metric("open_transactions", "gauge", "Transactions held by the dispatcher.", [("", len(d.open))])
    metric("oldest_open_age_seconds", "gauge", "Age of the oldest open transaction (from its begin's tm).",
           [("", round(oldest_age, 3))])
    metric("thread_progress_scn", "gauge", "Progress P(t) of each redo thread.",
           [(f'{{thread="{t}"}}', v) for t, v in sorted(progress.items())])
    metric("thread_state", "gauge", "State of each redo thread: open, closed (by a close record) or finished "
           "(input read to the end); 1 for the thread's state.",
           [(f'{{thread="{t}",state="{s}"}}', int(s == state)) for t, state in p.thread_states().items()
            for s in ("open", "closed", "finished")])
    metric("threads_waiting", "gauge", "Threads in play that have not written a record yet (nothing is published).",
           [("", len(p.waiting_for()))])
    metric("watermark_scn", "gauge", "min P(t) over the threads in play.", [("", watermark)])
    metric("watermark_lag_scn", "gauge", "How far the watermark is behind the most advanced thread, in SCN.",
           [("", (max(finite) - watermark) if finite and watermark < INFINITE_SCN else 0)])
    metric("late_records_total", "counter", "Records not published because they came after their transaction, "
           "or a later commit, was published (threads not in play).", [("", totals.late_records)])
    metric("transactions_published_total", "counter", "Transactions published to the changefeed.", [("", totals.published)])
    metric("rows_published_total", "counter", "Rows published to the changefeed.", [("", totals.rows)])
    metric("changefeed_next_tx_seq", "gauge", "The tx_seq the next transaction will get.", [("", sink.next_tx_seq)])
    for name, kind, help_, samples in readers.metrics() if hasattr(readers, "metrics") else ():
        metric(name, kind, help_, samples)  # the source's own (PostgreSQL: slot, lag)
    quantiles = [(q, lat[min(len(lat) - 1, int(q * len(lat)))]) for q in (0.5, 0.9, 0.99)] if lat else []
    metric("publish_latency_seconds", "summary",
           "Commit-to-visible latency of recent transactions (publication time minus the commit's tm).",
           [(f'{{quantile="{q}"}}', round(v, 4)) for q, v in quantiles] + [("_count", len(lat))])
    return "\n".join(out) + "\n"


def serve_metrics(metrics: Metrics, host: str, port: int) -> ThreadingHTTPServer:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if self.path.split("?")[0] != "/metrics":
                self.send_error(404)
                return
            body = metrics.text().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port} for metrics: {exc.strerror}",
                          hint="choose another --metrics-port") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server
