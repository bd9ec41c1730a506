"""Crash safety of `olr-buffer replay`: real processes killed with SIGKILL at random moments.

After any number of kills, one more `replay` must yield exactly the contract's
changefeed: every committed transaction once, in order, no gap in tx_seq.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, expected_changefeed, load_changefeed

pytestmark = pytest.mark.slow


def replay_cmd(root: Path, inp: Path | None = None) -> list[str]:
    return [
        sys.executable, "-m", "olr_buffer.cli", "replay", str(inp or root / "in"),
        "--queue", str(root / "q"), "--changefeed", str(root / "cf"),
        "--segment-size", "256KiB", "--file-rows", "300", "--no-progress",
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
    for _ in range(12):
        proc = subprocess.Popen(replay_cmd(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(rng.uniform(0.25, 0.9) * full)
        if proc.poll() is not None:
            assert proc.returncode == 0, proc.stderr.read().decode()
            break
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    final = subprocess.run(replay_cmd(tmp_path), capture_output=True, text=True)
    assert final.returncode == 0, final.stderr
    assert kills >= 1
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(tmp_path / "in").rows)
    assert not [n for n in os.listdir(tmp_path / "cf") if n.startswith(".tmp-")]
