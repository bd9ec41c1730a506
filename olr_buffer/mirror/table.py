"""One mirror table: a Delta table at ``TARGET/OWNER/TABLE/`` written with ``deltalake``.

Every commit carries the application transaction ``txn(appId, version)``: ``appId`` names
the changefeed's queue and the table (:func:`app_id`), ``version`` is the last ``tx_seq``
the commit applies. A batch's changes to the table go in one commit (a MERGE of the rows
they touch, or the whole table written again: a truncate, a schema change, a table
without a key), so the table never shows part of a batch, and a batch applied again after
a kill (its commit went in, or not) is recognised by the version: nothing changes twice.
"""

from __future__ import annotations

import decimal
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError, TableNotFoundError
from deltalake.transaction import CommitProperties, Transaction

from ..store import is_remote, open_store
from .errors import MirrorDataError, MirrorTargetError
from .rules import C_SCN, EXTRA, TX_SEQ, Plan
from .types import Misfit, value

DELETED = "_olr_deleted"


def app_id(queue_id: str, owner: str, table: str) -> str:
    """The application id of a mirror table's commits: the changefeed's queue, the table."""
    return f"olr-buffer-mirror:{queue_id}:{owner}.{table}"


def quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class MirrorTable:
    """The Delta table of ``owner.table`` under ``target``."""

    def __init__(self, target: str, owner: str, table: str, app: str) -> None:
        self.owner, self.table, self.app = owner, table, app
        self.name = f"{owner}.{table}"
        if is_remote(target):
            self.uri, self.options = open_store(f"{target.rstrip('/')}/{owner}/{table}").delta_location()
        else:
            self.uri, self.options = os.path.join(target, owner, table), {}
        self.dt: DeltaTable | None = None
        self.version: int | None = None  # the last tx_seq applied (None: no table yet)

    def open(self) -> None:
        try:
            self.dt = DeltaTable(self.uri, storage_options=self.options or None)
        except TableNotFoundError:
            self.dt, self.version = None, None
            return
        except (DeltaError, OSError) as exc:
            raise self.failure(exc, "read") from None
        self.version = self.dt.transaction_version(self.app)

    def failure(self, exc: Exception, doing: str) -> MirrorTargetError:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return MirrorTargetError(
            f"{self.uri}: cannot {doing} the mirror table: {reason}",
            hint="run the mirror again once the target is back: it resumes where it stopped",
            table=self.name,
        )

    @property
    def exists(self) -> bool:
        return self.dt is not None

    def schema(self, extra: tuple[str, ...] = EXTRA) -> list[tuple[str, pa.DataType]] | None:
        """The table's columns (without ``extra``), None without a table."""
        if self.dt is None:
            return None
        schema = pa.schema(self.dt.schema().to_arrow())
        return [(f.name, f.type) for f in schema if f.name not in extra]

    # -- reads the rules need ------------------------------------------------------------

    def fetch(self, key: list[str], keys: set) -> dict:
        """The rows with these keys: key -> (row, tx_seq, c_scn)."""
        if self.dt is None or not keys:
            return {}
        first = pa.array(sorted({k[0] for k in keys}, key=repr), type=self._type(key[0]))
        rows = self.dt.to_pyarrow_dataset().to_table(filter=pc.field(key[0]).isin(first)).to_pylist()
        out = {}
        for row in rows:
            k = tuple(row.get(name) for name in key)
            if k in keys:
                out[k] = (row, row.pop(TX_SEQ), row.pop(C_SCN))
        return out

    def load(self) -> list[tuple[dict, int, int]]:
        """Every row: (row, tx_seq, c_scn)."""
        if self.dt is None:
            return []
        return [(row, row.pop(TX_SEQ), row.pop(C_SCN)) for row in self.dt.to_pyarrow_table().to_pylist()]

    def _type(self, name: str) -> pa.DataType:
        return dict(self.schema() or [])[name]

    # -- the commit --------------------------------------------------------------------

    def commit(self, plan: Plan) -> None:
        """Apply ``plan`` in one commit that carries ``txn(app, plan.last_tx_seq)``."""
        try:
            self._commit(plan)
        except (DeltaError, OSError) as exc:
            raise self.failure(exc, "write") from None
        self.version = plan.last_tx_seq
        self.open()

    def _commit(self, plan: Plan) -> None:
        props = CommitProperties(
            app_transactions=[Transaction(self.app, plan.last_tx_seq)],
            custom_metadata={"olr_buffer.mirror.changes": str(plan.changes)},
        )
        if plan.mode == "rewrite":
            data = _arrow(plan.columns, plan.rows, self.name)  # type: ignore[arg-type]
            old = self.schema()
            same = (
                old is not None
                and [n for n, _ in old] == [n for n, _ in plan.columns]
                and all(a == b for (_, a), (_, b) in zip(old, plan.columns))
            )
            write_deltalake(
                self.uri,
                data,
                mode="overwrite",
                schema_mode=None if same or old is None else "overwrite",
                storage_options=self.options or None,
                commit_properties=props,
            )
        else:
            entries = plan.rows.items()  # type: ignore[union-attr]
            rows = []
            for k, (row, tx_seq, c_scn) in entries:
                full = row if row is not None else dict(zip(plan.key, k))
                rows.append((full, tx_seq, c_scn, row is None))
            data = _arrow(plan.columns, [(r, t, s) for r, t, s, _ in rows], self.name)
            data = data.append_column(DELETED, pa.array([d for *_, d in rows], pa.bool_()))
            names = [n for n, _ in plan.columns] + list(EXTRA)
            setting = {quote(n): f"s.{quote(n)}" for n in names}
            predicate = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in plan.key)
            assert self.dt is not None
            (
                self.dt.merge(data, predicate, source_alias="s", target_alias="t", commit_properties=props)
                .when_matched_delete(f"s.{DELETED}")
                .when_matched_update(setting)
                .when_not_matched_insert(setting, f"NOT s.{DELETED}")
                .execute()
            )


def _arrow(columns: list[tuple[str, pa.DataType]], rows: list[tuple[dict, int, int]], name: str) -> pa.Table:
    return arrow_rows(
        columns + [(TX_SEQ, pa.int64()), (C_SCN, pa.int64())],
        [{**r, TX_SEQ: tx, C_SCN: scn} for r, tx, scn in rows],
        name,
    )


def arrow_rows(columns: list[tuple[str, pa.DataType]], rows: list[dict], name: str) -> pa.Table:
    """The rows as a table of these columns (a value of a column whose type changed cast)."""
    arrays = []
    for column, t in columns:
        values = [r.get(column) for r in rows]
        try:
            arrays.append(pa.array(values, type=t))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            arrays.append(pa.array([_recast(v, t, name, column) for v in values], type=t))
    return pa.Table.from_arrays(arrays, names=[c for c, _ in columns])


def _recast(v: Any, t: pa.DataType, name: str, column: str) -> Any:
    """A value of a column whose type changed, as the new type holds it."""
    if v is None:
        return None
    try:
        if isinstance(v, float):
            v = decimal.Decimal(repr(v))
        if isinstance(v, (str, int, decimal.Decimal, bool, list)):
            return value(v, t)
        return pa.scalar(v).cast(t).as_py()
    except (Misfit, pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise MirrorDataError(
            f"{name}: column {column!r} is now of type {t}, and a row's value {str(v)[:100]!r} does not fit it ({exc})",
            hint="the source changed the column's type: the mirror casts every value to the new one",
        ) from None
