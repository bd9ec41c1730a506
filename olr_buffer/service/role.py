"""The role of a running `run`: ``active`` (it writes the changefeed) or ``standby`` (``run
--standby`` waiting while another service writes it), left in its queue directory for
`status` and shown in the logs and metrics."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass, field

from ..fsutil import atomic_write
from .logs import iso_time

#: In QUEUE_DIR: the role of the `run` that owns the queue (``status`` believes it while
#: that process holds the queue).
ROLE_FILE = "service-role.json"

ACTIVE = "active"
STANDBY = "standby"


@dataclass
class ServiceRole:
    """What a `run` is now. ``holder`` (a standby): the writer whose lease keeps it
    waiting (``writer``, ``host``, ``pid``, ``generation``); ``lease_ends``: when that
    lease may be taken over if it is not renewed (seconds since the epoch; None: not
    known, a local changefeed's lock has no end); ``lease_generation`` (active): the
    generation of its own lease (None: a local changefeed, no lease)."""

    role: str = ACTIVE
    since: float = field(default_factory=time.time)
    holder: dict | None = None
    lease_ends: float | None = None
    lease_generation: int | None = None
    takeovers: int = 0  # times this process took the changefeed over from another writer

    def as_dict(self) -> dict:
        doc = asdict(self)
        doc["pid"] = os.getpid()
        doc["since"] = iso_time(self.since)
        doc["lease_ends"] = iso_time(self.lease_ends) if self.lease_ends is not None else None
        return doc

    def describe_holder(self) -> str:
        """The writer it waits for, for a log line and `status`."""
        return describe_holder(self.holder)


def describe_holder(holder: dict | None) -> str:
    if not holder:
        return "another writer"
    parts = [f"writer {holder.get('writer')}" if holder.get("writer") else "a writer"]
    if holder.get("host"):
        parts.append(f"on {holder['host']}")
    if holder.get("pid"):
        parts.append(
            f"(pid {holder['pid']}"
            + (f", lease generation {holder['generation']})" if holder.get("generation") else ")")
        )
    return " ".join(parts)


def write_role(queue_dir: str, role: ServiceRole) -> None:
    """Record ``role`` in ``queue_dir`` (a directory that cannot be written: not recorded)."""
    try:
        atomic_write(os.path.join(queue_dir, ROLE_FILE), json.dumps(role.as_dict()).encode(), durable=False)
    except OSError:
        pass


def read_role(queue_dir: str, pid: int | None) -> dict | None:
    """The role recorded by the process ``pid`` (the queue's owner), or None."""
    try:
        with open(os.path.join(queue_dir, ROLE_FILE)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and pid is not None and doc.get("pid") == pid else None
