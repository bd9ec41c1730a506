"""Reader processes under faults: a child killed as the OOM killer does, a parent killed."""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from olr_buffer.sources.redo.errors import InputError, MissingSequenceError
from tests.processes import cmdline, reader_processes, service_processes

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

ROOT = Path(__file__).resolve().parents[3]


def _run_cmd(tmp: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "run",
        str(tmp / "in"),
        "--queue",
        str(tmp / "q"),
        "--changefeed",
        str(tmp / "cf"),
        "--poll-interval",
        "0.05",
        "--checkpoint-interval",
        "0.5",
        "--log-level",
        "warning",
    ]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start_with_readers(tmp: Path, n: int) -> tuple[subprocess.Popen, list[int]]:
    simulate(tmp / "in", threads=n, transactions=150, seed=5, records_per_file=400, compress_archived=False)
    proc = subprocess.Popen(_run_cmd(tmp), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()[1]
        kids = service_processes(proc.pid)
        readers = reader_processes(proc.pid)
        published = any(p.name.startswith("part-") for p in (tmp / "cf").rglob("*"))
        if len(readers) >= n and published:
            time.sleep(1.0)  # the readers have read everything: they wait for more input
            return proc, kids
        time.sleep(0.1)
    proc.kill()
    raise AssertionError("the reader processes did not start")


def test_errors_pickle_whole():
    for exc in (InputError("/in/redo_1_2.jsonl", 7, "bad", hint="fix it"), MissingSequenceError("/p", None, "gap")):
        back = pickle.loads(pickle.dumps(exc))
        assert type(back) is type(exc)
        assert (str(back), back.path, back.line, back.reason, back.hint) == (
            str(exc),
            exc.path,
            exc.line,
            exc.reason,
            exc.hint,
        )


@pytest.mark.timeout(180)
def test_reader_child_killed_stops_run_with_one_line(tmp_path: Path):
    proc, kids = _start_with_readers(tmp_path, 3)
    try:
        reader = reader_processes(proc.pid)[0]
        os.kill(reader, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode != 0
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "the reader process of redo thread" in lines[0] and "died" in lines[0], err


@pytest.mark.timeout(180)
def test_children_exit_when_the_parent_is_killed(tmp_path: Path):
    proc, kids = _start_with_readers(tmp_path, 2)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()
    proc.stderr.close()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.1)
    left = [(k, cmdline(k)) for k in kids if _alive(k)]
    for k, _ in left:
        os.kill(k, signal.SIGKILL)
    assert not left, f"children outlived their parent: {left}"
