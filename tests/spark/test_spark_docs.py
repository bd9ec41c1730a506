"""docs/spark.md runs as written: every Python block, in order, in one namespace, on the
changefeed the page describes. The Delta block is left out (it needs delta-spark, and says
so), and so is the `typed` block (it reads a PostgreSQL source's changefeed, and says so:
tests/postgres/test_pg_spark.py reads one). The page's relative paths (``"cf"``, ``"lake/…"``) are put under a temporary
directory: Spark resolves them against its JVM's directory, which a test cannot change."""

from __future__ import annotations

import contextlib
import io
import re
import textwrap
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sinks.parquet.compaction import compact

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"
_BLOCK = re.compile(r"^( *)```python\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
_PATH = re.compile(r'"(cf|cf-compacted|lake/|in(?=")|q-spark)')


def python_blocks() -> list[str]:
    return [textwrap.dedent(m.group(2)) for m in _BLOCK.finditer(DOC.read_text(encoding="utf-8"))]


def test_the_page_has_the_blocks_it_shows():
    blocks = python_blocks()
    assert len(blocks) >= 8
    assert sum("requires delta-spark" in b for b in blocks) == 1


def test_every_python_block_runs_as_written(spark, tmp_path):
    # the page's shell commands: simulate, replay, compact --output
    stats = simulate(
        tmp_path / "in", threads=2, transactions=60, seed=5, records_per_file=150, start_tm=1_717_200_000_000_000_000
    )
    assert (stats.emitted, stats.emitted_rows) == (54, 881)
    replay(
        str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(file_rows=10, durable=False)
    )
    compact(str(tmp_path / "cf"), output=str(tmp_path / "cf-compacted"), target_rows=300, durable=False)
    namespace: dict = {"spark": spark}
    out = io.StringIO()
    for block in python_blocks():
        if "requires delta-spark" in block or "needs the PostgreSQL example's changefeed" in block:
            continue
        code = _PATH.sub(lambda m: f'"{tmp_path}/{m.group(1)}', block)
        with contextlib.redirect_stdout(out):
            exec(compile(code, f"{DOC.name} block", "exec"), namespace)  # noqa: S102 - the doc's own code
    printed = out.getvalue()
    # figures the page states
    assert "|         53| 881|" in printed  # max(tx_seq), rows
    assert re.search(r"^206$", printed, re.MULTILINE)  # snapshot by ORDER_ID, batch and from the history
    assert "struct<ORDER_ID:bigint," in printed
    assert "/lake/not-started: no changefeed there (yet) (hint: start olr-buffer run" in printed
    assert (tmp_path / "lake" / "orders_changes").is_dir()
    for query in spark.streams.active:
        query.stop()
