"""``--dead-letter FILE``: where bad records go instead of stopping the run."""

from __future__ import annotations

import os
import threading

import orjson


class DeadLetters:
    """``--dead-letter FILE``: bad records are written here (one JSON object per line:
    file, line, reason, the raw line) and skipped instead of stopping the run; the
    pipeline writes transactions abandoned by the retention limit here too.

    A line is written (and fsynced) before the reader's position moves past it, so a
    crash may write it twice, never lose it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.count = 0
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)
        # owner-only: the lines hold row data (an existing file is tightened too)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.fchmod(fd, os.fstat(fd).st_mode & 0o600)
        except PermissionError:
            pass  # another user's file: its owner chose its mode
        self._fh = os.fdopen(fd, "ab")

    def put(self, file: str, line: int, reason: str, raw: bytes) -> None:
        self.put_doc({"file": file, "line": line, "reason": reason, "raw": raw.decode("utf-8", errors="backslashreplace")})

    def put_doc(self, doc: dict) -> None:
        """One JSON line (an abandoned transaction: ``"kind": "abandoned_transaction"``)."""
        data = orjson.dumps(doc) + b"\n"
        with self._lock:
            self._fh.write(data)
            self._fh.flush()
            os.fsync(self._fh.fileno())
            self.count += 1

    def close(self) -> None:
        self._fh.close()
