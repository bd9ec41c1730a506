"""``olr-buffer status``: what a queue holds, read without disturbing its owner.

The queue is opened read-only (no lock taken), so this works while ``replay`` or ``run``
owns it. Dispatcher figures are those of the last checkpoint; segment and reader figures
are current.
"""

from __future__ import annotations

import os
import time

import orjson

from .dispatcher.dispatcher import CHECKPOINT_KEY
from .reader.blocks import INFINITE_SCN
from .reader.position import POSITION_PREFIX, load_positions
from .txbuffer import LmdbQueue, cleanup_candidates


def queue_status(queue_dir: str) -> dict:
    q = LmdbQueue(queue_dir, read_only=True)
    try:
        segments = q.segments()
        meta = q.meta_items()
        next_index = q.next_index
        first_index = q.first_index
    finally:
        q.close()
    now = time.time()
    doc: dict = {
        "queue": os.path.abspath(queue_dir),
        "owner": _owner(queue_dir),
        "segments": {
            "count": len(segments),
            "bytes": sum(s.bytes for s in segments),
            "first_index": first_index,
            "next_index": next_index,
            "list": [{"first": s.first, "end": s.end, "bytes": s.bytes, "current": s.current} for s in segments],
        },
        "readers": {
            str(t): {
                "sequence": p.sequence,
                "offset": p.offset,
                "line": p.line,
                "last_scn": p.scn,
                "progress": _scn(p.progress),
                "finished": p.finished,
                "closed": p.closed,
            }
            for t, p in sorted(load_positions({k: v for k, v in meta.items() if k.startswith(POSITION_PREFIX)}).items())
        },
    }
    raw = meta.get(CHECKPOINT_KEY)
    if raw is None:
        doc["checkpoint"] = None
        return doc
    cp = orjson.loads(raw)
    threads = [int(t) for t in cp.get("threads", cp["progress"].keys())]
    progress = {int(t): p for t, p in cp["progress"].items()}
    closed = {int(t) for t in cp.get("closed", {})}
    watermark = cp.get("watermark", min((progress.get(t, -1) for t in threads), default=INFINITE_SCN))
    txns = [state for _, state in cp["transactions"]]
    held = [t for in_open, t in cp["transactions"] if in_open]
    needed = min([cp["position"], *(t[1] for t in txns)])
    freeable = cleanup_candidates(segments, needed, 0, 0.0, lambda _p: 0.0)
    doc["checkpoint"] = {
        "written": cp.get("written"),
        "age_seconds": round(now - cp["written"], 3) if cp.get("written") else None,
        "position": cp["position"],
        "behind_records": max(0, next_index - cp["position"]),
    }
    doc["watermark"] = _scn(watermark)
    doc["progress"] = {str(t): _scn(p) for t, p in sorted(progress.items())}
    doc["threads_in_play"] = threads
    doc["waiting_for"] = [t for t in threads if progress.get(t, -1) < 0 and t not in closed]
    other = {int(t) for t in cp.get("other_progress", {})}
    finished = {int(t) for t, r in doc["readers"].items() if r["finished"]}
    doc["thread_states"] = {
        str(t): "closed" if t in closed else "finished" if t in finished else "open"
        for t in sorted(set(threads) | other | closed | {int(t) for t in doc["readers"]})
    }
    doc["open_transactions"] = {
        "count": len(held),
        "ended_waiting_for_watermark": sum(1 for t in txns if t[7] is not None),
        "oldest": _txn(min(held, key=lambda t: (t[2], t[0])), now) if held else None,
        "largest": _txn(max(held, key=lambda t: (t[5], t[0])), now) if held else None,
    }
    cf = cp.get("changefeed") or {}
    doc["changefeed"] = {
        "path": cf.get("path"),
        "next_tx_seq": cf.get("next_tx_seq"),
        "last_tx_seq": (cf["next_tx_seq"] - 1) if cf.get("next_tx_seq") else None,
        "last_c_scn": cf.get("last_c_scn"),
        "files": cf.get("files"),
    }
    doc["cleanup"] = {
        "needed_from_index": needed,
        "segments_freeable": len(freeable),
        "bytes_freeable": sum(s.bytes for s in freeable),
    }
    doc["totals"] = cp.get("stats", {})
    return doc


def _txn(t: list, now: float) -> dict:
    xid, first_block, first_scn, begin_scn, begin_tm, rows, comps, end_key, *_rest, locs = t
    return {
        "xid": xid,
        "first_scn": first_scn,
        "begin_scn": begin_scn if begin_scn >= 0 else None,
        "age_seconds": round(now - begin_tm / 1e9, 3) if begin_tm else None,
        "rows": rows,
        "blocks": sum(len(v) // 3 for v in locs.values()),
        "first_index": first_block,
    }


def _scn(value: int) -> int | str:
    return "complete" if value >= INFINITE_SCN else value


def _owner(queue_dir: str) -> dict:
    try:
        with open(os.path.join(queue_dir, "LOCK")) as fh:
            pid = int(fh.read().strip() or 0)
    except (OSError, ValueError):
        return {"pid": None, "running": False}
    running = False
    if pid:
        try:
            os.kill(pid, 0)
            running = True
        except ProcessLookupError:
            running = False
        except PermissionError:
            running = True
    return {"pid": pid or None, "running": running}


def render(doc: dict) -> str:
    """The status as a few lines of text."""
    seg = doc["segments"]
    lines = [
        f"queue {doc['queue']}  (owner pid {doc['owner']['pid']}, {'running' if doc['owner']['running'] else 'not running'})",
        f"segments: {seg['count']}, {seg['bytes'] / 1e6:,.1f} MB, indexes {seg['first_index']}..{seg['next_index'] - 1}",
    ]
    for t, r in doc["readers"].items():
        lines.append(
            f"reader thread {t}: sequence {r['sequence']} line {r['line']} (byte {r['offset']}), "
            f"last scn {r['last_scn']}, progress {r['progress']}{', finished' if r['finished'] else ''}"
        )
    cp = doc.get("checkpoint")
    if cp is None:
        lines.append("no dispatcher checkpoint yet")
        return "\n".join(lines)
    lines.append(
        f"checkpoint: queue index {cp['position']} ({cp['behind_records']:,} records behind the queue's end), "
        f"{cp['age_seconds']}s old"
    )
    lines.append(f"watermark: {doc['watermark']}  progress: " + ", ".join(f"{t}={p}" for t, p in doc["progress"].items()))
    lines.append("threads: " + ", ".join(
        f"{t} {state}{'' if int(t) in doc['threads_in_play'] else ' (not in play)'}"
        for t, state in doc["thread_states"].items()))
    if doc["waiting_for"]:
        lines.append("waiting for the first records of thread(s) " + ", ".join(map(str, doc["waiting_for"]))
                     + ": nothing is published until then")
    totals = doc.get("totals", {})
    if totals.get("late_records"):
        lines.append(f"late records: {totals['late_records']:,} (in {totals.get('late_transactions', 0):,} whole "
                     "transaction(s) and rows of published ones), not published")
    ot = doc["open_transactions"]
    lines.append(f"open transactions: {ot['count']:,} ({ot['ended_waiting_for_watermark']:,} ended, waiting for the watermark)")
    if ot["oldest"]:
        o = ot["oldest"]
        lines.append(f"  oldest: {o['xid']} from scn {o['first_scn']}, age {o['age_seconds']}s, {o['rows']:,} rows")
        lg = ot["largest"]
        lines.append(f"  largest: {lg['xid']} with {lg['rows']:,} rows in {lg['blocks']:,} blocks")
    cf = doc["changefeed"]
    lines.append(
        f"changefeed {cf['path']}: last tx_seq {cf['last_tx_seq']}, last c_scn {cf['last_c_scn']}, {cf['files']} files"
    )
    c = doc["cleanup"]
    lines.append(
        f"cleanup: needed from index {c['needed_from_index']}; {c['segments_freeable']} segment(s), "
        f"{c['bytes_freeable'] / 1e6:,.1f} MB could be freed now"
    )
    return "\n".join(lines)
