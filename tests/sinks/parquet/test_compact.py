"""Compaction: into another directory (safe with readers), and in place (only when told no
reader runs), with the same rows, valid names and footers, and a writer that carries on."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from olr_buffer.cli import main
from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.sinks.parquet import ChangefeedCorruptError, ChangefeedWriter
from olr_buffer.sinks.parquet import compaction as compact_mod
from olr_buffer.sinks.parquet.compaction import CompactionError, compact, published_files, read_footer
from olr_buffer.spark import read_changefeed
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, load_changefeed
from tests.fault_helpers import flip_a_data_byte, tmp_files, top_level_parquet

from .workload import Workload, part_files, publish, spark_rows, transactions


@pytest.fixture
def copied(workload, tmp_path) -> Workload:
    return workload.copy(tmp_path)


def _footers_valid(path: Path) -> list:
    """Every part file's footer agrees with its name and its rows; the list of them."""
    files = published_files(str(path))
    for f in files:
        meta = pq.read_metadata(path / f.name)
        assert meta.num_rows == f.rows
        assert all(meta.row_group(i).num_rows <= 65_536 for i in range(meta.num_row_groups))
    return files


def _more_transactions(writer: ChangefeedWriter, workload: Workload, n: int = 3) -> int:
    """Append ``n`` transactions after the last one (copies of the first ones, renumbered,
    with commit keys after the last)."""
    start = writer.next_tx_seq
    c_scn = writer.last_commit.scn
    for i, tx in enumerate(transactions(workload.expected.rows)[:n]):
        publish(writer, [dict(r, tx_seq=start + i, c_scn=c_scn + 1 + i) for r in tx])
    writer.flush()
    return writer.next_tx_seq


@pytest.mark.spark
def test_compact_to_output_keeps_every_row(spark, copied, tmp_path):
    src, out = copied.changefeed, tmp_path / "compacted"
    before = part_files(src)
    result = compact(src, output=out, target_rows=1000)
    assert len(part_files(out)) == result.files_after < len(before) / 2
    assert part_files(src) == before  # the source is left alone
    check_changefeed_layout(out)
    files = _footers_valid(out)
    for f, group in zip(files, result.groups):  # merged files stay within the target
        assert f.name == f"part-{group[0][5:25]}-{group[-1][26:46]}.parquet"
        assert len(group) == 1 or f.rows <= 1000
    # what readers get: Spark's rows equal the source's, row by row
    assert_changefeed_equal(spark_rows(read_changefeed(spark, str(out))), copied.expected.rows)
    # the last commit key is kept: replay of the same queue into it publishes nothing
    summary = replay(str(copied.input), str(copied.queue), str(out), PipelineOptions(file_rows=200, durable=False))
    assert summary.transactions_published == 0
    assert summary.next_tx_seq == copied.expected.committed
    # the writer reopens it and carries on
    writer = ChangefeedWriter(out, durable=False)
    assert writer.next_tx_seq == copied.expected.committed
    assert writer.last_commit == read_footer(str(src), before[-1]).last_commit
    assert _more_transactions(writer, copied) == copied.expected.committed + 3
    check_changefeed_layout(out)
    manifest = json.loads((out / "_olr_buffer" / "manifest.json").read_text())
    assert manifest["next_tx_seq"] == copied.expected.committed + 3


def test_compact_to_output_again_appends_only(workload, tmp_path):
    """The output is a changefeed of its own: later runs add files, never touch old ones."""
    src, out = tmp_path / "src", tmp_path / "out"
    txs = transactions(workload.expected.rows)
    writer = ChangefeedWriter(src, file_rows=60, durable=False)
    for tx in txs[:150]:
        publish(writer, tx)
    writer.flush()
    first = compact(src, output=out, target_rows=300, full_groups_only=True)
    kept = {n: os.stat(out / n).st_ino for n in part_files(out)}
    assert first.files_written == len(kept) >= 2
    assert first.next_tx_seq < 150  # the last, smaller run waits for more
    for tx in txs[150:]:
        publish(writer, tx)
    writer.close()
    second = compact(src, output=out, target_rows=300)
    assert second.files_before < len(part_files(src))
    assert {n: os.stat(out / n).st_ino for n in kept} == kept
    check_changefeed_layout(out)
    assert_changefeed_equal(load_changefeed(out), workload.expected.rows)
    assert compact(src, output=out, target_rows=300).files_written == 0
    # another changefeed's compaction is refused
    other = tmp_path / "other"
    w = ChangefeedWriter(other, durable=False)
    publish(w, [dict(r, c_scn=1) for r in txs[0]])
    w.close()
    with pytest.raises(CompactionError, match="not a compaction of"):
        compact(other, output=out)


def test_compact_output_must_be_apart(copied, tmp_path):
    with pytest.raises(CompactionError, match="another directory"):
        compact(copied.changefeed, output=copied.changefeed)
    with pytest.raises(CompactionError, match="must not be inside"):
        compact(copied.changefeed, output=copied.changefeed / "small")
    with pytest.raises(CompactionError, match="must not be inside"):
        compact(copied.changefeed, output=tmp_path)


def test_in_place_is_refused_without_the_promise(copied):
    before = part_files(copied.changefeed)
    runner = CliRunner()
    res = runner.invoke(main, ["compact", str(copied.changefeed), "--in-place"])
    assert res.exit_code == 2  # a promise missing from the command line: usage, in one line
    assert res.output.startswith("olr-buffer: error: ") and res.output.count("\n") == 1, res.output
    assert "refusing to compact in place" in res.output and "--output DIR" in res.output
    res = runner.invoke(main, ["compact", str(copied.changefeed)])
    assert res.exit_code == 2 and "--output DIR" in res.output
    assert part_files(copied.changefeed) == before


def test_in_place_with_the_promise(copied):
    cf = copied.changefeed
    before = part_files(cf)
    manifest = json.loads((cf / "_olr_buffer" / "manifest.json").read_text())
    manifest["run_from"] = {"1": 7, "2": 5}  # (what a redo changefeed records: kept)
    (cf / "_olr_buffer" / "manifest.json").write_text(json.dumps(manifest))
    res = CliRunner().invoke(
        main, ["compact", str(cf), "--in-place", "--i-know-no-reader-is-running", "--target-rows", "1000", "--dry-run"]
    )
    assert res.exit_code == 0, res.output
    assert "would write" in res.output and part_files(cf) == before
    res = CliRunner().invoke(
        main, ["compact", str(cf), "--in-place", "--i-know-no-reader-is-running", "--target-rows", "1000", "--json"]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    after = part_files(cf)
    assert len(after) == summary["files_after"] < len(before) / 2
    assert not [n for n in os.listdir(cf) if n.startswith(".")]
    check_changefeed_layout(cf)
    _footers_valid(cf)
    assert_changefeed_equal(load_changefeed(cf), copied.expected.rows)
    log = (cf / "_olr_buffer" / "compactions.jsonl").read_text().splitlines()
    assert len(log) == summary["files_written"]
    assert json.loads((cf / "_olr_buffer" / "manifest.json").read_text())["run_from"] == {"1": 7, "2": 5}
    writer = ChangefeedWriter(cf, durable=False)
    assert writer.next_tx_seq == copied.expected.committed
    assert _more_transactions(writer, copied) == copied.expected.committed + 3
    check_changefeed_layout(cf)
    # a second run has nothing left to merge below the target but the new small file
    again = compact(cf, in_place=True, no_reader_running=True, target_rows=1000)
    assert again.files_after <= len(after)


class _Crash(Exception):
    pass


@pytest.mark.parametrize("where", ["before_rename", "after_rename"])
def test_in_place_interrupted_then_finished(copied, monkeypatch, where):
    cf = copied.changefeed
    if where == "before_rename":

        def crash(*args, **kwargs):
            raise _Crash

        monkeypatch.setattr(compact_mod, "_publish", crash)
    else:
        real_publish = compact_mod._publish

        def crash(path, f, opts):
            real_publish(path, f, opts)  # the merged file is visible, the old ones still there
            raise _Crash

        monkeypatch.setattr(compact_mod, "_publish", crash)
    with pytest.raises(_Crash):
        compact(cf, in_place=True, no_reader_running=True, target_rows=1000)
    monkeypatch.undo()
    assert (cf / "_olr_buffer" / "compaction.json").exists()
    if where == "before_rename":
        # the merged file waits out of sight of every *.parquet glob (DuckDB's and Polars'
        # match dot-files): cf/*.parquet reads each row once
        (temp,) = tmp_files(cf)
        assert re.fullmatch(r"_olr_buffer/tmp/compact-part-[0-9]{20}-[0-9]{20}\.parquet\.tmp", temp), temp
        assert top_level_parquet(cf) == part_files(cf)
        # the old files are intact: the changefeed is as it was, the writer opens it
        assert_changefeed_equal(load_changefeed(cf), copied.expected.rows)
        assert ChangefeedWriter(cf, durable=False).next_tx_seq == copied.expected.committed
        assert not tmp_files(cf)  # the writer deleted it
    else:
        # the merged file overlaps the files it replaces: the writer refuses until the
        # compaction is run again
        with pytest.raises(ChangefeedCorruptError, match="gap or overlap"):
            ChangefeedWriter(cf, durable=False)
    result = compact(cf, in_place=True, no_reader_running=True, target_rows=1000)
    assert result.recovered
    assert not (cf / "_olr_buffer" / "compaction.json").exists()
    check_changefeed_layout(cf)
    assert_changefeed_equal(load_changefeed(cf), copied.expected.rows)
    assert ChangefeedWriter(cf, durable=False).next_tx_seq == copied.expected.committed


def test_output_interrupted_before_the_rename_then_finished(copied, tmp_path, monkeypatch):
    out = tmp_path / "out"
    real_publish = compact_mod._publish
    published = []

    def crash(path, f, opts):
        if published:
            raise _Crash
        real_publish(path, f, opts)
        published.append(f.name)

    monkeypatch.setattr(compact_mod, "_publish", crash)
    with pytest.raises(_Crash):
        compact(copied.changefeed, output=out, target_rows=300)
    monkeypatch.undo()
    (temp,) = tmp_files(out)
    assert temp.startswith("_olr_buffer/tmp/compact-part-") and temp.endswith(".parquet.tmp")
    assert top_level_parquet(out) == part_files(out) == published
    compact(copied.changefeed, output=out, target_rows=300)
    assert not tmp_files(out)
    check_changefeed_layout(out)
    assert_changefeed_equal(load_changefeed(out), copied.expected.rows)


def test_a_damaged_file_is_not_merged(copied, tmp_path):
    """Compaction reads every page with its checksum verified: damage is refused, naming
    the file, instead of going into a merged file under new, valid checksums."""
    cf, out = copied.changefeed, tmp_path / "out"
    middle = cf / part_files(cf)[len(part_files(cf)) // 2]
    flip_a_data_byte(middle)
    for kwargs in ({"output": out}, {"in_place": True, "no_reader_running": True}):
        with pytest.raises(ChangefeedCorruptError, match=rf"^{re.escape(str(middle))}: damaged data: .*CRC"):
            compact(cf, target_rows=1_000_000, **kwargs)
    assert not tmp_files(cf) and not tmp_files(out)
    assert middle.name in part_files(cf) and not part_files(out)


def test_cli_compact_to_output(copied, tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["compact", str(copied.changefeed), "--output", str(out), "--target-rows", "2000"])
    assert res.exit_code == 0, res.output
    assert f"holds tx_seq 0..{copied.expected.committed - 1} in {len(part_files(out))} file(s)" in res.output
    assert_changefeed_equal(load_changefeed(out), copied.expected.rows)
