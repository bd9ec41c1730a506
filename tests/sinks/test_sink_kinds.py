"""The runtime builds its sink through the sink table: the kind named in the options, with
that kind's own options object and defaults, from the changefeed options given."""

from __future__ import annotations

from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sinks import KINDS, UnknownSinkError, kind_named
from olr_buffer.sinks.parquet import DEFAULT_FILE_ROWS, DEFAULT_MODE, ParquetOptions


def test_the_parquet_kind_takes_its_own_options_and_keeps_its_defaults():
    kind = KINDS["parquet"]
    assert kind.options({}) == ParquetOptions() == ParquetOptions(DEFAULT_FILE_ROWS, DEFAULT_MODE, None)
    # the changefeed options by their names in replay and run; one not given (None) keeps the
    # default; one the kind does not take is ignored
    opts = kind.options({"file_rows": 5, "changefeed_mode": 0o750, "table_format": None, "slot": "x"})
    assert opts == ParquetOptions(file_rows=5, mode=0o750, table_format=None)


def test_a_sink_kind_not_in_the_table_is_refused_in_one_line_and_nothing_is_left(tmp_path: Path):
    simulate(tmp_path / "in", threads=1, transactions=5, seed=3, records_per_file=100, compress_archived=False)
    with pytest.raises(UnknownSinkError) as err:
        replay(
            str(tmp_path / "in"),
            str(tmp_path / "q"),
            str(tmp_path / "cf"),
            PipelineOptions(sink="kafka", durable=False),
        )
    assert str(err.value) == "kafka: not a kind of sink olr-buffer writes (one of: parquet)"
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()
    assert kind_named("parquet") is KINDS["parquet"]


def test_the_changefeed_options_reach_the_parquet_sink(tmp_path: Path):
    simulate(tmp_path / "in", threads=2, transactions=60, seed=5, records_per_file=200, compress_archived=False)
    replay(
        str(tmp_path / "in"),
        str(tmp_path / "q"),
        str(tmp_path / "cf"),
        PipelineOptions(file_rows=40, changefeed_mode=0o750, durable=False),
    )
    replay(str(tmp_path / "in"), str(tmp_path / "q2"), str(tmp_path / "cf2"), PipelineOptions(durable=False))
    assert len(list((tmp_path / "cf").rglob("*.parquet"))) > 1  # cut at about 40 rows
    assert len(list((tmp_path / "cf2").rglob("*.parquet"))) == 1  # the default: a million rows a file
    assert (tmp_path / "cf").stat().st_mode & 0o777 == 0o750
    assert (tmp_path / "cf2").stat().st_mode & 0o777 == DEFAULT_MODE
