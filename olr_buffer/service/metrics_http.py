"""``/metrics`` and ``/health`` over HTTP, for `run`'s figures, `serve`'s and `mirror`'s
alike, and what those figures are made of alike: a metric family, the build's, the
health of a loop, and :class:`ScrapedFigures` (figures collected when scraped)."""

from __future__ import annotations

import json
import platform
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily

from .. import __version__
from .config import ConfigError


class Figures(Protocol):
    """What the HTTP server asks of a command's metrics (``run``'s :class:`~olr_buffer.service.metrics.Metrics`,
    ``serve``'s ``ServeMetrics``, ``mirror``'s ``MirrorMetrics``)."""

    def text(self) -> bytes: ...

    def health(self) -> tuple[bool, dict]: ...


def serve_metrics(metrics: Figures, host: str, port: int) -> ThreadingHTTPServer:
    """Serve ``/metrics`` and ``/health`` on ``host:port`` from a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            path = self.path.split("?")[0]
            if path == "/metrics":
                self._send(200, metrics.text(), CONTENT_TYPE_LATEST)
            elif path == "/health":
                ok, doc = metrics.health()
                self._send(200 if ok else 503, json.dumps(doc).encode() + b"\n", "application/json")
            else:
                self.send_error(404)

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    try:
        server = ThreadingHTTPServer((host, port), Handler)
    except OSError as exc:
        raise ConfigError(
            f"cannot listen on {host}:{port} for metrics: {exc.strerror}", hint="choose another --metrics-port"
        ) from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def metric_family(name: str, kind: str, help_: str, samples, labels: tuple[str, ...] = ()):
    """The counter (``kind`` ``counter``) or gauge ``olr_buffer_<name>``, with ``samples``:
    ``(label values, value)`` pairs."""
    cls = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
    fam = cls(f"olr_buffer_{name}", help_, labels=list(labels))
    for label_values, value in samples:
        fam.add_metric(list(label_values), value)
    return fam


def build_info() -> InfoMetricFamily:
    """``olr_buffer_build``: the versions of olr-buffer and of Python."""
    return InfoMetricFamily(
        "olr_buffer_build",
        "Version of olr-buffer and of Python.",
        value={"version": __version__, "python": platform.python_version()},
    )


def loop_health(tick: float, stale_after: float) -> tuple[bool, dict]:
    """(healthy, document) of a command's loop that last turned at ``tick``
    (``time.monotonic()``): healthy while that is less than ``stale_after`` seconds ago."""
    idle = time.monotonic() - tick
    ok = idle < stale_after
    return ok, {"status": "ok" if ok else "stalled", "seconds_since_loop": round(idle, 3)}


class ScrapedFigures:
    """A command's :class:`Figures` collected when scraped: a prometheus_client collector
    (``collect()``), healthy while its loop turned (``tick()``) within ``stale_after`` seconds."""

    stale_after: float

    def tick(self) -> float:
        """When the command's loop last turned (``time.monotonic()``)."""
        raise NotImplementedError

    def collect(self):
        raise NotImplementedError

    def text(self) -> bytes:
        registry = CollectorRegistry(auto_describe=False)
        registry.register(self)
        return generate_latest(registry)

    def health(self) -> tuple[bool, dict]:
        return loop_health(self.tick(), self.stale_after)
