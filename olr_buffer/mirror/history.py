"""``--history``: a type 2 table beside each mirror table, ``TARGET/OWNER/TABLE__history/``:
every version of every row, with its validity range.

A version is what a transaction left of a row: it is valid from that transaction
(``valid_from_tx_seq``, its commit time ``valid_from``) until the transaction that
changed the row again or removed it (``valid_to_tx_seq``, ``valid_to``), exclusive; the
current version has null there. A row changed twice in one transaction has one version
(the transaction's last); a delete closes the key's version, a truncate every open one,
an update that changes the key closes the old key's and opens the new key's. So the
versions of a key do not overlap, and follow each other without a gap while the row
exists.

Each batch is one commit with its own application transaction (``appId`` the table's,
``:history`` after it): a ``MERGE`` that closes the open versions the batch ends and adds
the new ones, or, after a schema change, the table written again.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pyarrow as pa
from deltalake import write_deltalake
from deltalake.exceptions import DeltaError
from deltalake.transaction import CommitProperties, Transaction

from .rules import C_SCN, Plan
from .table import MirrorTable, arrow_rows, quote

SUFFIX = "__history"
FROM_TX, TO_TX, FROM_TS, TO_TS = "valid_from_tx_seq", "valid_to_tx_seq", "valid_from", "valid_to"
RANGE = (FROM_TX, TO_TX, FROM_TS, TO_TS, C_SCN)
_RANGE_TYPES = {
    FROM_TX: pa.int64(),
    TO_TX: pa.int64(),
    FROM_TS: pa.timestamp("us", tz="UTC"),
    TO_TS: pa.timestamp("us", tz="UTC"),
    C_SCN: pa.int64(),
}
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
KIND, CLOSE_TX, CLOSE_TS = "_olr_kind", "_olr_close_tx", "_olr_close_ts"

log = logging.getLogger(__name__)


def _time(c_tm: int | None) -> dt.datetime | None:
    return None if c_tm is None else _EPOCH + dt.timedelta(microseconds=c_tm // 1000)


class HistoryTable(MirrorTable):
    """The history table of ``owner.table`` under ``target``."""

    def __init__(self, target: str, owner: str, table: str, app: str) -> None:
        super().__init__(target, owner, table + SUFFIX, app + ":history")
        self.name = f"{owner}.{table} (history)"
        self.warned = False

    def commit_history(self, plan: Plan, mirror: MirrorTable) -> None:
        """Apply the events of ``plan`` after the table's version (it may hold more of the
        batch than ``mirror``: it is committed first); a new history table of a mirror
        table that has rows starts with their current versions."""
        try:
            self._commit_history(plan, mirror)
        except (DeltaError, OSError) as exc:
            raise self.failure(exc, "write") from None

    def _commit_history(self, plan: Plan, mirror: MirrorTable) -> None:
        if not plan.key:
            if not self.warned:
                log.warning(
                    "%s: has no key: no history is kept of it (a version of a row is known by its key)", self.name
                )
                self.warned = True
            return
        new: list[dict | None] = []  # the batch's versions (None: opened and ended by one transaction)
        open_now: dict[Any, int] = {}  # key -> index in new of its open version
        closes: dict[Any, tuple[int, dt.datetime | None]] = {}  # key -> when the table's open version ends
        truncated: tuple[int, dt.datetime | None] | None = None
        after = -1 if self.version is None else self.version
        for kind, key, row, c in plan.events:
            if c.tx_seq <= after:
                continue
            when = (c.tx_seq, _time(c.c_tm))
            if kind == "truncate":
                for i in open_now.values():
                    self._end(new, i, when)
                open_now.clear()
                truncated = truncated or when
                continue
            at = open_now.pop(key, None)
            if at is not None:
                entry = new[at]
                if entry is not None and entry[FROM_TX] == c.tx_seq:  # a version of this very transaction: never seen
                    new[at] = None
                else:
                    self._end(new, at, when)
            elif truncated is None and key not in closes:
                closes[key] = when
            if kind == "put":
                assert row is not None  # a put carries its row
                open_now[key] = len(new)
                new.append({**row, FROM_TX: c.tx_seq, FROM_TS: when[1], TO_TX: None, TO_TS: None, C_SCN: c.c_scn})
        versions = [v for v in new if v is not None]
        columns = list(plan.columns) + [(n, _RANGE_TYPES[n]) for n in RANGE]
        props = CommitProperties(app_transactions=[Transaction(self.app, plan.last_tx_seq)])
        old = self.schema(extra=())
        if (
            old is None
            or [n for n, _ in old] != [n for n, _ in columns]
            or any(a != b for (_, a), (_, b) in zip(old, columns))
        ):
            rows = self.load_all()
            if self.dt is None:
                rows = [
                    {**r, FROM_TX: tx, FROM_TS: None, TO_TX: None, TO_TS: None, C_SCN: scn}
                    for r, tx, scn in mirror.load()
                ]
            for r in rows:
                if r[TO_TX] is None:
                    k = tuple(r.get(n) for n in plan.key)
                    end = closes.get(k) or (truncated if truncated is not None and k not in closes else None)
                    if end is not None:
                        r[TO_TX], r[TO_TS] = end
            data = arrow_rows(columns, rows + versions, self.name)
            write_deltalake(
                self.uri,
                data,
                mode="overwrite",
                schema_mode=None if old is None else "overwrite",
                storage_options=self.options or None,
                commit_properties=props,
            )
        else:
            close_rows = [
                {**dict(zip(plan.key, k)), KIND: "close", CLOSE_TX: t, CLOSE_TS: ts} for k, (t, ts) in closes.items()
            ]
            new_rows = [{**v, KIND: "new", CLOSE_TX: None, CLOSE_TS: None} for v in versions]
            data = arrow_rows(
                columns + [(KIND, pa.string()), (CLOSE_TX, pa.int64()), (CLOSE_TS, pa.timestamp("us", tz="UTC"))],
                close_rows + new_rows,
                self.name,
            )
            match = " AND ".join(
                [f"t.{quote(k)} = s.{quote(k)}" for k in plan.key] + [f"t.{TO_TX} IS NULL", f"s.{KIND} = 'close'"]
            )
            names = [n for n, _ in columns]
            assert self.dt is not None  # the table has a schema, so it exists
            merge = (
                self.dt.merge(data, match, source_alias="s", target_alias="t", commit_properties=props)
                .when_matched_update({TO_TX: f"s.{CLOSE_TX}", TO_TS: f"s.{CLOSE_TS}"})
                .when_not_matched_insert({quote(n): f"s.{quote(n)}" for n in names}, f"s.{KIND} = 'new'")
            )
            if truncated is not None:
                ts = "NULL" if truncated[1] is None else f"TIMESTAMP '{truncated[1].isoformat()}'"
                merge = merge.when_not_matched_by_source_update(
                    {TO_TX: str(truncated[0]), TO_TS: ts}, f"t.{TO_TX} IS NULL"
                )
            merge.execute()
        self.open()

    @staticmethod
    def _end(new: list, i: int, when: tuple[int, dt.datetime | None]) -> None:
        if new[i][FROM_TX] == when[0]:
            new[i] = None  # opened and ended by one transaction: never seen
        else:
            new[i][TO_TX], new[i][TO_TS] = when

    def load_all(self) -> list[dict]:
        return [] if self.dt is None else self.dt.to_pyarrow_table().to_pylist()
