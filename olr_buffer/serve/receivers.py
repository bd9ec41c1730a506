"""What ``olr-buffer status`` shows of the receivers that ``serve`` serves a changefeed
to: per database name, whether a ``serve`` runs (it holds the state's lock), its
receiver, the confirmed position and how far it is behind the changefeed.

Read without disturbing ``serve`` or ``run``: the state files, the lock table, and the
changefeed's manifest (its live end: the writer rewrites it with each file).
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime
from typing import TypeGuard

from ..errors import OlrBufferError
from ..sinks.parquet import Location, read_manifest
from .feed import max_c_tm
from .state import databases, default_state_dir, read_confirmed, read_session


def receivers_status(changefeed: str, state_dir: str | None = None) -> list[dict]:
    """One document per database name with a state in ``state_dir`` (by default the
    changefeed's ``_olr_buffer/serve``)."""
    state_dir = state_dir or default_state_dir(changefeed)
    if state_dir is None:  # a changefeed on object storage: serve's state is wherever --state said
        return []
    names = databases(state_dir)
    if not names:
        return []
    try:
        location = Location(changefeed)
        manifest = read_manifest(location) or {}
    except OlrBufferError:
        manifest = {}
    next_tx_seq = manifest.get("next_tx_seq") if isinstance(manifest.get("next_tx_seq"), int) else None
    last_file = manifest.get("last_file")
    last_c_tm = max_c_tm(location, last_file) if isinstance(last_file, str) else None
    out = []
    for db in names:
        doc: dict = {"database": db, "state_dir": os.path.abspath(state_dir)}
        session = read_session(state_dir, db)
        doc["serving"] = session is not None
        doc["pid"] = session.get("pid") if session else None
        doc["listen"] = session.get("listen") if session else None
        doc["receiver"] = session.get("receiver") if session else None
        connected = session.get("connected_at") if session else None
        doc["connected_since"] = _iso(connected) if isinstance(connected, (int, float)) else None
        streaming = doc["streaming"] = bool(session and session.get("streaming"))
        started = session.get("streaming_from") if session and streaming else None
        doc["streaming_from"] = {"c_scn": started[0], "c_idx": started[1]} if _is_position(started) else None
        try:
            confirmed = read_confirmed(state_dir, db)
        except OlrBufferError as exc:
            doc.update(confirmed=None, error=str(exc), transactions_behind=None, seconds_behind=None)
            out.append(doc)
            continue
        doc["confirmed"] = (
            None
            if confirmed is None
            else {
                "c_scn": confirmed.c_scn,
                "c_idx": confirmed.c_idx,
                "tx_seq": confirmed.tx_seq,
                "time": _iso(confirmed.time),
                "age_seconds": round(time.time() - confirmed.time, 3),
                "receiver": confirmed.receiver,
            }
        )
        # how far the receiver is behind the changefeed: transactions it does not have whole,
        # and the commit time between its last whole one and the changefeed's newest; a
        # receiver that confirmed nothing yet lacks those from where its stream began (a
        # START "from now on" wants none before)
        from_tx_seq = session.get("streaming_from_tx_seq") if session and streaming else None
        have = (
            confirmed.tx_seq
            if confirmed is not None
            else (from_tx_seq - 1 if isinstance(from_tx_seq, int) and from_tx_seq >= 0 else -1)
        )
        behind = None if have is None or next_tx_seq is None else max(0, next_tx_seq - 1 - have)
        doc["transactions_behind"] = behind
        if behind == 0:
            doc["seconds_behind"] = 0.0
        elif confirmed is not None and confirmed.c_tm is not None and last_c_tm is not None:
            doc["seconds_behind"] = round(max(0, last_c_tm - confirmed.c_tm) / 1e9, 3)
        else:
            doc["seconds_behind"] = None
        out.append(doc)
    return out


def render_receivers(receivers: list[dict]) -> list[str]:
    """A line or two per receiver for the text status."""
    lines = []
    for r in receivers:
        who = f"serve pid {r['pid']} on {r['listen']}" if r["serving"] else "serve not running"
        head = f"receiver of database {r['database']!r} ({who})"
        if r["serving"]:
            head += (
                f": {r['receiver']} connected since {r['connected_since']}"
                + (", streaming" if r["streaming"] else ", in the handshake")
                if r["receiver"]
                else ": no receiver connected"
            )
        lines.append(head)
        if r.get("error"):
            lines.append(f"  {r['error']}")
            continue
        c = r["confirmed"]
        if c is None:
            s = r.get("streaming_from")
            lines.append(
                "  nothing confirmed yet"
                + (f", streaming from c_scn {s['c_scn']} c_idx {s['c_idx']}" if s else "")
                + (
                    f": {r['transactions_behind']:,} transactions behind the changefeed"
                    if r["transactions_behind"]
                    else ""
                )
            )
            continue
        lag = (
            "lag unknown"
            if r["transactions_behind"] is None
            else f"{r['transactions_behind']:,} transactions, "
            + ("? s" if r["seconds_behind"] is None else f"{r['seconds_behind']:g} s")
            + " behind the changefeed"
        )
        tx = f"tx_seq {c['tx_seq']}" if c["tx_seq"] is not None and c["tx_seq"] >= 0 else "no whole transaction"
        lines.append(f"  confirmed c_scn {c['c_scn']} c_idx {c['c_idx']} ({tx}) at {c['time']}: {lag}")
    return lines


def _is_position(value: object) -> TypeGuard[list[int]]:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
