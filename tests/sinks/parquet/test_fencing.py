"""Fencing in the data path (docs/failure-scenarios.md, "A paused writer and its standby"):
a writer process stopped (SIGSTOP) at each step of a publication, past its lease; a
second writer takes the lease over, fences, publishes the rest of the stream; the first
is woken (SIGCONT): it publishes nothing (no visible file, no Delta commit, no manifest
change) and stops with one line naming the take-over; the changefeed holds every
transaction once, gapless, in order. Local and S3 (moto's server), plain and Delta.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from olr_buffer.sinks.parquet import Location, list_files

ROOT = Path(__file__).resolve().parents[3]
TOTAL = 12  # transactions of the stream
OLD_PER_FILE = 3  # the paused writer's files: 0..2, then 3..5 (the one it is paused in)
NEW_PER_FILE = 2  # the standby's: other boundaries, so that a late file of the old one would overlap
DEADLINE = 120.0

pytestmark = pytest.mark.e2e

# (stall point, formats): the steps of a publication, in order (see olr_buffer/faults.py)
POINTS = [
    ("before_stage", ("parquet", "delta")),  # lease checked, nothing sent
    ("after_stage", ("parquet", "delta")),  # the file in the store, invisible, not decided
    ("after_decide", ("parquet", "delta")),  # decided in the manifest, not yet visible
    ("after_rename", ("parquet", "delta")),  # visible; no Delta commit, no manifest yet
    ("before_delta_commit", ("delta",)),  # visible; the Delta commit about to be written
]
CASES = [
    pytest.param(where, fmt, point, id=f"{where}-{fmt}-{point}")
    for where in ("local", "s3")
    for point, formats in POINTS
    for fmt in formats
]


def _worker(cf: str, queue_id: str, per_file: int, fmt: str, fault: str | None = None) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "OLR_BUFFER_FAULT"}
    env["PYTHONPATH"] = str(ROOT)
    if fault:
        env["OLR_BUFFER_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sinks.parquet.fence_worker", cf, queue_id]
        + ["--total", str(TOTAL), "--per-file", str(per_file), "--format", fmt, "--ttl", "2"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_stopped(proc: subprocess.Popen) -> None:
    """Until the process is stopped (state T): it reached its fault point."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        with open(f"/proc/{proc.pid}/stat") as fh:
            if fh.read().rpartition(")")[2].split()[0] == "T":
                return
        time.sleep(0.05)
    raise AssertionError("the writer never reached its fault point")


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=DEADLINE)
    return proc.returncode, out, err


def _state(cf: str) -> dict[str, str]:
    """Every object of the changefeed but the temporary ones and the lease, by content hash:
    what a writer publishes (files, Delta log entries, the manifest)."""
    store = Location(cf).store
    out = {}
    for obj in store.list("", recursive=True):
        if obj.name.startswith("_olr_buffer/tmp/") or obj.name == "_olr_buffer/lease.json":
            continue
        out[obj.name] = hashlib.sha256(store.read(obj.name)).hexdigest()
    return out


def _xids_plain(cf: str) -> list[tuple[int, str]]:
    loc = Location(cf)
    rows = []
    for f in list_files(loc):  # a gapless chain from tx_seq 0, or it raises
        with loc.open_input(f.name) as fh:
            t = pq.read_table(fh, columns=["tx_seq", "xid"])
        rows += zip(t.column("tx_seq").to_pylist(), t.column("xid").to_pylist())
    return rows


def _xids_delta(cf: str) -> list[tuple[int, str]]:
    from deltalake import DeltaTable

    uri, options = Location(cf).store.delta_location()
    t = DeltaTable(uri, storage_options=options).to_pyarrow_table(columns=["tx_seq", "xid"])
    return sorted(zip(t.column("tx_seq").to_pylist(), t.column("xid").to_pylist()))


@pytest.mark.parametrize("where,fmt,point", CASES)
def test_a_writer_paused_past_its_lease_publishes_nothing_after_the_take_over(where, fmt, point, tmp_path, request):
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    old = _worker(cf, "queue-old", OLD_PER_FILE, fmt, fault=f"{point}:2:stop")  # its second file
    try:
        _wait_stopped(old)
        new = _worker(cf, "queue-new", NEW_PER_FILE, fmt)
        code, out, err = _finish(new)
        assert code == 0 and out.splitlines()[-1] == "DONE", (code, out, err)
        before = _state(cf)
        os.kill(old.pid, signal.SIGCONT)
        code, out, err = _finish(old)
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, (code, out, err)
    assert lines[0].startswith("olr-buffer: error: ") and "taken over" in lines[0], lines
    assert _state(cf) == before  # nothing published after the take-over, not even the manifest
    expected = [(i, f"x{i}") for i in range(TOTAL)]
    assert _xids_plain(cf) == expected
    if fmt == "delta":
        assert _xids_delta(cf) == expected


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_publication_decided_before_a_kill_is_finished_by_the_next_writer(where, tmp_path, request):
    """Killed (SIGKILL) after its decision, before the file is visible: the next writer
    of the same queue finishes it when it fences, and goes on after it."""
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    killed = _worker(cf, "queue-a", OLD_PER_FILE, "parquet", fault="after_decide:2")
    code, out, err = _finish(killed)
    assert code == -signal.SIGKILL, (code, out, err)
    assert [f.name for f in list_files(Location(cf))] == ["part-00000000000000000000-00000000000000000002.parquet"]
    again = _worker(cf, "queue-a", OLD_PER_FILE, "parquet")
    code, out, err = _finish(again)
    assert code == 0 and out.splitlines()[0] == "OPEN 6", (code, out, err)  # 3..5: finished, not written again
    assert _xids_plain(cf) == [(i, f"x{i}") for i in range(TOTAL)]
