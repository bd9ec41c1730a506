"""Crash safety of `olr-buffer replay`: real processes killed with SIGKILL at random moments.

After any number of kills, one more `replay` must yield exactly the contract's
changefeed: every committed transaction once, in order, no gap in tx_seq.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from olr_buffer.status import queue_status
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, expected_changefeed, load_changefeed
from tests.fault_helpers import part_names, tmp_files, top_level_parquet

pytestmark = pytest.mark.slow


def replay_cmd(root: Path, inp: Path | None = None) -> list[str]:
    return [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "replay",
        str(inp or root / "in"),
        "--queue",
        str(root / "q"),
        "--changefeed",
        str(root / "cf"),
        "--segment-size",
        "256KiB",
        "--file-rows",
        "300",
        "--no-progress",
    ]


@pytest.mark.parametrize("seed", [1, 2])
def test_replay_killed_many_times_then_completed_is_exact(tmp_path: Path, seed: int):
    rng = random.Random(seed)
    simulate(tmp_path / "in", threads=3, transactions=4000, seed=seed, records_per_file=700)
    # how long an uninterrupted run takes, start-up included, to kill within it
    t0 = time.monotonic()
    subprocess.run(replay_cmd(tmp_path / "clean", tmp_path / "in"), check=True, capture_output=True)
    full = time.monotonic() - t0
    kills = 0
    scale = 1.0
    for _ in range(20):
        proc = subprocess.Popen(replay_cmd(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.25, 0.9) * full * scale)
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.stderr.read().decode()
            if kills:
                break
            # finished before any kill (a loaded machine timed the clean run slowly): again, sooner
            shutil.rmtree(tmp_path / "q")
            shutil.rmtree(tmp_path / "cf")
            scale /= 2
            continue
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
        # what DuckDB's or Polars' cf/*.parquet reads (their globs match dot-files): published files only
        assert top_level_parquet(tmp_path / "cf") == part_names(tmp_path / "cf")
    final = subprocess.run(replay_cmd(tmp_path), capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    assert kills >= 1
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(tmp_path / "in").rows)
    assert not tmp_files(tmp_path / "cf")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_replay_stopped_by_a_signal_says_so_and_resumes_exact(tmp_path: Path, sig: signal.Signals):
    """SIGTERM (a container or systemd stopping it) and Ctrl-C end replay with one line and
    their exit code (143, 130), not a death by signal; the same command then completes it."""
    simulate(tmp_path / "in", threads=3, transactions=12000, seed=3, records_per_file=3000)
    cmd = replay_cmd(tmp_path)
    cmd[cmd.index("--no-progress")] = "--progress"
    proc = subprocess.Popen(
        [*cmd, "--progress-interval", "0.05"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    first = proc.stderr.readline()  # the first progress line: the replay is under way
    assert first.startswith("progress: "), first
    proc.send_signal(sig)
    rest = proc.stderr.read()
    proc.wait(timeout=120)
    errors = [ln for ln in rest.splitlines() if not ln.startswith("progress: ")]
    if sig == signal.SIGTERM:
        assert proc.returncode == 143, rest
        assert errors == ["olr-buffer: terminated (SIGTERM); run the same command again: it resumes"], rest
    else:
        assert proc.returncode == 130, rest
        assert errors == ["olr-buffer: interrupted"], rest
    final = subprocess.run(replay_cmd(tmp_path), capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(tmp_path / "in").rows)


FAULTS = [
    "after_append:3",
    "after_append:40",
    "after_tmp_written:1",
    "after_rename:2",
    "before_checkpoint:3",
    "during_cleanup:1",
    "during_cleanup:4",
]


@pytest.mark.parametrize("fault", FAULTS)
def test_replay_killed_at_a_chosen_point_then_completed_is_exact(tmp_path: Path, fault: str):
    simulate(tmp_path / "in", threads=2, transactions=800, seed=5, records_per_file=500)
    cmd = replay_cmd(tmp_path) + ["--checkpoint-interval", "0", "--segment-size", "32KiB", "--block-records", "50"]
    env = {**os.environ, "OLR_BUFFER_FAULT": fault}
    crashed = subprocess.run(cmd, env=env, capture_output=True)
    assert crashed.returncode == -signal.SIGKILL, (fault, crashed.returncode, crashed.stderr.decode())
    if fault.startswith("after_tmp_written"):
        assert tmp_files(tmp_path / "cf")
    # a second crash at the same kind of point, then the run that completes
    again = subprocess.run(cmd, env=env, capture_output=True)
    assert again.returncode in (0, -signal.SIGKILL), again.stderr.decode()
    final = subprocess.run(cmd, capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    check_changefeed_layout(tmp_path / "cf")
    rows = load_changefeed(tmp_path / "cf")
    assert_changefeed_equal(rows, expected_changefeed(tmp_path / "in").rows)
    assert not tmp_files(tmp_path / "cf")
    # the queue's lifetime counters hold what the crashed runs published after their last
    # checkpoint too (they were lost with the crash, and skipped when read again)
    totals = queue_status(str(tmp_path / "q"))["totals"]
    assert (totals["published"], totals["rows"]) == (rows[-1]["tx_seq"] + 1, len(rows)), totals
    seg_dir = tmp_path / "q" / "segments"
    assert len(list(seg_dir.glob("seg-*.mdb"))) == 1  # nothing left open: only the current segment
    assert len(list(seg_dir.glob("seg-*.mdb-lock"))) == 1  # no orphan lock files from a cut cleanup
