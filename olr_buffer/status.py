"""``olr-buffer status``: what a queue holds, read without disturbing its owner.

The queue is opened read-only (no lock taken), so this works while ``replay`` or ``run``
owns it. Dispatcher figures are those of the last checkpoint; segment and reader figures
are current, and so is the changefeed's position (read from its manifest). ``state`` is
``running`` while a process holds the queue's LOCK, ``failed`` when the last ``run`` or
``replay`` stopped on an error or was killed (its record,
:func:`olr_buffer.service.failure.read_failure`), else ``stopped``. Times are ISO-8601 UTC.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict

from .changes import INFINITE_SCN
from .dispatcher.checkpoint import TransactionState, decode_checkpoint
from .dispatcher.errors import damaged_checkpoint
from .errors import printable
from .serve import receivers_status, render_receivers
from .service.failure import read_failure
from .service.logs import iso_time
from .service.role import describe_holder, read_role
from .sinks import KINDS as SINKS
from .sources import kind_in_status
from .sources import queue_status as source_status
from .sources import status_lines as source_lines
from .txbuffer import LmdbQueue, cleanup_candidates, held_segments
from .txbuffer.metadata import CHECKPOINT_KEY, QUEUE_ID_KEY


def queue_status(queue_dir: str, *, changefeed: str | None = None, serve_state: str | None = None) -> dict:
    """The queue's status, with ``"receivers"``: those that ``serve`` serves its changefeed
    (or ``changefeed``) to, from ``serve_state`` or the changefeed's own state directory."""
    try:
        doc = _queue_status(queue_dir)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise damaged_checkpoint(queue_dir, exc) from exc
    changefeed = changefeed or (doc["changefeed"] or {}).get("path")
    doc["receivers"] = receivers_status(changefeed, serve_state) if changefeed else []
    return doc


def _queue_status(queue_dir: str) -> dict:
    q = LmdbQueue(queue_dir, read_only=True)
    try:
        segments = q.segments()
        meta = q.meta_items()
        next_index = q.next_index
        first_index = q.first_index
    finally:
        q.close()
    now = time.time()
    owner = _owner(queue_dir)
    failure = None if owner["running"] else read_failure(queue_dir)
    doc: dict = {
        "queue": os.path.abspath(queue_dir),
        "state": "running" if owner["running"] else "failed" if failure else "stopped",
        "failure": failure,
        "as_of": iso_time(now),
        "owner": owner,
        # run --standby: active or standby (the writer it waits for, when that lease ends)
        "role": read_role(queue_dir, owner["pid"]) if owner["running"] else None,
        "segments": {
            "count": len(segments),
            "bytes": sum(s.bytes for s in segments),
            "first_index": first_index,
            "next_index": next_index,
            "list": [{"first": s.first, "end": s.end, "bytes": s.bytes, "current": s.current} for s in segments],
        },
    }
    # each source's own (redo: "readers", the position of each thread; PostgreSQL: "postgresql")
    doc.update(source_status(meta, now))
    raw = meta.get(CHECKPOINT_KEY)
    if raw is None:
        # before the first checkpoint: the same keys, as null, for scripts that read them
        doc.update(
            checkpoint=None,
            watermark=None,
            progress={},
            threads_in_play=[],
            waiting_for=[],
            thread_states={},
            open_transactions=None,
            changefeed=None,
            cleanup=None,
            totals=None,
        )
        return doc
    cp = decode_checkpoint(raw, queue_dir)
    threads = cp.threads_in_play()
    txns = [h.transaction for h in cp.transactions]
    held = [h.transaction for h in cp.transactions if h.in_open]
    needed = cp.needed_from()
    freeable = cleanup_candidates(segments, needed, 0, 0.0, lambda _p: 0.0)
    doc["checkpoint"] = {
        "written": iso_time(cp.written) if cp.written else None,
        "age_seconds": round(now - cp.written, 3) if cp.written else None,
        "position": cp.position,
        "behind_records": max(0, next_index - cp.position),
    }
    watermark = cp.effective_watermark()
    doc["watermark"] = _scn(watermark) if watermark >= 0 else None  # null: no thread has progress yet
    # null: nothing read of the thread yet
    doc["progress"] = {str(t): _scn(p) if p >= 0 else None for t, p in sorted(cp.progress.items())}
    doc["threads_in_play"] = threads
    doc["waiting_for"] = [t for t in threads if cp.progress.get(t, -1) < 0 and t not in cp.closed]
    finished = {int(t) for t, r in doc["readers"].items() if r["finished"]}
    doc["thread_states"] = {
        str(t): "closed"
        if t in cp.closed
        else "finished"
        if t in finished
        else "waiting"
        if t in doc["waiting_for"]
        else "open"
        for t in sorted(set(threads) | set(cp.other_progress) | set(cp.closed) | {int(t) for t in doc["readers"]})
    }
    doc["open_transactions"] = {
        "count": len(held),
        "ended_waiting_for_watermark": sum(1 for t in txns if t.end_key is not None),
        "oldest": _txn(min(held, key=lambda t: (t.first_scn, t.xid)), now) if held else None,
        "largest": _txn(max(held, key=lambda t: (t.rows, t.xid)), now) if held else None,
    }
    queue_id = meta.get(QUEUE_ID_KEY)
    doc["changefeed"] = _changefeed(meta, cp.changefeed, queue_id.decode() if queue_id else None)
    holder = min((t for t in txns if t.first_block < cp.position), key=lambda t: t.first_block, default=None)
    held_segs = held_segments(segments, needed, cp.position)
    doc["cleanup"] = {
        "needed_from_index": needed,
        "segments_freeable": len(freeable),
        "bytes_freeable": sum(s.bytes for s in freeable),
        # the transaction that keeps cleanup from going further, and what it keeps
        "held_by": {**_txn(holder, now), "ended": holder.end_key is not None} if holder else None,
        "segments_held": len(held_segs),
        "bytes_held": sum(s.bytes for s in held_segs),
    }
    doc["totals"] = asdict(cp.stats)
    return doc


def _changefeed(meta: dict, legacy, queue_id: str | None) -> dict:
    """What the sink shows of the changefeed: live, or its position as stored with the
    checkpoint."""
    sink = SINKS["parquet"]
    doc = sink.status(meta.get(sink.position_key), legacy, queue_id)
    if doc.get("updated") is not None:
        doc["updated"] = iso_time(doc["updated"])
    return doc


def _txn(t: TransactionState, now: float) -> dict:
    return {
        "xid": t.xid,
        "first_scn": t.first_scn,
        "begin_scn": t.begin_scn if t.begin_scn >= 0 else None,
        "age_seconds": round(now - t.begin_tm / 1e9, 3) if t.begin_tm else None,
        "rows": t.rows,
        "blocks": sum(len(v) // 3 for v in t.locations.values()),
        "first_index": t.first_block,
    }


def _scn(value: int) -> int | str:
    return "complete" if value >= INFINITE_SCN else value


def _owner(queue_dir: str) -> dict:
    pid = LmdbQueue.owner_pid(queue_dir)
    return {"pid": pid or None, "running": pid is not None}


def render(doc: dict) -> str:
    """The status as a few lines of text; data in it (XIDs, paths) is shown escaped."""
    return "\n".join(printable(line) for line in _lines(doc) + render_receivers(doc.get("receivers", [])))


def _lines(doc: dict) -> list[str]:
    kind = kind_in_status(doc)  # its words: a redo thread's SCN, a PostgreSQL stream's LSN

    def at(value: int | str | None) -> str:
        """A position (``complete`` and ``none yet`` as they are) as the source writes it."""
        return "none yet" if value is None else value if isinstance(value, str) else kind.format_position(value)

    seg = doc["segments"]
    lines = [
        f"queue {doc['queue']}: {doc['state']}"
        + (f" (pid {doc['owner']['pid']})" if doc["owner"]["pid"] else "")
        + f", as of {doc['as_of']}",
        f"segments: {seg['count']}, {seg['bytes'] / 1e6:,.1f} MB, "
        + (
            f"indexes {seg['first_index']}..{seg['next_index'] - 1}"
            if seg["next_index"] > seg["first_index"]
            else "no record"
        ),
    ]
    role = doc.get("role")
    if role:
        lines.append(_role_line(role))
    if doc["failure"]:
        f = doc["failure"]
        if f.get("killed"):
            lines.append(
                f"the run started at {f.get('time')} (pid {f.get('pid')}) ended without a clean stop: {f.get('error')}"
            )
        else:
            lines.append(f"failed at {f.get('time')} (pid {f.get('pid')}, exit {f.get('exit_code')}): {f.get('error')}")
    lines.extend(source_lines(doc))
    cp = doc.get("checkpoint")
    if cp is None:
        lines.append(
            "no dispatcher checkpoint yet: the dispatcher's figures and the changefeed's path are not "
            "known (a run that stopped before its first checkpoint may have published files)"
        )
        return lines
    lines.append(
        f"checkpoint: queue index {cp['position']} ({cp['behind_records']:,} records behind the queue's end), "
        + (f"written {cp['written']} ({cp['age_seconds']}s ago)" if cp["written"] else "time unknown")
    )
    if not kind.shows_threads:  # one stream: its position, no thread
        lines.append(f"watermark: {kind.position_name} {at(doc['watermark'])}")
        if doc["waiting_for"]:
            lines.append("waiting for the first records of the source: nothing is published until then")
    else:
        lines.append(
            f"watermark: {at(doc['watermark'])}  progress: "
            + (", ".join(f"{t}={at(p)}" for t, p in doc["progress"].items()) or "none yet")
        )
        lines.append(
            "threads: "
            + ", ".join(
                f"{t} {'waiting for its first record' if state == 'waiting' else state}"
                f"{'' if int(t) in doc['threads_in_play'] else ' (not in play)'}"
                for t, state in doc["thread_states"].items()
            )
        )
        if doc["waiting_for"]:
            lines.append(
                "waiting for the first records of thread(s) "
                + ", ".join(map(str, doc["waiting_for"]))
                + ": nothing is published until then"
            )
    totals = doc.get("totals", {})
    if totals.get("late_records"):
        lines.append(
            f"late records: {totals['late_records']:,} (in {totals.get('late_transactions', 0):,} whole "
            "transaction(s) and rows of published ones), not published"
        )
    if totals.get("abandoned_transactions") or totals.get("abandoned_records"):
        lines.append(
            f"abandoned by the retention limit: {totals['abandoned_transactions']:,} transaction(s), "
            f"{totals['abandoned_rows']:,} rows, not published; {totals['abandoned_records']:,} record(s) "
            "of them came later"
        )
    ot = doc["open_transactions"]
    lines.append(
        f"open transactions: {ot['count']:,} ({ot['ended_waiting_for_watermark']:,} ended, waiting for the watermark)"
    )
    if ot["oldest"]:
        o = ot["oldest"]
        lines.append(
            f"  oldest: {o['xid']} from {kind.position_name} {at(o['first_scn'])}, age {_age(o)}, {o['rows']:,} rows"
        )
        lg = ot["largest"]
        lines.append(f"  largest: {lg['xid']} with {lg['rows']:,} rows in {lg['blocks']:,} blocks")
    cf = doc["changefeed"]
    if isinstance(cf.get("last_c_scn"), int) and at(cf["last_c_scn"]) != str(cf["last_c_scn"]):
        cf = {**cf, "last_c_scn": f"{cf['last_c_scn']} ({kind.position_name} {at(cf['last_c_scn'])})"}
    lines.append(
        SINKS["parquet"].status_line(cf)
        + (f" (updated {cf['updated']})" if cf["updated"] else " (as of the checkpoint)")
    )
    c = doc["cleanup"]
    lines.append(
        f"cleanup: needed from index {c['needed_from_index']}; {c['segments_freeable']} segment(s), "
        f"{c['bytes_freeable'] / 1e6:,.1f} MB could be freed now"
    )
    if c["held_by"]:
        h = c["held_by"]
        lines.append(
            f"  held by transaction {h['xid']} (from {kind.position_name} {at(h['first_scn'])}, age {_age(h)}, "
            f"{h['rows']:,} rows, {'ended, waiting for the watermark' if h['ended'] else 'not ended'}): "
            f"it keeps {c['segments_held']} segment(s), {c['bytes_held'] / 1e6:,.1f} MB"
        )
    return lines


def _role_line(role: dict) -> str:
    """``run --standby``'s role: what it waits for, or that it writes the changefeed."""
    took = f"; {role['takeovers']} take-over(s) by this run" if role.get("takeovers") else ""
    if role.get("role") == "standby":
        ends, holder = role.get("lease_ends"), describe_holder(role.get("holder"))
        return (
            f"role: standby since {role.get('since')}: the changefeed is written by {holder}"
            + (f", whose lease runs until {ends} unless renewed" if ends else "")
            + took
        )
    generation = role.get("lease_generation")
    return (
        f"role: active since {role.get('since')}"
        + (f", lease generation {generation}" if generation is not None else "")
        + took
    )


def _age(txn: dict) -> str:
    """A transaction's age, or ``unknown`` when its begin has no ``tm`` (or it has no begin)."""
    return f"{txn['age_seconds']}s" if txn["age_seconds"] is not None else "unknown (no tm)"
