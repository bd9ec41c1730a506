"""A queue takes more input after a completed replay: a later replay (or run) goes on
with the threads' real progress, so transactions open across the cut are not lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from tests.contract_model import assert_changefeed_equal, expected_changefeed, load_changefeed, load_input


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_replay_then_more_input_then_replay_is_exact(tmp_path: Path, seed: int):
    simulate(
        tmp_path / "full", threads=3, transactions=600, seed=seed, records_per_file=100_000, compress_archived=False
    )
    records = load_input(tmp_path / "full")
    scns = sorted(r.scn for r in records)
    cut = scns[len(scns) // 2]
    inp = tmp_path / "in"
    inp.mkdir()
    for part, keep in ((1, lambda s: s <= cut), (2, lambda s: s > cut)):
        for t in sorted({r.thread for r in records}):
            lines = [json.dumps(r.data, ensure_ascii=False) + "\n" for r in records if r.thread == t and keep(r.scn)]
            (tmp_path / f"part{part}_{t}").write_text("".join(lines))
    for t in sorted({r.thread for r in records}):
        (inp / f"redo_{t}_1.jsonl").write_text((tmp_path / f"part1_{t}").read_text())
    opts = PipelineOptions(checkpoint_seconds=0.0, block_records=64)
    first = replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
    assert first.open_transactions > 0  # transactions open across the cut
    for t in sorted({r.thread for r in records}):
        (inp / f"redo_{t}_2.jsonl").write_text((tmp_path / f"part2_{t}").read_text())
    second = replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
    assert second.late_records == 0
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(inp).rows)
