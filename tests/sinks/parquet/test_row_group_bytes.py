"""The changefeed writer bounds a row group in bytes of row images as well as in rows:
same rows, same values, only the row-group boundaries differ."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.sinks.parquet.writer import ChangefeedWriter


def _row(scn: int, i: int) -> list:
    return [2, scn, 0, 1, i, None, "O", "T", 7, f'{{"ID":{i}}}', None, f'{{"ID":{i},"S":"{"x" * (i % 97)}"}}', None]


def _write(cf: Path, **limits) -> None:
    writer = ChangefeedWriter(cf, durable=False, file_rows=100_000, **limits)
    # one large transaction streamed row by row, then many small ones at once, then a large one at once
    big = Commit("big", CommitKey(10, 1, 1, 10), 1_000)
    assert writer.write_transaction(big, ((1, [_row(10, i)]) for i in range(20_000))) == 20_000
    items = [
        (Commit(f"s{k}", CommitKey(20 + k, 1, 1, 20 + k), None), 1, [_row(20 + k, i) for i in range(50)])
        for k in range(200)
    ]
    items.append((Commit("big2", CommitKey(500, 1, 1, 500), 2_000), 2, [_row(500, i) for i in range(15_000)]))
    assert writer.write_transactions(items) == [50] * 200 + [15_000]
    writer.flush()
    writer.close()


def test_row_groups_are_bounded_in_bytes_and_the_rows_are_the_same(tmp_path: Path) -> None:
    _write(tmp_path / "rows", row_group_bytes=1 << 62)  # rows only
    _write(tmp_path / "bytes", row_group_bytes=256 << 10)
    (rows_file,) = sorted((tmp_path / "rows").glob("part-*.parquet"))
    (bytes_file,) = sorted((tmp_path / "bytes").glob("part-*.parquet"))
    assert pq.read_table(bytes_file).equals(pq.read_table(rows_file))
    assert pq.ParquetFile(rows_file).metadata.num_row_groups == 1  # 45,000 rows < 65,536
    meta = pq.ParquetFile(bytes_file).metadata
    assert meta.num_row_groups >= 5
    table = pq.read_table(bytes_file, columns=["rid", "before", "after"])
    start = 0
    for g in range(meta.num_row_groups):
        n = meta.row_group(g).num_rows
        part = table.slice(start, n)
        image = sum(len(v) for c in part.columns for v in c.to_pylist() if v is not None)
        # a group closes once it reaches the bound, looked at every 4,096 rows at most
        assert image < (256 << 10) + 4096 * 200
        start += n
