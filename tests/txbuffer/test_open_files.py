"""File descriptors: a transaction that pins many segments does not exhaust them."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import lmdb
import pytest

from olr_buffer.txbuffer import LmdbQueue
from olr_buffer.txbuffer.lmdb_queue import segment_name
from tests.cli.conftest import TIMEOUT
from tests.test_cleanup_and_status import write_long_and_short

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

ROOT = Path(__file__).resolve().parents[2]


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_at_most_max_open_segments_stay_open(tmp_path: Path):
    q = LmdbQueue(tmp_path / "q", segment_bytes=16 * 1024, max_open_segments=3)
    try:
        for _ in range(400):
            q.append([os.urandom(300) for _ in range(8)])
        assert len(q.segments()) > 10
        base = _fds()
        for index in range(q.first_index, q.next_index, 7):
            assert len(q.read_block(index).at(index)) == 300
            assert sum(1 for s in q._segments if s.env is not None) <= 3
        assert _fds() <= base + 3 * 3
        q.append([b"after"])  # the current segment was never closed
        assert q.read_block(q.next_index - 1).at(q.next_index - 1) == b"after"
    finally:
        q.close()


def test_replay_of_a_transaction_over_many_segments_under_a_low_fd_limit(tmp_path: Path):
    write_long_and_short(tmp_path / "in", long_open=True)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "replay",
            str(tmp_path / "in"),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
            "--segment-size",
            "32KiB",
            "--block-records",
            "64",
            "--checkpoint-interval",
            "0",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=TIMEOUT,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (96, 96)),
    )
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "q" / "segments").glob("seg-*.mdb"))) * 3 > 96  # more than could be open at once
    assert "still open 1" in r.stdout


def test_running_out_of_descriptors_is_named(tmp_path: Path):
    q = LmdbQueue(tmp_path / "q", segment_bytes=16 * 1024)
    for _ in range(200):
        q.append([os.urandom(300) for _ in range(8)])
    q.close()
    script = (
        "import resource, sys\n"
        "from olr_buffer.txbuffer import LmdbQueue\n"
        "from olr_buffer.errors import OlrBufferError\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))\n"
        f"q = LmdbQueue({str(tmp_path / 'q')!r}, max_open_segments=1000)\n"
        "try:\n"
        "    for i in range(q.first_index, q.next_index, 5): q.read_block(i)\n"
        "except OlrBufferError as exc:\n"
        "    print(exc); sys.exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=TIMEOUT)
    assert r.returncode == 3, r.stdout + r.stderr
    assert "too many open files (limit 40" in r.stdout and "ulimit -n" in r.stdout, r.stdout


def test_status_while_the_owner_creates_a_segment(tmp_path: Path):
    q = LmdbQueue(tmp_path / "q", segment_bytes=16 * 1024)
    for _ in range(50):
        q.append([os.urandom(300) for _ in range(8)])
    nxt = q.next_index
    q.close()
    # the owner has created the next segment's file, not yet its first write
    env = lmdb.open(str(tmp_path / "q" / "segments" / segment_name(nxt)), subdir=False, max_dbs=2)
    env.close()
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "q")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=TIMEOUT,
    )
    assert r.returncode == 0, r.stderr
    assert f"indexes 0..{nxt - 1}" in r.stdout, r.stdout
