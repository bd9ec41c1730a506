"""``/metrics`` and ``/health`` over HTTP, for `run`'s figures and `serve`'s alike."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from prometheus_client import CONTENT_TYPE_LATEST

from .config import ConfigError


class Figures(Protocol):
    """What the HTTP server asks of a command's metrics (``run``'s :class:`~olr_buffer.service.metrics.Metrics`,
    ``serve``'s ``ServeMetrics``)."""

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
