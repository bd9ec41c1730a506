"""``olr-buffer run`` as a command line and as a process, and the processes of a running
service as /proc shows them: the tests that kill a reader process, or the service under
its readers, find them here."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.paths import CLI, ROOT


def run_args(source: str | Path, tmp: Path, *extra: str) -> list[str]:
    """``olr-buffer run SOURCE --queue TMP/q --changefeed TMP/cf EXTRA...``."""
    return [*CLI, "run", str(source), "--queue", str(tmp / "q"), "--changefeed", str(tmp / "cf"), *extra]


def stream_run_args(uri: str, tmp: Path, *extra: str) -> list[str]:
    """``run`` of a stream source (``postgresql://``, ``olr://``): publishing often, logging at info."""
    return run_args(uri, tmp, "--flush-interval", "0.2", "--checkpoint-interval", "0.5", "--log-level", "info", *extra)


def start_stream_run(uri: str, tmp: Path, *extra: str) -> subprocess.Popen:
    """:func:`stream_run_args` as a process, its output appended to ``TMP/service.log``."""
    with open(tmp / "service.log", "ab") as log:  # the child keeps its own descriptor
        return subprocess.Popen(stream_run_args(uri, tmp, *extra), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)


def children(pid: int) -> list[int]:
    """The children of ``pid`` (of all its threads)."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return out
    for task in tasks:
        try:
            out.extend(int(c) for c in (task / "children").read_text().split())
        except FileNotFoundError:
            pass
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""


def reader_processes(pid: int) -> list[int]:
    """The reader processes of the service ``pid``: multiprocessing's fork server is its
    child, and forks one per reader (the resource tracker, its other child, is not one)."""
    servers = [c for c in children(pid) if "multiprocessing.forkserver" in cmdline(c)]
    return [r for s in servers for r in children(s)]


def service_processes(pid: int) -> list[int]:
    """Every process the service ``pid`` started: its children and the fork server's."""
    kids = children(pid)
    return kids + [r for k in kids if "multiprocessing.forkserver" in cmdline(k) for r in children(k)]
