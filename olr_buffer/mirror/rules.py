"""The rules of a mirror table (docs/mirror.md, "Rules"): how a run of one table's changes,
in changefeed order, changes its rows. Pure Python over the changes and the rows they
touch, so that every engine that applies them (the service, with ``deltalake``) decides
the same.

- The row's key: the schema document's ``key`` columns; a delete's from ``before``, an
  insert's from ``after``, an update's old key from ``before`` (or ``after`` when
  ``before`` lacks it) and its new key from ``after`` (a key column ``after`` lacks is
  ``before``'s): an update that changes the key removes the old key.
- An update's row: the row as it was (in the batch, or in the table), then ``before``,
  then ``after`` over it: images that carry only some columns (Oracle's redo, PostgreSQL's
  unchanged TOASTed values) keep the others.
- A truncate (``t``) ends every row before it.
- A table without a key: a row is its whole value; an update or a delete must carry the
  whole row in ``before`` (PostgreSQL: ``REPLICA IDENTITY FULL``), and removes one row
  equal to it.
- Columns: the table's are those of its schema documents: a column a new version adds
  appears (null in rows no change wrote since); a column a version drops stays, null in
  every row written from then on; a column whose type changes takes the new type, every
  value cast (one that does not fit stops the mirror, naming it).
"""

from __future__ import annotations

import decimal
import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from .errors import MirrorDataError
from .types import Misfit, arrow_type, converter, same_type

#: The columns a mirror table adds to the source's.
TX_SEQ, C_SCN = "tx_seq", "c_scn"
EXTRA = (TX_SEQ, C_SCN)


@dataclass(slots=True)
class Change:
    """One changefeed row of the table."""

    tx_seq: int
    op_seq: int
    c_scn: int
    op: str
    before: str | None
    after: str | None
    version: str | None
    c_tm: int | None = None  # the commit time, ns since the epoch


@dataclass(slots=True)
class Plan:
    """What a batch does to a mirror table. ``merge``: ``rows`` maps each key the batch
    touched to its row (None: gone) and the change that wrote it; the table's other rows
    stay. ``rewrite``: ``rows`` is every row of the table (a truncate, a schema change, a
    table without a key). ``columns``: the table's columns afterwards (without
    ``tx_seq``/``c_scn``); ``key``: its key columns (empty: none)."""

    mode: str
    columns: list[tuple[str, pa.DataType]]
    key: list[str]
    rows: dict[Any, tuple[dict | None, int, int]] | list[tuple[dict, int, int]]
    last_tx_seq: int
    changes: int = 0
    #: what each change did, in order, for the history table: ("put", key, row, change),
    #: ("close", key, None, change), ("truncate", None, None, change)
    events: list[tuple[str, Any, dict | None, Change]] = field(default_factory=list)


@dataclass(slots=True)
class _State:
    columns: dict[str, pa.DataType]
    key: list[str]
    document_columns: list[str] = field(default_factory=list)
    retyped: set[str] = field(default_factory=set)


_DECODER = json.JSONDecoder(parse_float=decimal.Decimal)  # numbers keep every digit


def _loads(text: str | None) -> dict | None:
    return None if text is None else _DECODER.decode(text)


class TableRules:
    """Applies the changes of one table, batch by batch.

    ``schema``: the table's columns now (None: no table yet); ``fetch(keys)``: the rows of
    the table with those keys (key tuple -> (row, tx_seq, c_scn)); ``load()``: all its rows.
    ``document(version)``: a schema document."""

    def __init__(
        self,
        owner: str,
        table: str,
        schema: list[tuple[str, pa.DataType]] | None,
        key: list[str] | None,
        document: Callable[[str], dict],
    ) -> None:
        self.owner, self.table = owner, table
        self.name = f"{owner}.{table}"
        self.schema = schema
        self.table_key = key
        self.document = document
        self._converters: dict[tuple[str, pa.DataType], Callable[[Any], Any]] = {}

    def plan(
        self,
        changes: list[Change],
        fetch: Callable[[list[str], set], dict],
        load: Callable[[], list[tuple[dict, int, int]]],
    ) -> Plan:
        first = next((c for c in changes if c.version is not None), None)
        if first is None:
            c = changes[0]
            raise MirrorDataError(
                f"{self.name}: tx_seq {c.tx_seq}: its rows name no schema document, "
                "so its columns and key are not known",
                hint="a redo source states them with `columns` on the table's ddl records (docs/formats.md); "
                "or leave the table out with --tables",
            )
        assert first.version is not None  # found by it
        doc = self.document(first.version)
        key = list(self.table_key) if self.table_key is not None else list(doc["key"])
        columns = dict(self.schema or [])
        state = _State(columns, key)
        rewrite = self.schema is None
        rewrite |= self._adopt(state, doc)
        rewrite |= not key
        rows: dict[Any, tuple[dict | None, int, int]] = {}
        full: dict[Any, tuple[dict | None, int, int]] | None = None
        keyless: dict[tuple, list[tuple[dict, int, int]]] | None = None

        # the rows the batch's updates build on, fetched in one go
        if not rewrite:
            wanted = set()
            for i, c in enumerate(changes):
                if c.op == "u" and c.version is not None:
                    d = self.document(c.version)
                    if d["key"] != key:
                        break
                    before, after = _loads(c.before), _loads(c.after)
                    if after is None or len(after) < len(d["columns"]):
                        k = self._key_of(key, state, c, before, after)
                        wanted.add(k)
                elif c.op == "d" and c.version is not None and i + 1 < len(changes):
                    d, n = self.document(c.version), changes[i + 1]
                    if d["key"] != key:
                        break
                    if (
                        n.op == "c"
                        and (n.tx_seq, n.op_seq) == (c.tx_seq, c.op_seq + 1)
                        and d["source"] == "postgresql"
                        and len(_loads(n.after) or {}) < len(d["columns"])
                    ):
                        wanted.add(self._key(key, self._typed(state, c, _loads(c.before), "before"), c, "before"))
            base = fetch(key, wanted) if wanted else {}
        else:
            base = {}

        def materialize() -> None:
            nonlocal full, keyless
            if state.key:
                full = {}
                if self.schema is not None:
                    for row, tx_seq, c_scn in load():
                        full[tuple(row.get(k) for k in state.key)] = (row, tx_seq, c_scn)
                for k, v in rows.items():
                    if v[0] is None:
                        full.pop(k, None)
                    else:
                        full[k] = v
            else:
                keyless = defaultdict(list)
                if self.schema is not None:
                    for row, tx_seq, c_scn in sorted(load(), key=lambda v: v[1]):
                        keyless[_whole(row, state.columns)].append((row, tx_seq, c_scn))

        if rewrite:
            materialize()
        count = 0
        last = -1
        events: list[tuple[str, Any, dict | None, Change]] = []
        removed: tuple[dict, int, int] | None = None  # the row the last delete removed, and that change
        version: str | None = None  # the schema version of the changes before
        for c in changes:
            last = c.tx_seq
            if c.version is not None and c.version != version:
                version = c.version
                d = self.document(c.version)
                state.document_columns = [col["name"] for col in d["columns"]]
                if d["key"] != state.key or self._changes_schema(state, d):
                    if full is None and keyless is None:
                        materialize()
                    old_key = state.key
                    self._adopt(state, d)
                    state.key = list(d["key"])
                    if state.key != old_key:
                        full, keyless = self._rekey(full, keyless, state)
            if c.op == "ddl":
                continue
            count += 1
            if c.op == "t":
                events.append(("truncate", None, None, c))
                rows.clear()
                full = {} if state.key else None
                keyless = None if state.key else defaultdict(list)
                continue
            before, after = _loads(c.before), _loads(c.after)
            if not state.key:
                self._keyless(keyless, state, c, before, after)
                continue
            target = full if full is not None else rows
            if c.op in ("c", "r"):
                # an update that changed the key, as PostgreSQL publishes it: the delete of
                # the old key, then the new row, whose unchanged TOASTed values it lacks
                was = (
                    removed[0]
                    if removed is not None
                    and removed[1:] == (c.tx_seq, c.op_seq - 1)
                    and c.version is not None
                    and self.document(c.version)["source"] == "postgresql"
                    else {}
                )
                row = self._row(state, c, was, None, after)
                k = self._key(state.key, row, c, "after")
                target[k] = (row, c.tx_seq, c.c_scn)
                events.append(("put", k, row, c))
            elif c.op == "d":
                image = self._typed(state, c, before, "before")
                k = self._key(state.key, image, c, "before")
                gone = target.get(k)
                if gone is None and full is None:
                    gone = base.get(k)
                removed = (gone[0] or {}, c.tx_seq, c.op_seq) if gone is not None else None
                target[k] = (None, c.tx_seq, c.c_scn)
                events.append(("close", k, None, c))
            elif c.op == "u":
                old = self._key_of(state.key, state, c, before, after)
                held = target.get(old)
                if held is None and full is None:
                    held = base.get(old)
                row = self._row(state, c, held[0] if held is not None and held[0] is not None else {}, before, after)
                new = self._key(state.key, row, c, "after")
                if new != old:
                    target[old] = (None, c.tx_seq, c.c_scn)
                    events.append(("close", old, None, c))
                target[new] = (row, c.tx_seq, c.c_scn)
                events.append(("put", new, row, c))
            else:
                raise MirrorDataError(f"{self.name}: tx_seq {c.tx_seq}, op_seq {c.op_seq}: unknown op {c.op!r}")
        columns_out = list(state.columns.items())
        self.schema, self.table_key = columns_out, list(state.key)
        if keyless is not None:
            flat = [v for group in keyless.values() for v in group]
            return Plan("rewrite", columns_out, [], flat, last, count, events)
        if full is not None:
            return Plan(
                "rewrite",
                columns_out,
                list(state.key),
                [(row, tx_seq, c_scn) for row, tx_seq, c_scn in full.values() if row is not None],
                last,
                count,
                events,
            )
        return Plan("merge", columns_out, list(state.key), rows, last, count, events)

    # -- helpers -----------------------------------------------------------------------

    def _changes_schema(self, state: _State, doc: dict) -> bool:
        return any(
            c["name"] not in state.columns or not same_type(state.columns[c["name"]], arrow_type(c["spark"]))
            for c in doc["columns"]
        )

    def _adopt(self, state: _State, doc: dict) -> bool:
        """Make ``doc``'s columns the table's (added ones appended, retyped ones take the
        new type, dropped ones stay); whether the table's columns changed."""
        changed = False
        for c in doc["columns"]:
            name = c["name"]
            if name in EXTRA:
                raise MirrorDataError(
                    f"{self.name}: has a column named {name}, which the mirror table adds itself",
                    hint="leave the table out with --tables",
                )
            t = arrow_type(c["spark"])
            if name not in state.columns:
                state.columns[name] = t
                changed = True
            elif not same_type(state.columns[name], t):
                state.columns[name] = t
                state.retyped.add(name)
                changed = True
        state.document_columns = [c["name"] for c in doc["columns"]]
        return changed

    def _rekey(self, full, keyless, state: _State):
        rows = list(full.values()) if full is not None else [v for g in (keyless or {}).values() for v in g]
        if state.key:
            return {tuple(r.get(k) for k in state.key): (r, t, s) for r, t, s in rows if r is not None}, None
        out: dict[tuple, list] = defaultdict(list)
        for r, t, s in rows:
            if r is not None:
                out[_whole(r, state.columns)].append((r, t, s))
        return None, out

    def _typed(self, state: _State, c: Change, image: dict | None, label: str) -> dict:
        out = {}
        converters = self._converters
        for name, v in (image or {}).items():
            t = state.columns.get(name)
            if t is None:
                continue  # a column the document does not have (it was dropped since): not the table's
            convert = converters.get((name, t))
            if convert is None:
                convert = converters[(name, t)] = converter(t)
            try:
                out[name] = convert(v)
            except Misfit as exc:
                text = v if isinstance(v, str) else json.dumps(v, default=str)
                raise MirrorDataError(
                    f"{self.name}: tx_seq {c.tx_seq}, op_seq {c.op_seq}: {label} column {json.dumps(name)} = "
                    f"'{text[:100]}' does not fit {t} ({exc})",
                    hint="the schema document states the column's type: the source sent a value of another",
                ) from None
        return out

    def _row(self, state: _State, c: Change, was: dict, before: dict | None, after: dict | None) -> dict:
        row = {name: was.get(name) for name in state.document_columns}
        row.update((k, v) for k, v in self._typed(state, c, before, "before").items() if k in row)
        row.update((k, v) for k, v in self._typed(state, c, after, "after").items() if k in row)
        return row

    def _key(self, key: list[str], image: dict, c: Change, label: str) -> tuple:
        k = tuple(image.get(name) for name in key)
        if any(v is None for v in k):
            raise self._no_key(c, key, label)
        return k

    def _key_of(self, key: list[str], state: _State, c: Change, before: dict | None, after: dict | None) -> tuple:
        """An update's old key: from ``before``, or (what it lacks) from ``after``."""
        b = self._typed(state, c, {k: before[k] for k in key if k in before} if before else None, "before")
        if all(b.get(k) is not None for k in key):
            return tuple(b[k] for k in key)
        a = self._typed(state, c, {k: after[k] for k in key if k in after} if after else None, "after")
        merged = {**a, **{k: v for k, v in b.items() if v is not None}}
        if all(merged.get(k) is not None for k in key):
            return tuple(merged[k] for k in key)
        raise self._no_key(c, key, "before")

    def _no_key(self, c: Change, key: list[str], label: str) -> MirrorDataError:
        return MirrorDataError(
            f"{self.name}: tx_seq {c.tx_seq}, op_seq {c.op_seq}: a {c.op!r} change without its key column(s) "
            f"{', '.join(key)} in {label}",
            hint="the source must log the key columns with every change (Oracle: ADD SUPPLEMENTAL LOG DATA "
            "(PRIMARY KEY) COLUMNS)",
        )

    def _keyless(self, keyless, state: _State, c: Change, before: dict | None, after: dict | None) -> None:
        if c.op in ("u", "d"):
            if before is None or any(name not in before for name in state.document_columns):
                raise MirrorDataError(
                    f"{self.name}: has no key, and its {c.op!r} change at tx_seq {c.tx_seq}, op_seq {c.op_seq} "
                    "does not carry the whole row in before",
                    hint="give the table a primary key, or have the source log whole rows: PostgreSQL ALTER TABLE "
                    f"{self.name} REPLICA IDENTITY FULL; Oracle ADD SUPPLEMENTAL LOG DATA (ALL) COLUMNS",
                )
            old = self._row(state, c, {}, before, None)
            group = keyless.get(_whole(old, state.columns))
            if group:
                group.pop(0)  # the oldest of the rows equal to it
            if c.op == "d":
                return
            row = self._row(state, c, old, None, after)
        else:
            row = self._row(state, c, {}, None, after)
        keyless[_whole(row, state.columns)].append((row, c.tx_seq, c.c_scn))


def _whole(row: dict, columns: Iterable[str]) -> tuple:
    return tuple(_hashable(row.get(name)) for name in columns)


def _hashable(v: Any) -> Any:
    return tuple(_hashable(x) for x in v) if isinstance(v, list) else v
