"""Which files of the input directory are read: exact names, no links leading out of it."""

from __future__ import annotations

import os
from pathlib import Path

from olr_buffer.simulate import simulate
from tests.cli.conftest import olr_buffer


def _input(tmp: Path) -> list[Path]:
    simulate(tmp / "in", threads=1, transactions=60, seed=2, records_per_file=200, compress_archived=False)
    files = sorted((tmp / "in").glob("redo_1_*.jsonl"), key=lambda p: int(p.stem.split("_")[2].split(".")[0]))
    assert len(files) >= 2
    return files


def _replay(tmp: Path):
    return olr_buffer("replay", tmp / "in", "--queue", tmp / "q", "--changefeed", tmp / "cf")


def test_a_name_with_a_trailing_newline_is_not_a_log_file(tmp_path: Path):
    files = _input(tmp_path)
    nxt = len(files) + 1
    (tmp_path / "in" / f"redo_1_{nxt}.jsonl\n").write_bytes(b"not json\n")
    r = _replay(tmp_path)
    assert r.returncode == 0, r.describe()


def test_a_symlink_leading_out_of_the_input_is_refused(tmp_path: Path):
    files = _input(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    last = files[-1]
    os.rename(last, outside / "secret.jsonl")
    os.symlink(outside / "secret.jsonl", last)
    r = _replay(tmp_path)
    assert r.returncode == 3, r.describe()
    assert len(r.stderr_lines) == 1, r.describe()
    line = r.stderr_lines[0]
    assert str(last) in line and "outside the input directory" in line, r.describe()
    assert not (tmp_path / "cf").exists() or not any((tmp_path / "cf").glob("part-*")), r.describe()


def test_a_symlink_within_the_input_is_followed(tmp_path: Path):
    files = _input(tmp_path)
    (tmp_path / "in" / "archive").mkdir()
    last = files[-1]
    os.rename(last, tmp_path / "in" / "archive" / "kept.jsonl")
    os.symlink(Path("archive") / "kept.jsonl", last)
    r = _replay(tmp_path)
    assert r.returncode == 0, r.describe()
