"""The file-writer source's resume state, stored in the queue with every block it appends
(under ``olrfile/position``, in the same write), and what ``status`` shows of it."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from ..base import ResumeState, decode_state, encode_state, stored_state
from ..olr_types import open_transaction_doc, open_transaction_text, position_doc

#: The prefix of the source's queue metadata keys.
PREFIX = b"olrfile/"
#: The key of its resume state.
STATE_KEY = b"olrfile/position"
#: The prefix of the keys of the tables' columns (OpenLogReplicator's ``schema.columns``).
COLUMNS_PREFIX = b"olrfile/columns/"

Position = tuple[int, int]  # (c_scn, c_idx)


class OpenTransaction(msgspec.Struct):
    """The transaction whose records are in the queue and whose commit is not (the output
    never interleaves transactions: at most one), as far as the next line needs it."""

    xid: str
    thread: int
    first: Position  # the position of its first message
    scn: int  # the last scn its messages gave
    tm: int | None  # the tm of its first message
    whole: bool  # opened by a message without a begin entry: ends with that message
    begun: bool  # its BEGIN record is in the queue
    rows: int = 0
    documented: list[str] = []  # schema versions whose document a row of it carries


class OlrFileState(ResumeState):
    """Where the reader is, exactly: the line at ``offset`` of ``file`` (its ``line``-th,
    counted from 1), of which the first ``steps`` steps are in the queue (a line's steps:
    one per payload entry, then its end), and the transaction open there."""

    output: str = ""  # the location read, olr+file://OUTPUT
    file: str | None = None  # the name of the file read (None: before the first)
    offset: int = 0  # of the line read next (or being read: steps > 0)
    line: int = 1  # its number in the file
    steps: int = 0  # of that line, already in the queue
    last: Position | None = None  # the position of the last message taken
    last_commit: Position | None = None  # the position of the last commit taken
    counted: Position | None = None  # c_idx absent: the last position counted (c_scn, c_idx given it)
    open: OpenTransaction | None = None
    messages: int = 0  # messages taken (every run)
    transactions: int = 0  # transactions with rows appended (every run)
    checkpoints: int = 0  # OpenLogReplicator's checkpoint messages, skipped
    finished: bool = False  # the last replay read every file to its end
    written: float | None = None  # time.time() when written

    def encode(self) -> bytes:
        return encode_state(self)


class TableColumns(ResumeState):
    """A table's columns as the output last gave them (``schema.columns``: ``columns`` is
    the message's JSON text of that array), from which its rows get their schema document
    after a restart too."""

    owner: str | None = None
    table: str = ""
    columns: str = "[]"

    def encode(self) -> bytes:
        return encode_state(self)


def columns_key(owner: str | None, table: str) -> bytes:
    return COLUMNS_PREFIX + f"{owner or ''}.{table}".encode()


def load_columns(meta: Mapping[bytes, bytes], where: str = "queue") -> dict[bytes, str]:
    """Every table's columns stored in a queue's metadata (their JSON text), by key."""
    return {k: decode_state(TableColumns, k, v, where).columns for k, v in meta.items() if k.startswith(COLUMNS_PREFIX)}


def load_state(meta: Mapping[bytes, bytes], where: str = "queue") -> OlrFileState | None:
    """The state stored in a queue's metadata, if any."""
    return stored_state(OlrFileState, meta, STATE_KEY, where)


def status(meta: Mapping[bytes, bytes], now: float) -> dict | None:
    """``olr_file`` in ``status``: the file and line reached, the last commit taken."""
    st = load_state(meta)
    if st is None:
        return None
    return {
        "output": st.output,
        "file": st.file,
        "line": st.line,
        "offset": st.offset,
        "last_commit": position_doc(st.last_commit),
        "open_transaction": open_transaction_doc(st.open),
        "messages": st.messages,
        "transactions": st.transactions,
        "checkpoint_messages": st.checkpoints,
        "as_of_seconds_ago": round(now - st.written, 3) if st.written else None,
    }


def status_lines(doc: dict) -> list[str]:
    where = "no file read yet" if doc["file"] is None else f"at {doc['file']} line {doc['line']:,}"
    commit = doc["last_commit"]
    line = (
        f"OpenLogReplicator output {doc['output']}: {where}; last commit taken "
        + ("none" if commit is None else f"c_scn {commit['c_scn']} c_idx {commit['c_idx']}")
        + f"; {doc['transactions']:,} transaction(s), {doc['messages']:,} message(s), "
        f"{doc['checkpoint_messages']:,} checkpoint message(s) skipped"
    )
    line += open_transaction_text(doc["open_transaction"])
    if doc["as_of_seconds_ago"] is not None:
        line += f" (as of {doc['as_of_seconds_ago']}s ago)"
    return [line]
