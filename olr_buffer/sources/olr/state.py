"""The OpenLogReplicator source's resume state, stored in the queue with every block it
appends (under ``olr/position``, in the same write), the tables' columns it was sent
(``olr/columns/<owner>.<table>``), and what ``status`` shows of them."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..base import ResumeState, decode_state, encode_state, stored_state
from ..olr_types import open_transaction_doc, open_transaction_text, position_doc

#: The prefix of the source's queue metadata keys.
PREFIX = b"olr/"
#: The key of its resume state.
STATE_KEY = b"olr/position"
#: The prefix of the keys of the tables' columns (OpenLogReplicator's ``schema.columns``).
COLUMNS_PREFIX = b"olr/columns/"

Position = tuple[int, int]  # (c_scn, c_idx)


class OpenTransaction(msgspec.Struct):
    """The transaction whose records are in the queue and whose commit is not (the stream
    never interleaves transactions: at most one)."""

    xid: str
    first: Position  # the position of its first message
    rows: int = 0


class OlrState(ResumeState):
    """What the receiver needs to restart exactly (see :mod:`.receiver`), and what
    ``status`` shows. Positions are ``[c_scn, c_idx]``."""

    source: str | None = None  # olr://HOST:PORT/DATABASE
    database: str | None = None
    last_commit: Position | None = None  # the position of the last commit appended
    held: Position | None = None  # of the last transaction appended with rows (it waits to be published)
    open: OpenTransaction | None = None
    received: Position | None = None  # the last position the sender sent
    received_tm: int | None = None  # the last tm it sent (ns)
    confirmed: Position | None = None  # the position last confirmed to the sender
    # the last checkpoint message confirmed while every transaction received was published
    # (stored before its CONFIRM is sent): the queue holds everything up to it
    idle_confirmed: Position | None = None
    confirmed_tm: int | None = None  # the commit time of the transaction confirmed (ns)
    messages: int = 0  # messages read (by every run)
    transactions: int = 0  # transactions appended (by every run)
    checkpoints: int = 0  # OpenLogReplicator's checkpoint messages, ignored
    reconnects: int = 0
    tables_with_columns: int = 0  # tables whose columns the sender gave (olr/columns/...)
    written: float | None = None  # time.time() when written

    def encode(self) -> bytes:
        return encode_state(self)


class TableColumns(ResumeState):
    """A table's columns as the sender gave them (``schema.columns``: ``columns`` is the
    message's JSON text of that array), from which its rows get their schema document
    after a restart too; the newest replaces the one before."""

    owner: str | None = None
    table: str = ""
    obj: int | None = None
    columns: str = "[]"
    at: Position | None = None  # the position of the message that carried them

    def encode(self) -> bytes:
        return encode_state(self)


def columns_key(owner: str | None, table: str) -> bytes:
    return COLUMNS_PREFIX + f"{owner or ''}.{table}".encode()


def load_state(meta: Mapping[bytes, bytes], where: str = "queue") -> OlrState | None:
    """The state stored in a queue's metadata, if any."""
    return stored_state(OlrState, meta, STATE_KEY, where)


def load_columns(meta: Mapping[bytes, bytes], where: str = "queue") -> dict[bytes, TableColumns]:
    """Every table's columns stored in a queue's metadata, by key."""
    return {k: decode_state(TableColumns, k, v, where) for k, v in meta.items() if k.startswith(COLUMNS_PREFIX)}


def status(meta: Mapping[bytes, bytes], now: float) -> dict | None:
    """``olr`` in ``status``: the sender, the position confirmed to it and the lag."""
    st = load_state(meta)
    if st is None:
        return None
    lag_scn = None
    if st.received is not None:
        lag_scn = max(0, st.received[0] - (st.confirmed[0] if st.confirmed else 0))
    lag_seconds = None
    if st.received_tm is not None and st.confirmed_tm is not None:
        lag_seconds = round(max(0, st.received_tm - st.confirmed_tm) / 1e9, 3)
    return {
        "sender": st.source,
        "database": st.database,
        "confirmed": position_doc(st.confirmed),
        "received": position_doc(st.received),
        "last_appended_commit": position_doc(st.last_commit),
        "lag_scn": lag_scn,
        "lag_seconds": lag_seconds,
        "open_transaction": open_transaction_doc(st.open),
        "messages": st.messages,
        "transactions": st.transactions,
        "checkpoint_messages": st.checkpoints,
        "reconnects": st.reconnects,
        "tables_with_columns": st.tables_with_columns,
        "as_of_seconds_ago": round(now - st.written, 3) if st.written else None,
    }


def _text(p: dict | None) -> str:
    return "none" if p is None else f"c_scn {p['c_scn']} c_idx {p['c_idx']}"


def status_lines(doc: dict) -> list[str]:
    lag = []
    if doc["lag_scn"] is not None:
        lag.append(f"{doc['lag_scn']:,} SCNs")
    if doc["lag_seconds"] is not None:
        lag.append(f"{doc['lag_seconds']}s")
    line = (
        f"olr sender {doc['sender']}: confirmed {_text(doc['confirmed'])}, sender at {_text(doc['received'])}"
        + (f" ({', '.join(lag)} behind)" if lag else "")
        + f", {doc['transactions']:,} transaction(s) received, {doc['checkpoint_messages']:,} checkpoint message(s) "
        f"ignored, {doc['reconnects']} reconnect(s)"
    )
    line += open_transaction_text(doc["open_transaction"])
    if doc["tables_with_columns"]:
        line += f"; columns of {doc['tables_with_columns']} table(s) kept"
    if doc["as_of_seconds_ago"] is not None:
        line += f" (as of {doc['as_of_seconds_ago']}s ago)"
    return [line]
