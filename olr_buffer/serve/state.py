"""The receiver's confirmed position, stored so that it survives a kill of ``serve``.

::

    STATE_DIR/                      default CHANGEFEED/_olr_buffer/serve/ (mode 0700)
      <database>.json               the last CONFIRM: c_scn, c_idx, and what it covers
      <database>.lock               flock'ed by the serve process of that database name
      <database>.session.json       the serve process and its receiver now (for status)

``<database>`` is the database name with every character other than letters, digits,
``_``, ``-`` and ``.`` written as ``%XX`` (a name can hold neither ``/`` nor start a
hidden file). The position file is written atomically (temporary file, fsync, rename,
fsync of the directory): after a kill it holds the last position stored, whole. The
lock makes one ``serve`` per changefeed, state directory and database name; a second
one is refused at start. The session file is rewritten when a receiver connects,
starts streaming or goes; it is not synced (``status`` checks the lock before believing
it).

A changefeed that ``serve`` may not write (a read-only mount, another user's directory)
takes ``--state DIR`` elsewhere: the position belongs to the receiver of this changefeed,
not to the changefeed, and is never read by ``run``.
"""

from __future__ import annotations

import errno
import json
import os
import re
import time
from dataclasses import asdict, dataclass

from .. import pidlock
from ..fsutil import atomic_write, unlink_quietly
from ..sinks.parquet import META_DIR
from ..store import is_remote
from .errors import ServeLockedError, ServeStateError

SUBDIR = "serve"
STATE_FORMAT = 1
DIR_MODE = 0o700
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")
_U64_LIMIT = 1 << 64  # a position goes to a receiver as protobuf uint64s


def default_state_dir(changefeed: str) -> str | None:
    """``CHANGEFEED/_olr_buffer/serve``; None for a changefeed on object storage (serve's
    state is local: ``--state DIR``)."""
    if is_remote(changefeed):
        return None
    return os.path.join(changefeed, META_DIR, SUBDIR)


def file_stem(database: str) -> str:
    """The database name as a file name (see the module doc)."""
    stem = _UNSAFE.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), database)
    return stem if not stem.startswith(".") else "%2E" + stem[1:]


@dataclass(slots=True)
class Confirmed:
    """A receiver's last CONFIRM. ``tx_seq``: the last transaction it has whole (its
    commit message is at or below the position; -1: none yet; ``None``: not known), with
    ``c_tm``, its commit time; ``time``: when it was confirmed (seconds since the epoch)."""

    database: str
    c_scn: int
    c_idx: int
    tx_seq: int | None
    c_tm: int | None
    time: float
    receiver: str | None = None
    changefeed: str | None = None
    format: int = STATE_FORMAT

    @property
    def position(self) -> tuple[int, int]:
        return self.c_scn, self.c_idx


def read_confirmed(state_dir: str, database: str) -> Confirmed | None:
    """The stored position, or None when nothing was confirmed yet; a file that cannot be
    read as one raises :class:`ServeStateError` (it is never taken for "nothing")."""
    path = os.path.join(state_dir, file_stem(database) + ".json")
    try:
        with open(path, "rb") as fh:
            doc = json.loads(fh.read())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ServeStateError(
            f"{path}: cannot read the receiver's confirmed position: {getattr(exc, 'strerror', None) or exc}",
            hint="restore the file, or remove it to have the receiver start again (it then sends START)",
            path=path,
        ) from None
    try:
        if doc.get("format") != STATE_FORMAT:
            raise ValueError(f"format {doc.get('format')!r}")
        confirmed = Confirmed(**{k: doc[k] for k in Confirmed.__dataclass_fields__ if k in doc})
        if not (
            isinstance(confirmed.c_scn, int)
            and isinstance(confirmed.c_idx, int)
            and 0 <= confirmed.c_scn < _U64_LIMIT
            and 0 <= confirmed.c_idx < _U64_LIMIT
        ):
            raise ValueError("c_scn and c_idx are not positions (uint64)")
    except (AttributeError, TypeError, ValueError) as exc:
        raise ServeStateError(
            f"{path}: not a receiver position of this version of olr-buffer ({exc})",
            hint="restore the file, or remove it to have the receiver start again (it then sends START)",
            path=path,
        ) from None
    return confirmed


def read_session(state_dir: str, database: str) -> dict | None:
    """What the serve process of ``database`` last said about itself and its receiver, if
    it runs (it holds the lock); else None."""
    if pidlock.holder(os.path.join(state_dir, file_stem(database) + ".lock")) is None:
        return None
    try:
        with open(os.path.join(state_dir, file_stem(database) + ".session.json"), "rb") as fh:
            doc = json.loads(fh.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def databases(state_dir: str) -> list[str]:
    """The database names with a position or a lock in ``state_dir``, sorted."""
    try:
        names = os.listdir(state_dir)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    stems = set()
    for name in names:
        for suffix in (".session.json", ".json", ".lock"):
            if name.endswith(suffix) and not name.startswith("."):
                stems.add(name[: -len(suffix)])
                break
    return sorted(_unquote(s) for s in stems)


def _unquote(stem: str) -> str:
    return re.sub(rb"%([0-9A-F]{2})", lambda m: bytes([int(m.group(1), 16)]), stem.encode()).decode(errors="replace")


class StateStore:
    """The state of one database name's receiver, owned by one serve process (it holds
    the lock from its creation to :meth:`release`)."""

    def __init__(self, state_dir: str, database: str, *, durable: bool = True) -> None:
        self.dir = state_dir
        self.database = database
        self.durable = durable
        stem = file_stem(database)
        self.path = os.path.join(state_dir, stem + ".json")
        self.session_path = os.path.join(state_dir, stem + ".session.json")
        lock_path = os.path.join(state_dir, stem + ".lock")
        try:
            os.makedirs(state_dir, mode=DIR_MODE, exist_ok=True)
            self._lock_fd: int | None = pidlock.acquire(lock_path)
        except pidlock.LockHeldError as held:
            raise ServeLockedError(
                f"{state_dir}: database {database!r} is served by another process (pid {held.pid})",
                hint="one serve per changefeed and database name: stop the other one first",
                path=state_dir,
                pid=held.pid,
            ) from None
        except OSError as exc:
            raise _failure(exc, state_dir, "create the serve state directory") from None

    def load(self) -> Confirmed | None:
        return read_confirmed(self.dir, self.database)

    def save(self, confirmed: Confirmed) -> None:
        """Store ``confirmed`` atomically (and durably unless ``durable`` is off)."""
        self._write(self.path, asdict(confirmed), self.durable)

    def save_session(self, doc: dict) -> None:
        """Rewrite the session file (not synced: it says what is, not what was)."""
        try:
            self._write(self.session_path, {**doc, "pid": os.getpid(), "updated": time.time()}, False)
        except ServeStateError:
            pass  # status then shows less; serving goes on

    def release(self) -> None:
        unlink_quietly(self.session_path)
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _write(self, path: str, doc: dict, durable: bool) -> None:
        try:
            atomic_write(path, json.dumps(doc, indent=1).encode() + b"\n", durable=durable)
        except OSError as exc:
            raise _failure(exc, path, "store the receiver's position") from None


def _failure(exc: OSError, path: str, doing: str) -> ServeStateError:
    reason = "no space left on device" if exc.errno == errno.ENOSPC else (exc.strerror or str(exc))
    hint = (
        "give serve a state directory it can write: --state DIR"
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
        else "check the state directory"
    )
    return ServeStateError(f"{path}: cannot {doing}: {reason}", hint=hint, path=path)
