"""The changefeed's disk fills (a small tmpfs; root only, skipped otherwise): the run
stops cleanly with no half-published file, and resumes once there is room.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from olr_buffer.changes import INSERT, CommitKey
from olr_buffer.sinks.parquet.errors import ChangefeedError
from olr_buffer.sinks.parquet.writer import ChangefeedWriter
from tests.cli.conftest import ok
from tests.contract_model import ModelResult
from tests.fault_helpers import (
    FULL_ARGS,
    big_base,  # noqa: F401 (a fixture the tests request by name)
    big_model,  # noqa: F401 (a fixture the tests request by name)
    exact,
    grow,
    no_tmp_files,
    one_line_error,
    part_bytes,
    published_prefix,
    replay,
    tmpfs,
)

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`


def test_changefeed_disk_full_stops_cleanly_and_resumes(big_base: Path, big_model: ModelResult, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(cf, "400k"):
        failed = replay(big_base, q, cf, *FULL_ARGS)
        line = one_line_error(failed, "no space left on device", "hint:")
        assert str(cf) in line, line
        no_tmp_files(cf)
        published = published_prefix(cf, big_model)
        assert 0 < published < big_model.committed, published
        before = part_bytes(cf)
        grow(cf)
        done = ok(replay(big_base, q, cf, *FULL_ARGS, "--json")).json()
        exact(cf, big_model)
        after = part_bytes(cf)
        assert {n: after.get(n) for n in before} == before, "a published file changed"
        assert done["next_tx_seq"] == big_model.committed
        # and once more: nothing to do
        again = ok(replay(big_base, q, cf, *FULL_ARGS, "--json")).json()
        assert again["transactions_published"] == 0
        exact(cf, big_model)


def test_a_row_group_that_fails_in_the_background_stops_the_writer_with_one_line(tmp_path: Path) -> None:
    """Row groups are written by a thread of their own while the dispatcher goes on: a
    write that fails there (the disk is full) is raised by the writer's next call as the
    same one-line error, the open file is dropped whole, and what was published stays."""
    rnd = random.Random(3)
    cf = tmp_path / "cf"

    def tx(scn: int, rows: int) -> tuple[list[list], list[tuple]]:
        images = ['{{"V":"{}"}}'.format("".join(rnd.choice("abcdefghij") for _ in range(200))) for _ in range(rows)]
        recs = [
            [INSERT, scn + i, 0, 1, scn + i, None, "O", "T", None, f"R{scn + i}", None, images[i], None]
            for i in range(rows)
        ]
        return recs, [(f"X{scn}", CommitKey(scn + rows, 1, 1, scn + rows), None, 1, rows)]

    with tmpfs(cf, "300k"):
        w = ChangefeedWriter(cf, file_rows=1_000_000, row_group_rows=50, durable=False)
        w.write_rows(*tx(10, 3))
        first = w.flush()
        assert first is not None and first.last == 0
        scn, error = 100, None
        for _ in range(400):  # 400 transactions of 10 rows in one open file: about 1 MB that hardly compresses
            try:
                w.write_rows(*tx(scn, 10))
            except ChangefeedError as exc:
                error = exc
                break
            scn += 20
        else:
            pytest.fail("the changefeed's 300k never filled")
        line = str(error)
        assert "no space left on device writing the changefeed" in line and "\n" not in line, line
        no_tmp_files(cf)
        # the open file was dropped whole: the writer goes on from the first transaction it held
        assert sorted(n for n in os.listdir(cf) if n.startswith("part-")) == [first.name]
        assert w.next_tx_seq == 1 and w.buffered_rows == 0
        assert pq.read_table(cf / first.name).num_rows == 3
        grow(cf)
        w.write_rows(*tx(scn + 100, 2))
        again = w.flush()
        assert again is not None and (again.first, again.last, again.rows) == (1, 1, 2)
        w.close()
