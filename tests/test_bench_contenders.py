"""The benchmarks' contenders (bench/): the naive buffer and the pyarrow floor, which every
ratio of docs/performance.md is taken against, run on a small input of each width, and
the naive buffer publishes the same transactions and rows as replay (a contender that
fails, or is fast because it is wrong, would make every ratio meaningless)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import run_all  # noqa: E402
import shapes  # noqa: E402


@pytest.mark.parametrize("width", ["narrow", "wide"])
def test_the_naive_buffer_and_the_floor_run_and_the_naive_buffer_is_exact(tmp_path, width):
    inp = str(tmp_path / "in")
    shapes.generate(inp, lines=4000, threads=3, width=width, tx="tiny", open_txs=4, compensated=0.0, zst=False, seed=3)
    replay(inp, str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(durable=False))
    for script in ("naive_buffer.py", "floor.py"):
        done = subprocess.run(
            [sys.executable, str(BENCH / script), inp, "--json", "--out", str(tmp_path / script)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.strip().splitlines()[-1])
    compared = run_all.compare_changefeeds(str(tmp_path / "cf"), str(tmp_path / "naive_buffer.py"))
    assert compared["same_transactions_and_rows"], compared
    assert compared["rows"][0] > 0
