"""Replay reads in child processes or in threads (a small input, or ``reader_processes``):
the same errors, dead letters and changefeed either way."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sources.redo.errors import InputError
from olr_buffer.sources.redo.source import SMALL_REPLAY_BYTES, ZSTD_RATIO, replay_in_processes
from tests.contract_model import assert_changefeed_equal, expected_changefeed, load_changefeed


def _workload(root: Path) -> Path:
    simulate(root / "in", threads=2, transactions=120, seed=11, records_per_file=200, compress_archived=False)
    return root / "in"


def _damage(path: Path, nth: int, change) -> tuple[int, bytes]:
    """Replace the ``nth`` row line (insert/update/delete) of ``path``; its line number and text."""
    lines = path.read_bytes().splitlines(keepends=True)
    rows = [i for i, ln in enumerate(lines) if json.loads(ln)["op"] in ("insert", "update", "delete")]
    i = rows[nth]
    original = lines[i]
    lines[i] = change(json.loads(original))
    path.write_bytes(b"".join(lines))
    return i + 1, original


def _line(rec: dict) -> bytes:
    return json.dumps(rec).encode() + b"\n"


def test_bad_line_stops_with_the_same_error_then_resumes_exactly(tmp_path: Path) -> None:
    inp = _workload(tmp_path)
    model = expected_changefeed(inp)
    bad = inp / "redo_2_1.jsonl"
    lineno, original = _damage(bad, 5, lambda r: _line({**r, "scn": str(r["scn"])}))
    errors = []
    for processes in (True, False):
        out = tmp_path / ("p" if processes else "t")
        with pytest.raises(InputError) as err:
            replay(
                str(inp), str(out / "q"), str(out / "cf"), PipelineOptions(durable=False, reader_processes=processes)
            )
        errors.append(str(err.value))
    assert errors[0] == errors[1]
    assert errors[0].startswith(f"{bad}:{lineno}: field 'scn' must be an integer, not a string"), errors[0]
    lines = bad.read_bytes().splitlines(keepends=True)
    lines[lineno - 1] = original
    bad.write_bytes(b"".join(lines))
    for processes in (True, False):
        out = tmp_path / ("p" if processes else "t")
        summary = replay(
            str(inp), str(out / "q"), str(out / "cf"), PipelineOptions(durable=False, reader_processes=processes)
        )
        assert summary.next_tx_seq == model.committed
        assert_changefeed_equal(load_changefeed(out / "cf"), model.rows)


def test_dead_letters_and_changefeed_are_the_same_in_processes_and_threads(tmp_path: Path) -> None:
    inp = _workload(tmp_path)
    _damage(inp / "redo_1_1.jsonl", 3, lambda r: b'{"op": "insert", "scn": \n')
    _damage(inp / "redo_2_1.jsonl", 7, lambda r: _line({**r, "op": "upsert"}))
    results = []
    for processes in (True, False):
        out = tmp_path / ("p" if processes else "t")
        opts = PipelineOptions(durable=False, reader_processes=processes, dead_letter=str(out / "dead.jsonl"))
        summary = replay(str(inp), str(out / "q"), str(out / "cf"), opts)
        letters = sorted(
            (d["file"], d["line"], d["reason"], d["raw"])
            for d in map(json.loads, (out / "dead.jsonl").read_text().splitlines())
        )
        results.append((summary.quarantined, letters, load_changefeed(out / "cf")))
    assert results[0][0] == 2 and len(results[0][1]) == 2
    assert results[0] == results[1]


def test_a_small_input_is_read_in_threads_a_large_one_in_processes(tmp_path: Path) -> None:
    inp = _workload(tmp_path)
    assert PipelineOptions().reader_processes is None  # replay: the source decides
    auto = None
    assert not replay_in_processes(str(inp), auto)
    assert replay_in_processes(str(inp), True)
    # sizes only count: a sparse file of the threshold's size tips it
    big = inp / "redo_1_9.jsonl"
    with open(big, "wb") as fh:
        fh.truncate(SMALL_REPLAY_BYTES)
    assert replay_in_processes(str(inp), auto)
    assert not replay_in_processes(str(inp), False)
    # a .zst file counts for the text it is estimated to hold
    os.remove(big)
    with open(inp / "redo_1_9.jsonl.zst", "wb") as fh:
        fh.truncate(SMALL_REPLAY_BYTES // ZSTD_RATIO + 1)
    assert replay_in_processes(str(inp), auto)
