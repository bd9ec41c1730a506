"""Safety: owner-only directories; no network socket unless metrics are asked for, and
then on the loopback only.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import ok
from tests.contract_model import changefeed_files
from tests.fault_helpers import ROOT, cli, replay, small_base, work  # noqa: F401 (small_base: a fixture work uses)

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`


# Safety: owner-only directories, no network unless asked


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_queue_and_metadata_directories_are_owner_only(work: Path, umask: int) -> None:
    q, cf = work / "deep" / "queue", work / "cf"
    ok(replay(work / "input", q, cf, umask=umask))
    for d in (q, q / "segments", cf / "_olr_buffer"):
        mode = d.stat().st_mode & 0o777
        assert mode == 0o700, f"{d}: mode {oct(mode)}"
    for f in [q / "LOCK", *(q / "segments").iterdir()]:
        mode = f.stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"{f}: mode {oct(mode)}"


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            out.add(m.group(1))
    return out


def _inet_sockets(pid: int) -> list[tuple[str, str, str]]:
    """(protocol, local address, state) of the process's internet sockets."""
    inodes = _socket_inodes(pid)
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{proto}") as fh:
                rows = fh.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            if cols[9] in inodes:
                out.append((proto, cols[1], cols[3]))
    return out


def _start_service(work: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "run",
            str(work / "input"),
            "--queue",
            str(work / "q"),
            "--changefeed",
            str(work / "cf"),
            "--poll-interval",
            "0.02",
            "--flush-interval",
            "0.1",
            "--log-level",
            "info",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _wait_published(cf: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        if cf.is_dir() and changefeed_files(cf):
            return
        time.sleep(0.05)
    raise AssertionError("the service published nothing")


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_service_without_metrics_port_opens_no_socket(work: Path) -> None:
    proc = _start_service(work)
    try:
        _wait_published(work / "cf", proc)
        socks = _inet_sockets(proc.pid)
    finally:
        _stop(proc)
    assert socks == [], socks


def test_service_metrics_listen_on_loopback_only(work: Path) -> None:
    proc = _start_service(work, "--metrics-port", "0")
    try:
        _wait_published(work / "cf", proc)
        socks = _inet_sockets(proc.pid)
    finally:
        _stop(proc)
    listening = [s for s in socks if s[0].startswith("tcp") and s[2] == "0A"]
    assert len(listening) == 1 and listening[0][0] == "tcp", socks
    assert listening[0][1].startswith("0100007F:"), socks  # 127.0.0.1
    assert not [s for s in socks if s[0].startswith("udp")], socks
