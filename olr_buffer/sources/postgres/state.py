"""The PostgreSQL source's resume state, stored in the queue with every block it appends
(under ``postgres/position``, in the same write), and what ``status`` shows of it."""

from __future__ import annotations

from collections.abc import Mapping

from ..base import ResumeState, encode_state, stored_state

#: The queue metadata key of the PostgreSQL source's state (and the prefix of its keys).
STATE_KEY = b"postgres/position"


class PostgresState(ResumeState):
    """What the reader needs to restart exactly (see :mod:`.reader`), and what ``status``
    shows. LSNs are integers."""

    slot: str | None = None
    publication: str | None = None
    source: str | None = None  # the server's URI without its password
    source_id: str | None = None  # postgresql:<system identifier>:<slot>
    last_commit: int = -1  # the commit LSN of the last transaction appended
    committed: dict[str, int] = {}  # streamed transactions appended, not yet published: xid -> commit LSN
    open: list[str] = []  # transactions with records in the queue and no end yet
    streaming: int = 0  # of them, streamed by the server while in progress
    copy: str = "none"  # the initial copy: none, started, done, skipped
    consistent_point: int = 0  # the slot's consistent point (the copy's snapshot)
    confirmed: int = 0  # the slot position confirmed to the server
    server_lsn: int = 0  # the server's WAL position, as of its last message
    cuts: int = 0  # subtransaction aborts that dropped rows already appended
    written: float | None = None  # time.time() when written

    def encode(self) -> bytes:
        return encode_state(self)


def load_state(meta: Mapping[bytes, bytes], where: str = "queue") -> PostgresState | None:
    """The state stored in a queue's metadata, if any."""
    return stored_state(PostgresState, meta, STATE_KEY, where)


def lsn_text(value: int) -> str:
    """An LSN as PostgreSQL writes it: ``16/B374D848``."""
    return f"{value >> 32:X}/{value & 0xFFFFFFFF:X}"


def status(meta: Mapping[bytes, bytes], now: float) -> dict | None:
    """``postgresql`` in ``status``: the slot, the confirmed position, the lag."""
    st = load_state(meta)
    if st is None:
        return None
    return {
        "source": st.source,
        "slot": st.slot,
        "publication": st.publication,
        "confirmed_lsn": lsn_text(st.confirmed),
        "server_lsn": lsn_text(st.server_lsn),
        "lag_bytes": max(0, st.server_lsn - st.confirmed),
        "streaming_transactions": st.streaming,
        "subtransaction_cuts": st.cuts,
        "open_transactions": len(st.open),
        "initial_copy": st.copy,
        "as_of_seconds_ago": round(now - st.written, 3) if st.written else None,
    }


def status_lines(doc: dict) -> list[str]:
    return [
        (
            f"postgresql {doc['source']}: slot {doc['slot']}, confirmed {doc['confirmed_lsn']}, server "
            f"{doc['server_lsn']} ({doc['lag_bytes']:,} bytes behind), {doc['streaming_transactions']} transaction(s) "
            f"streaming, initial copy {doc['initial_copy']}"
            + (f" (as of {doc['as_of_seconds_ago']}s ago)" if doc["as_of_seconds_ago"] is not None else "")
        )
    ]
