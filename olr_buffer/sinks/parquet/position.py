"""The changefeed writer's position document, stored by the runtime in the queue with
each checkpoint (under :data:`POSITION_KEY`), and what ``status`` shows of the changefeed."""

from __future__ import annotations

from typing import Any

import msgspec

from ...errors import OlrBufferError
from ...txbuffer.metadata import StoredDocument, decode_document, encode_document
from .layout import manifest_table_format, read_manifest

#: The queue metadata key of the changefeed writer's position.
POSITION_KEY = b"sink/changefeed"


class ChangefeedPosition(StoredDocument):
    """The changefeed as of the queue's last checkpoint: a changefeed found behind it
    (``next_tx_seq``) lost published files, and is refused."""

    path: str | None = None
    next_tx_seq: int | None = None
    last_c_scn: int | None = None
    files: int | None = None

    def encode(self) -> bytes:
        return encode_document(self)


def load_position(stored: bytes | None, legacy: Any = None) -> ChangefeedPosition | None:
    """The position the runtime stored (``stored``), or the one an older version kept in
    the dispatcher's checkpoint (``legacy``, a dict), or None."""
    if stored is not None:
        return decode_document(ChangefeedPosition, POSITION_KEY, stored)
    if isinstance(legacy, dict):
        return msgspec.convert(legacy, ChangefeedPosition)
    return None


def status(stored: bytes | None, legacy: Any, queue_id: str | None) -> dict:
    """``changefeed`` in ``status``: its live position from its manifest (the writer
    rewrites it with each file it publishes) if this queue writes it, else as of the last
    checkpoint (``"source"`` says which). ``updated``: seconds since the epoch."""
    pos = load_position(stored, legacy) or ChangefeedPosition()
    cf = msgspec.structs.asdict(pos)
    try:
        manifest = read_manifest(pos.path) if pos.path else None
    except OlrBufferError:  # not readable by this user: the checkpoint's figures
        manifest = None
    ours = manifest and isinstance(manifest.get("next_tx_seq"), int) and manifest.get("queue_id") == queue_id
    live = manifest if ours else None
    src = live or cf
    next_tx_seq = src.get("next_tx_seq")
    doc: dict[str, Any] = {
        "path": pos.path,
        "source": "manifest" if live else "checkpoint",
        "next_tx_seq": next_tx_seq,
        "last_tx_seq": (next_tx_seq - 1) if next_tx_seq else None,
        "last_c_scn": src.get("last_c_scn"),
        "files": src.get("files"),
        "updated": live["updated"] if live and live.get("updated") else None,
    }
    kind = manifest_table_format(manifest)
    if kind is not None:
        doc["table_format"] = kind
    if kind == "iceberg" and pos.path:
        from .iceberg_table import table_status

        doc["iceberg"] = table_status(pos.path)
    return doc


def status_line(doc: dict) -> str:
    held = (
        f"last tx_seq {doc['last_tx_seq']}, last c_scn {doc['last_c_scn']}, {doc['files']} files"
        if doc["last_tx_seq"] is not None
        else "nothing published yet"
    )
    table = doc.get("iceberg")
    if isinstance(table, dict):
        held += (
            f"; Iceberg table {table.get('table')}: {table['error']}"
            if table.get("error")
            else f"; Iceberg table {table.get('table')} at snapshot {table.get('snapshot_id')}, "
            f"tx_seq up to {table.get('last_tx_seq')} committed"
        )
    return f"changefeed {doc['path']}: {held}"
