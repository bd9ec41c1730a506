"""Progress on long work, the same display for `replay`, `simulate` and `compact`: a line
rewritten in place on a terminal, a plain line every --progress-interval seconds to a file
or a pipe. Giving --progress-interval (flag, environment, --config) asks for progress."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import TIMEOUT, ok, olr_buffer

pytestmark = pytest.mark.e2e

ETA = r"(ETA (-|[0-9]+:[0-9]{2}:[0-9]{2})|done in [0-9.]+s)"
SIMULATE = re.compile(
    rf"^progress: +[0-9.]+%  [0-9,]+ of [0-9,]+ transactions ended  [0-9,]+ records written "
    rf"\([0-9,]+/s\)  {ETA}$"
)
COMPACT = re.compile(rf"^progress: +[0-9.]+%  [0-9,]+ of [0-9,]+ files written  [0-9,]+ rows \([0-9,]+/s\)  {ETA}$")
REPLAY = re.compile(
    rf"^progress: +[0-9.]+%  [0-9,]+ records \([0-9,]+/s\)  [0-9,]+ transactions published  "
    rf"[0-9,]+ open  {ETA}$"
)


def progress_lines(stderr: str, pattern: re.Pattern) -> list[str]:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert lines, "no progress line"
    assert "\r" not in stderr and "\x1b" not in stderr
    bad = [line for line in lines if not pattern.match(line)]
    assert not bad, bad
    assert lines[-1].startswith("progress: 100.0%") and "done in" in lines[-1], lines[-1]
    return lines


def test_progress_interval_alone_asks_for_plain_progress_lines(tmp_path: Path):
    sim = ok(olr_buffer("simulate", tmp_path / "in", "--transactions", "3000", "--progress-interval", "0"))
    assert len(progress_lines(sim.stderr, SIMULATE)) >= 2
    rep = ok(
        olr_buffer(
            "replay",
            tmp_path / "in",
            "--queue",
            tmp_path / "q",
            "--changefeed",
            tmp_path / "cf",
            "--file-rows",
            "500",
            "--progress-interval",
            "0",
        )
    )
    progress_lines(rep.stderr, REPLAY)
    comp = ok(
        olr_buffer(
            "compact",
            tmp_path / "cf",
            "--output",
            tmp_path / "out",
            "--target-rows",
            "2000",
            "--progress-interval",
            "0",
        )
    )
    lines = progress_lines(comp.stderr, COMPACT)
    files = int(comp.stdout.split("wrote ")[1].split(" file")[0])
    assert f"  {files} of {files} files written" in lines[-1]
    # in place too, and --no-progress wins over an interval given
    comp = ok(
        olr_buffer(
            "compact",
            tmp_path / "out",
            "--in-place",
            "--i-know-no-reader-is-running",
            "--target-rows",
            "8000",
            "--progress-interval",
            "0",
        )
    )
    progress_lines(comp.stderr, COMPACT)
    quiet = ok(
        olr_buffer("simulate", tmp_path / "in2", "--transactions", "300", "--no-progress", "--progress-interval", "0")
    )
    assert quiet.stderr == ""
    # not asked, not a terminal: nothing
    quiet = ok(olr_buffer("compact", tmp_path / "cf", "--output", tmp_path / "out2", "--target-rows", "2000"))
    assert quiet.stderr == ""


def test_progress_interval_from_the_environment_and_the_config_file(tmp_path: Path):
    env = {**os.environ, "OLR_BUFFER_SIMULATE_PROGRESS_INTERVAL": "0"}
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "simulate", str(tmp_path / "in"), "--transactions", "500"],
        capture_output=True,
        text=True,
        env=env,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stderr
    progress_lines(r.stderr, SIMULATE)
    (tmp_path / "olr.toml").write_text("progress_interval = 0\n")
    rep = ok(
        olr_buffer(
            "replay",
            tmp_path / "in",
            "--queue",
            tmp_path / "q",
            "--changefeed",
            tmp_path / "cf",
            "--config",
            tmp_path / "olr.toml",
        )
    )
    progress_lines(rep.stderr, REPLAY)


def test_on_a_terminal_simulate_and_compact_rewrite_one_line(tmp_path: Path):
    ok(olr_buffer("simulate", tmp_path / "in", "--transactions", "600"))
    ok(
        olr_buffer(
            "replay", tmp_path / "in", "--queue", tmp_path / "q", "--changefeed", tmp_path / "cf", "--file-rows", "100"
        )
    )
    for args in (
        ["simulate", str(tmp_path / "in2"), "--transactions", "600"],
        ["compact", str(tmp_path / "cf"), "--output", str(tmp_path / "out"), "--target-rows", "1000"],
    ):
        out = on_a_terminal(args)
        # one line, rewritten in place (\r, erase to the end of the line), ended once it is done
        assert out.endswith("\x1b[K\r\n"), repr(out)  # (the terminal writes "\n" as "\r\n")
        finished = out[:-2].split("\r")[-1]
        assert finished.startswith("100.0%") and "done in" in finished, repr(out)
        assert "progress:" not in out


def on_a_terminal(args: list[str]) -> str:
    """stderr of ``olr-buffer ARGS`` when it is a terminal (a pty); stdout to a pipe."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "olr_buffer.cli", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=follower,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not data:
                break
            chunks.append(data)
        proc.communicate(timeout=TIMEOUT)
    finally:
        os.close(leader)
    assert proc.returncode == 0
    return b"".join(chunks).decode()
