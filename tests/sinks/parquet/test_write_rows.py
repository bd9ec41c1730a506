"""The flat batch path of the changefeed writer (``write_rows``, behind
``write_transactions``) writes exactly what ``write_transaction`` writes for each
transaction in turn: the same files, the same rows, the same footers."""

from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from olr_buffer.changes import DELETE, INSERT, Commit, CommitKey, rows_to_columns
from olr_buffer.sinks.parquet.errors import ChangefeedError
from olr_buffer.sinks.parquet.writer import ChangefeedWriter


def _row(scn: int, i: int) -> list:
    code = INSERT if i % 3 else DELETE
    after = None if code == DELETE else f'{{"I":{i},"S":"{"y" * (i % 11)}"}}'
    return [
        code,
        scn,
        i,
        1,
        i,
        None if i % 4 == 0 else scn * 7,
        "O",
        "T",
        None if i % 5 == 0 else 9,
        f"R{i}",
        f'{{"I":{i}}}' if code == DELETE else None,
        after,
        None,
    ]


def _files(cf: Path) -> list[tuple[str, dict, list]]:
    out = []
    for p in sorted(cf.glob("part-*.parquet")):
        f = pq.ParquetFile(p)
        meta = {k: v for k, v in f.metadata.metadata.items() if not k.startswith(b"ARROW")}
        out.append((p.name, meta, f.read().to_pylist()))
    return out


@settings(max_examples=40, deadline=None)
@given(
    txs=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 3), st.booleans()), max_size=30),
    cuts=st.lists(st.integers(1, 8), max_size=10),
    file_rows=st.integers(1, 40),
    row_group_rows=st.integers(1, 12),
    row_group_bytes=st.sampled_from([1, 3000, 1 << 40]),
    chunk=st.integers(1, 4),
)
def test_write_rows_equals_write_transaction_per_transaction(
    txs, cuts, file_rows, row_group_rows, row_group_bytes, chunk
):
    """Also for transactions of several threads: ``write_rows`` takes a list of each row's
    thread, ``write_transaction`` chunks of one thread's rows."""
    items = []
    for k, (n, thread, several) in enumerate(txs):
        scn = 10 * (k + 1)
        threads = [thread if not several or i % 3 else thread % 3 + 1 for i in range(n)]
        items.append(
            (
                Commit(f"x{k}", CommitKey(scn, thread, 1, k), None if k % 3 == 0 else scn * 1000),
                threads,
                [_row(scn, i) for i in range(n)],
            )
        )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        limits = dict(
            file_rows=file_rows, row_group_rows=row_group_rows, row_group_bytes=row_group_bytes, durable=False
        )
        one = ChangefeedWriter(root / "one", **limits)
        one_cols = ChangefeedWriter(root / "one_cols", **limits)  # every other chunk as columns
        for commit, threads, rows in items:
            chunks = []  # runs of one thread's rows, cut every `chunk` rows
            for i, (thread, row) in enumerate(zip(threads, rows)):
                if not chunks or chunks[-1][0] != thread or i % chunk == 0:
                    chunks.append((thread, []))
                chunks[-1][1].append(row)
            assert one.write_transaction(commit, chunks) == len(rows)
            mixed = [(t, rows_to_columns(r) if i % 2 == 0 else r) for i, (t, r) in enumerate(chunks)]
            assert one_cols.write_transaction(commit, mixed) == len(rows)
        one.close()
        one_cols.close()
        flat = ChangefeedWriter(root / "flat", **limits)
        flat_cols = ChangefeedWriter(root / "flat_cols", **limits)  # every other group as columns
        it = iter(items)
        for k, size in enumerate(itertools.chain(cuts, itertools.repeat(5))):
            group = list(itertools.islice(it, size))
            if not group:
                break
            single = [(c, threads[0], rows) for c, threads, rows in group if rows and len(set(threads)) == 1]
            txs_ = [
                (c.xid, c.key, c.tm, threads[0] if len(set(threads)) == 1 else threads, len(rows))
                for c, threads, rows in group
                if rows
            ]
            flat_rows = [r for _, _, rows in group for r in rows]
            if len(single) == sum(1 for _, _, rows in group if rows):
                assert flat.write_transactions(single) == [len(rows) for _, _, rows in single]
            else:  # write_rows itself, with a list of threads for some
                flat.write_rows(flat_rows, txs_)
            if txs_ and k % 2 == 0:
                flat_cols.write_columns(rows_to_columns(flat_rows), txs_)
            elif txs_:
                flat_cols.write_rows(flat_rows, txs_)
        n = sum(1 for _, _, rows in items if rows)
        assert flat.next_tx_seq == one.next_tx_seq == one_cols.next_tx_seq == flat_cols.next_tx_seq == n
        flat.close()
        flat_cols.close()
        a, b = _files(root / "one"), _files(root / "flat")
        assert a == b
        assert _files(root / "one_cols") == a
        assert _files(root / "flat_cols") == a
        assert sum(len(rows) for _, _, rows in a) == sum(len(rows) for _, _, rows in items)


def test_a_row_queued_without_an_owner_is_published_with_the_empty_owner(tmp_path):
    """A queue filled by an OpenLogReplicator receiver that kept a missing ``schema.owner``
    as null (its schemaless mode, an object it could not name) publishes: the changefeed's
    ``owner`` is never null, and the source named none: the empty string."""
    cf = tmp_path / "cf"
    w = ChangefeedWriter(cf, durable=False)
    rows = [
        [INSERT, 10, 0, 1, 1, None, None, "OBJ_87705", None, None, None, '{"COL_0":"53544f50"}', None],
        [INSERT, 10, 0, 1, 2, None, "HR", "EMP", None, None, None, '{"ID":1}', None],
    ]
    w.write_rows(rows, [("0x1.2.3", CommitKey(12, 1, 0, 3), None, 1, 2)])
    f = w.flush()
    w.close()
    assert f is not None and f.rows == 2
    got = pq.read_table(cf / f.name, columns=["owner", "table"]).to_pylist()
    assert got == [{"owner": "", "table": "OBJ_87705"}, {"owner": "HR", "table": "EMP"}]


def test_a_row_with_more_fields_than_the_format_has_is_one_error_line():
    """A row of more fields than a record has (a queue of a later format) stops the writer
    with one line that says so; rows of 13, 14 and 15 fields (with a schema version, and
    its document) together are the ordinary case."""
    with tempfile.TemporaryDirectory() as d:
        w = ChangefeedWriter(str(Path(d) / "cf"))
        row = _row(5, 1) + [None, None, "extra"]
        with pytest.raises(ChangefeedError) as exc:
            w.write_transaction(Commit("x", CommitKey(9, 1, 0, 0), None), [(1, [_row(5, 0), row])])
            w.flush()
        assert "a row has 16 fields; this olr-buffer knows 15" in str(exc.value)
        assert "\n" not in str(exc.value)
        w.abandon()
