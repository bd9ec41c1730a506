"""The record of the error that stopped `run` (or a replay), left in its queue directory
for `status`."""

from __future__ import annotations

import json
import os

from ..fsutil import atomic_write, unlink_quietly
from .logs import iso_now

#: In QUEUE_DIR: written by ``run`` when it stops on an error, and once it owns the queue
#: (a run that never stops cleanly, killed, leaves that record); removed by a clean stop.
FAILURE_FILE = "service-failure.json"

#: The error of the record a running service leaves, for ``status`` once it is gone.
KILLED = (
    "the service did not stop cleanly: killed (SIGKILL, out of memory) or its machine stopped "
    "while it ran; run it again: it resumes"
)


def record_failure(queue_dir: str, exc: BaseException, exit_code: int) -> None:
    """Leave a record of the error that stopped ``run`` in ``queue_dir`` (if it exists),
    for ``status``: its ``state`` is then ``failed``."""
    _write_failure(
        queue_dir,
        {"time": iso_now(), "pid": os.getpid(), "exit_code": exit_code, "error": str(exc) or type(exc).__name__},
    )


def record_running(queue_dir: str) -> None:
    """Leave, once ``run`` owns the queue, the record ``status`` shows if it never stops
    cleanly (a clean stop removes it, an error replaces it): ``killed``, since ``time``."""
    _write_failure(
        queue_dir, {"time": iso_now(), "pid": os.getpid(), "exit_code": None, "error": KILLED, "killed": True}
    )


#: A record is padded to this size with spaces (JSON allows them): the record a running
#: service leaves holds the blocks that its failure record, written over it in place,
#: needs when the disk is full, the likeliest time for a failure to be recorded.
_RECORD_BYTES = 4096


def _write_failure(queue_dir: str, doc: dict) -> None:
    path = os.path.join(queue_dir, FAILURE_FILE)
    tmp = os.path.join(queue_dir, f".{FAILURE_FILE}.tmp")
    data = _padded(doc)
    try:
        atomic_write(path, data, durable=False, tmp=tmp)
        return
    except OSError:
        pass
    # no room for a new file: over the record there (a running service's), in place
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError:
        return  # a queue directory that cannot be written: the error itself is on stderr
    try:
        if len(data) > _RECORD_BYTES:
            data = _padded({**doc, "error": str(doc.get("error"))[: _RECORD_BYTES // 2]})
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    except OSError:
        pass
    finally:
        os.close(fd)


def _padded(doc: dict) -> bytes:
    data = json.dumps(doc).encode()
    return data.ljust(_RECORD_BYTES - 1) + b"\n" if len(data) < _RECORD_BYTES else data + b"\n"


def clear_failure(queue_dir: str) -> None:
    # none; or a queue directory this user may not write, which opening it says
    unlink_quietly(os.path.join(queue_dir, FAILURE_FILE))


def read_failure(queue_dir: str) -> dict | None:
    try:
        with open(os.path.join(queue_dir, FAILURE_FILE)) as fh:
            doc = json.load(fh)
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None
