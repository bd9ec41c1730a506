"""Fixtures of the serve tests: a server in a thread of the test process."""

from __future__ import annotations

import threading
from contextlib import contextmanager
from pathlib import Path

from olr_buffer.serve import ServeOptions, StreamServer


@contextmanager
def serving(changefeed: Path, database: str = "ORCL", **options):
    """A :class:`StreamServer` of ``changefeed`` on a free loopback port, running in a thread."""
    server = StreamServer(ServeOptions(str(changefeed), "127.0.0.1", 0, database, **options))
    stop = threading.Event()
    thread = threading.Thread(target=server.run, args=(stop,), name="serve", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        stop.set()
        server.wake()
        thread.join(30)
        assert not thread.is_alive(), "the server did not stop"
