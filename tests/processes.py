"""The processes of a running service, as /proc shows them: the tests that kill a reader
process, or the service under its readers, find them here."""

from __future__ import annotations

from pathlib import Path


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
