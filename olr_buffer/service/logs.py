"""The log lines of every command: text, or one JSON object per line."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

from ..errors import printable


def iso_now() -> str:
    """The current time as ISO-8601 UTC, to the millisecond: ``2026-11-23T10:28:23.123Z``."""
    return iso_time(time.time())


def iso_time(seconds: float) -> str:
    """Seconds since the epoch as ISO-8601 UTC, to the millisecond."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# -- logs ------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (ISO-8601 UTC), ``level``, ``logger``, ``msg``, and
    the facts a message gives with ``extra=`` (file, tx_seq range, rows, xid ...) as fields."""

    _STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "ts": iso_time(record.created),
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
