"""``replay``'s options on the Spark path: each one honoured as the one-process replay
honours it (the changefeed the same), or refused up front in one line."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from olr_buffer.errors import OlrBufferError
from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.spark import replay_on_spark
from tests.contract_model import assert_changefeed_equal, load_changefeed

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def _modes(cf: Path) -> set[tuple[bool, int]]:
    """(is a directory, permission bits) of the changefeed directory and all under it."""
    paths = [cf, *cf.rglob("*")]
    return {(p.is_dir(), stat.S_IMODE(p.stat().st_mode)) for p in paths}


def test_changefeed_mode(spark, tmp_path):
    """--changefeed-mode 0750: the Spark job's changefeed has the modes replay gives it
    (the directory 0750, its files 0640, its own metadata 0700/0600), and the same rows."""
    simulate(tmp_path / "in", threads=2, transactions=40, seed=3, records_per_file=100)
    replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions(changefeed_mode=0o750))
    replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q2"), str(tmp_path / "cf2"), changefeed_mode=0o750)
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), load_changefeed(tmp_path / "cf1"))
    assert _modes(tmp_path / "cf2") == _modes(tmp_path / "cf1")
    assert stat.S_IMODE((tmp_path / "cf2").stat().st_mode) == 0o750
    assert {stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "cf2").glob("part-*")} == {0o640}


def test_iceberg_catalog_and_table(spark, tmp_path):
    """--table-format iceberg --iceberg-catalog URI --iceberg-table NS.NAME: the Spark job's
    changefeed is an Iceberg table of that name in that catalog, holding replay's rows."""
    from pyiceberg.catalog.sql import SqlCatalog

    from tests.test_changefeed_iceberg import sorted_rows, table_files

    simulate(tmp_path / "in", threads=2, transactions=40, seed=4, records_per_file=100)
    replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions(file_rows=200))
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}"
    replay_on_spark(
        spark,
        str(tmp_path / "in"),
        str(tmp_path / "q2"),
        str(tmp_path / "cf2"),
        file_rows=200,
        table_format="iceberg",
        iceberg_catalog=catalog,
        iceberg_table="lake.cdc",
    )
    expected = load_changefeed(tmp_path / "cf1")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), expected)
    table = SqlCatalog("olr_buffer", uri=catalog).load_table("lake.cdc")
    assert_changefeed_equal(sorted_rows(table.scan().to_arrow()), expected)
    assert table_files(table) == sorted(p.name for p in (tmp_path / "cf2").glob("part-*.parquet"))


def _killed_process_replay(tmp_path: Path) -> None:
    """replay into cf, killed (SIGKILL) after its second file is published."""
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "replay", str(tmp_path / "in"), "--queue", str(tmp_path / "q1"),
         "--changefeed", str(tmp_path / "cf"), "--file-rows", "50", "--no-sync"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OLR_BUFFER_FAULT": "after_rename:2"},
    )  # fmt: skip
    assert r.returncode == -9, r.stderr[-2000:]


def test_adopt_changefeed(spark, tmp_path):
    """A replay killed midway, its queue lost: the Spark job on a queue of its own takes
    the changefeed over only with adopt_changefeed (--adopt-changefeed), and finishes it
    as one replay of the whole."""
    simulate(tmp_path / "in", threads=3, transactions=80, seed=6, records_per_file=150)
    replay(str(tmp_path / "in"), str(tmp_path / "qw"), str(tmp_path / "whole"), PipelineOptions(durable=False))
    expected = load_changefeed(tmp_path / "whole")
    _killed_process_replay(tmp_path)
    before = load_changefeed(tmp_path / "cf")
    assert 0 < len(before) < len(expected)
    with pytest.raises(OlrBufferError, match="--adopt-changefeed"):
        replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "qs"), str(tmp_path / "cf"))
    assert load_changefeed(tmp_path / "cf") == before
    got = replay_on_spark(
        spark, str(tmp_path / "in"), str(tmp_path / "qs"), str(tmp_path / "cf"), adopt_changefeed=True
    )
    assert got.already_published > 0
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected)


@pytest.mark.parametrize(
    "option",
    [
        ("--segment-size", "1MiB"),
        ("--block-records", "10"),
        ("--checkpoint-interval", "1"),
        ("--retain-segments", "1"),
        ("--retain-age", "1"),
        ("--transaction-retention", "60"),
        ("--transaction-retention-scn", "100"),
        ("--progress-interval", "1"),
    ],
    ids=lambda o: o[0],
)
def test_an_option_spark_does_not_honour_is_refused(tmp_path, option):
    """An option of replay's that the Spark job has no use for (its queue's, retention's,
    the periodic progress line's): one line, exit 2, before any Spark session or file."""
    simulate(tmp_path / "in", threads=1, transactions=3, seed=1)
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "replay", str(tmp_path / "in"), "--queue", str(tmp_path / "q"),
         "--changefeed", str(tmp_path / "cf"), "--engine", "spark", *option],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert f"{option[0]} does not apply to --engine spark" in r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "cf").exists() and not (tmp_path / "q").exists()


def test_master_needs_the_spark_engine(tmp_path):
    simulate(tmp_path / "in", threads=1, transactions=3, seed=1)
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "replay", str(tmp_path / "in"), "--queue", str(tmp_path / "q"),
         "--changefeed", str(tmp_path / "cf"), "--master", "local[2]"],
        capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2 and "--master goes with --engine spark" in r.stderr
    assert not (tmp_path / "cf").exists()
