"""A SIGTERM that comes while the command is still importing, before click is loaded:
both ways of starting the program (``olr-buffer``, ``python -m olr_buffer.cli``) keep it
from their first import on, instead of dying of it without a word (exit -15)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate

#: sitecustomize for the command's process: its first import of click waits until the test
#: says go, and says where it waits (the command's own modules are imported by then)
GATE = """
import os, sys, time

class _Gate:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            open(os.path.join(os.environ["OLR_TEST_GATE"], "reached"), "w").close()
            while not os.path.exists(os.path.join(os.environ["OLR_TEST_GATE"], "go")):
                time.sleep(0.01)
        return None

sys.meta_path.insert(0, _Gate())
"""

PROGRAMS = {
    "olr-buffer": [str(Path(sys.executable).parent / "olr-buffer")],
    "python -m olr_buffer.cli": [sys.executable, "-m", "olr_buffer.cli"],
}


def _start_held_before_click(tmp_path: Path, argv: list[str]) -> subprocess.Popen:
    gate = tmp_path / "gate"
    gate.mkdir()
    (gate / "sitecustomize.py").write_text(GATE)
    env = {
        **os.environ,
        "OLR_TEST_GATE": str(gate),
        "PYTHONPATH": os.pathsep.join(p for p in (str(gate), os.environ.get("PYTHONPATH")) if p),
    }
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    deadline = time.monotonic() + 60
    while not (gate / "reached").exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the command never imported click"
        time.sleep(0.01)
    proc.send_signal(signal.SIGTERM)  # pending at once: handled (or fatal) before the process goes on
    (gate / "go").touch()
    return proc


@pytest.mark.e2e
@pytest.mark.parametrize("program", PROGRAMS)
def test_replay_ends_as_terminated(tmp_path: Path, program: str):
    proc = _start_held_before_click(
        tmp_path,
        [
            *PROGRAMS[program],
            "replay",
            str(tmp_path / "in"),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
        ],
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert [ln for ln in err.splitlines() if ln.strip()] == [
        "olr-buffer: terminated (SIGTERM); run the same command again: it resumes"
    ], err


@pytest.mark.e2e
@pytest.mark.parametrize("program", PROGRAMS)
def test_run_stops_cleanly(tmp_path: Path, program: str):
    simulate(tmp_path / "in", threads=1, transactions=5, seed=1)
    proc = _start_held_before_click(
        tmp_path,
        [
            *PROGRAMS[program],
            "run",
            str(tmp_path / "in"),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
        ],
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert "received SIGTERM, stopping" in err and "stopped cleanly" in err, err
