"""The mirror killed (SIGKILL) at every kind of moment, then run again: every table equals
the model, no row twice, nothing applied twice. And the service following a changefeed
that grows, stopped by SIGTERM."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from olr_buffer.runtime import PipelineOptions, replay

from .test_mirror import TABLES, assert_mirror_equals_model, make_changefeed
from .workload import write_workload

pytestmark = pytest.mark.e2e


def _mirror_cmd(cf: Path, target: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "mirror",
        str(cf),
        "--target",
        str(target),
        "--batch-rows",
        "40",
        "--poll-interval",
        "0.05",
        *extra,
    ]


def _env(**more: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OLR_BUFFER_FAULT"}
    return {**env, "PYTHONPATH": os.getcwd(), **more}


def _versions(target: Path) -> dict:
    return {t: DeltaTable(str(target / "SHOP" / t)).version() for t in TABLES}


@pytest.mark.slow
def test_killed_at_each_fault_point_then_rerun(tmp_path):
    cf = make_changefeed(tmp_path, seed=11, transactions=400, file_rows=30)
    target = tmp_path / "mirror"
    killed = 0
    for point in ("mirror_before_commit", "mirror_after_commit", "mirror_after_progress"):
        for nth in (1, 3, 4):
            done = subprocess.run(
                _mirror_cmd(cf, target, "--until-caught-up"),
                capture_output=True,
                text=True,
                env=_env(OLR_BUFFER_FAULT=f"{point}:{nth}"),
                timeout=300,
            )
            assert done.returncode in (0, -signal.SIGKILL), done.stderr
            killed += done.returncode == -signal.SIGKILL
    assert killed >= 6
    done = subprocess.run(
        _mirror_cmd(cf, target, "--until-caught-up"), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert_mirror_equals_model(cf, target)
    versions = _versions(target)
    (target / "_olr_buffer" / "mirror.json").unlink()  # everything read again: nothing applied again
    done = subprocess.run(
        _mirror_cmd(cf, target, "--until-caught-up"), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "0 table commit(s)" in done.stdout
    assert _versions(target) == versions


@pytest.mark.slow
def test_killed_at_random_moments_then_rerun(tmp_path):
    cf = make_changefeed(tmp_path, seed=12, transactions=400, file_rows=30)
    target = tmp_path / "mirror"
    r = random.Random(12)
    for _ in range(8):
        proc = subprocess.Popen(
            _mirror_cmd(cf, target), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(r.uniform(0.3, 2.5))
        proc.kill()
        proc.wait(timeout=60)
    done = subprocess.run(
        _mirror_cmd(cf, target, "--until-caught-up"), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert_mirror_equals_model(cf, target)


def _scanned(target: Path) -> int:
    try:
        return json.loads((target / "_olr_buffer" / "mirror.json").read_text())["scanned"]["*"]
    except (FileNotFoundError, KeyError, ValueError):
        return -1


def _wait(condition, what: str, deadline: float = 120.0) -> None:
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_follows_a_changefeed_that_grows_and_stops_on_sigterm(tmp_path):
    write_workload(tmp_path / "all", 13, 300)
    inp = tmp_path / "in"
    inp.mkdir()
    files = sorted((tmp_path / "all").iterdir())
    for f in files[:2]:
        shutil.copy(f, inp)
    cf = tmp_path / "cf"
    opts = PipelineOptions(file_rows=30, durable=False)
    first = replay(str(inp), str(tmp_path / "q"), str(cf), opts).next_tx_seq
    target = tmp_path / "mirror"
    proc = subprocess.Popen(
        _mirror_cmd(cf, target), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait(lambda: _scanned(target) == first - 1, "the mirror of the first half")
        for f in files[2:]:
            shutil.copy(f, inp)
        last = replay(str(inp), str(tmp_path / "q"), str(cf), opts).next_tx_seq
        assert last > first
        _wait(lambda: _scanned(target) == last - 1, "the mirror of the rest")
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert_mirror_equals_model(cf, target)
