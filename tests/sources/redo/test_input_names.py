"""Which files of the input directory are read: exact names, no links leading out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from tests.cli.conftest import olr_buffer
from tests.contract_model import assert_changefeed_equal, expected_changefeed, load_changefeed


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


@pytest.mark.parametrize("kind", ["dangling", "loop", "directory"])
def test_a_log_name_that_leads_to_no_file_is_refused(tmp_path: Path, kind: str):
    """Issue 29.8: a dangling or looping link (or a directory) with the name of the newest
    sequence was skipped without a word, and its records were missing from a replay that
    exited 0. It is refused, one line naming it; restored, the same command goes on."""
    files = _input(tmp_path)
    last = files[-1]
    kept = tmp_path / "kept.jsonl"
    os.rename(last, kept)
    if kind == "dangling":
        os.symlink("gone.jsonl", last)
        reason = "symbolic link to gone.jsonl, which does not exist"
    elif kind == "loop":
        os.symlink(last.name, last)
        reason = f"symbolic link to {last.name}, which cannot be followed: too many levels of symbolic links"
    else:
        last.mkdir()
        reason = "named like a log file, but not a regular file"
    r = _replay(tmp_path)
    assert r.returncode == 3, r.describe()
    assert r.stderr_lines == [
        f"olr-buffer: error: {last}: {reason} (hint: restore the log file, or remove what has its name)"
    ], r.describe()
    assert not (tmp_path / "cf").exists() or not any((tmp_path / "cf").glob("part-*")), r.describe()
    last.rmdir() if kind == "directory" else last.unlink()
    os.rename(kept, last)
    assert _replay(tmp_path).returncode == 0
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(tmp_path / "in").rows)


def test_a_log_created_while_it_is_looked_at_is_there_or_not_never_refused(tmp_path: Path, monkeypatch):
    """The capture process creates the next sequence while a following reader looks for
    it: the look must see the file or not see it. (Two looks, the first before the file
    was there and the second after, made `run` stop with 'not a regular file'.)"""
    from olr_buffer.sources.redo import files

    path = tmp_path / "redo_1_3.jsonl"
    real_stat = os.stat

    created: list[bool] = []

    def stat_then_create(p, *args, **kwargs):
        try:
            return real_stat(p, *args, **kwargs)
        finally:
            if not created and os.fspath(p) == str(path):
                created.append(True)  # created just after this look
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))

    monkeypatch.setattr(os, "stat", stat_then_create)
    assert files.is_log_file(str(tmp_path), str(path)) is False  # not there at the look
    monkeypatch.setattr(os, "stat", real_stat)
    assert files.is_log_file(str(tmp_path), str(path)) is True  # there at the next one
