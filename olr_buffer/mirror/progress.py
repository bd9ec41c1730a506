"""What ``status --mirror TARGET`` shows of a mirror: how far it is behind its changefeed,
and each table's last applied transaction (docs/mirror.md, "Status")."""

from __future__ import annotations

import orjson

from ..store import ObjectNotFoundError, open_store
from .feed import Feed
from .history import SUFFIX
from .service import PROGRESS
from .table import MirrorTable, app_id


def mirror_status(changefeed: str, target: str) -> dict:
    """The mirror at ``target`` of ``changefeed``: the changefeed's last tx_seq, how far
    each selection of tables the mirror ran with has read (``scanned``: every table of it
    holds every change up to there) and each table's version (the last tx_seq applied)."""
    feed = Feed(changefeed)
    feed.refresh()
    store = open_store(target)
    try:
        note = orjson.loads(store.read(PROGRESS))
    except (ObjectNotFoundError, orjson.JSONDecodeError):
        note = {}
    queue_id = feed.queue_id() or note.get("queue_id") or ""
    last = feed.last_tx_seq
    scanned = note.get("scanned") if isinstance(note.get("scanned"), dict) else {}
    tables = []
    for obj in store.list("", folders=True):
        owner = obj.name.rstrip("/")
        if owner.startswith(("_", ".")):
            continue
        for tobj in store.list(f"{owner}/", folders=True):
            name = tobj.name.rstrip("/").rpartition("/")[2]
            base = name[: -len(SUFFIX)] if name.endswith(SUFFIX) else name
            t = MirrorTable(target, owner, name, app_id(queue_id, owner, base) + (":history" if base != name else ""))
            t.open()
            tables.append({"table": f"{owner}.{name}", "tx_seq": t.version, "ours": t.exists and t.version is not None})
    return {
        "target": store.uri,
        "changefeed": feed.location.uri,
        "queue_id": queue_id or None,
        "changefeed_last_tx_seq": last,
        "selections": [{"tables": sel, "scanned": pos, "behind": last - pos} for sel, pos in sorted(scanned.items())],
        "tables": tables,
        "foreign": bool(note.get("queue_id")) and note.get("queue_id") != queue_id,
    }


def render_mirror(doc: dict) -> list[str]:
    lines = [f"mirror {doc['target']} of {doc['changefeed']} (changefeed up to tx_seq {doc['changefeed_last_tx_seq']})"]
    if doc["foreign"]:
        lines.append("  the target holds the mirror of another changefeed")
    for sel in doc["selections"]:
        what = "every table" if sel["tables"] == "*" else sel["tables"]
        lines.append(f"  {what}: read up to tx_seq {sel['scanned']}, {sel['behind']} transaction(s) behind")
    if not doc["selections"]:
        lines.append("  nothing mirrored yet")
    for t in doc["tables"]:
        state = (
            f"last change applied at tx_seq {t['tx_seq']}" if t["ours"] else "not written by this changefeed's mirror"
        )
        lines.append(f"  {t['table']}: {state}")
    return lines
