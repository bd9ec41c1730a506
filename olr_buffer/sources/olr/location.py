"""``olr://HOST:PORT/DATABASE``: where the OpenLogReplicator source connects, and the
database name it asks for."""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote, urlsplit

from ..base import SourceUsageError

SCHEME = "olr"


class Location(NamedTuple):
    host: str
    port: int
    database: str

    @property
    def address(self) -> str:
        """``host:port`` (``[::1]:9000`` for IPv6)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def uri(self) -> str:
        return f"{SCHEME}://{self.address}/{self.database}"


def parse_location(uri: str) -> Location:
    """The parts of ``olr://HOST:PORT/DATABASE``; :class:`SourceUsageError` (exit 2) for a
    URI that is not of that form."""
    form = "olr://HOST:PORT/DATABASE (e.g. olr://olr.example.com:9000/ORCLPDB1)"
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise SourceUsageError(f"{uri!r} is not {form}: {exc}") from None
    if parts.scheme.lower() != SCHEME:
        raise SourceUsageError(f"{uri!r} is not {form}")
    if parts.username is not None or parts.password is not None:
        raise SourceUsageError(
            f"an olr:// URI has no user or password (OpenLogReplicator's network protocol has none): give {form}"
        )
    if not parts.hostname:
        raise SourceUsageError(f"{uri!r} has no host: give {form}")
    if port is None:
        raise SourceUsageError(f"{uri!r} has no port: give {form}")
    if port == 0:
        raise SourceUsageError(f"{uri!r}: port 0 is not a port to connect to")
    database = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    if not database or "/" in database:
        raise SourceUsageError(f"{uri!r} names no database (the name the sender serves): give {form}")
    if parts.query or parts.fragment:
        raise SourceUsageError(f"{uri!r}: olr:// takes no query or fragment; give {form}")
    return Location(parts.hostname, port, database)
