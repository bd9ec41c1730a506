"""The local store: link-into-place creation, modes, staging, URIs; and, for both stores,
objects that a SIGKILLed writer left are whole."""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from olr_buffer.store import ObjectExistsError, StoreError, open_store
from olr_buffer.store.local import STAGING, LocalStore
from tests.store.create_loop import SIZE, content

ROOT = Path(__file__).resolve().parents[2]


def test_create_leaves_no_temporary_file(tmp_path):
    store = LocalStore(tmp_path / "cf")
    store.create("part-a.parquet", b"1")
    with pytest.raises(ObjectExistsError):
        store.create("part-a.parquet", b"2")
    store.replace("_olr_buffer/manifest.json", b"{}")
    assert os.listdir(tmp_path / "cf" / STAGING) == []


def test_create_from_file_links_the_file_in_place(tmp_path):
    store = LocalStore(tmp_path / "cf")
    (tmp_path / "cf").mkdir(mode=0o700)
    src = tmp_path / "cf" / ".tmp-part-0.parquet"
    src.write_bytes(b"parquet bytes")
    store.create_from_file("part-0.parquet", src)
    assert os.stat(src).st_ino == os.stat(tmp_path / "cf" / "part-0.parquet").st_ino  # no copy
    assert os.stat(tmp_path / "cf" / "part-0.parquet").st_mode & 0o777 == 0o600


def test_modes_of_new_folders_and_files(tmp_path):
    store = LocalStore(tmp_path / "cf", mode=0o750)
    store.create("_delta_log/00000000000000000000.json", b"{}")
    assert os.stat(tmp_path / "cf").st_mode & 0o777 == 0o750
    assert os.stat(tmp_path / "cf" / "_delta_log").st_mode & 0o777 == 0o750
    assert os.stat(tmp_path / "cf" / "_delta_log" / "00000000000000000000.json").st_mode & 0o777 == 0o640


def test_a_failed_link_leaves_nothing_at_the_name(tmp_path):
    store = LocalStore(tmp_path / "cf")

    def no_link(src, dst):
        raise OSError(5, "Input/output error")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "link", no_link)
        with pytest.raises(StoreError, match="part-a.parquet: cannot create: Input/output error"):
            store.create("part-a.parquet", b"data")
    assert not store.exists("part-a.parquet")
    assert os.listdir(tmp_path / "cf" / STAGING) == []


def test_clear_staging_removes_what_a_crash_left(tmp_path):
    store = LocalStore(tmp_path / "cf")
    store.create("x", b"1")
    (tmp_path / "cf" / STAGING / "123-abc.tmp").write_bytes(b"half")
    assert store.clear_staging() == [f"{STAGING}/123-abc.tmp"]
    assert store.list(recursive=True)[0].name == "x" and len(store.list(recursive=True)) == 1


def test_uris(tmp_path):
    assert open_store(f"file://{tmp_path}/cf").root == f"{tmp_path}/cf"
    assert isinstance(open_store(tmp_path / "cf"), LocalStore)
    with pytest.raises(StoreError, match="unsupported scheme gs://"):
        open_store("gs://bucket/x")
    with pytest.raises(StoreError, match="file:///path"):
        open_store("file://host/x")


@pytest.mark.slow
def test_objects_are_whole_after_a_sigkill(store_uri, tmp_path):
    """A writer killed at random points of its creates leaves whole objects or none."""
    env = dict(os.environ)
    for kill in range(3):
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.store.create_loop", store_uri],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            for _ in range(2 + 5 * kill):  # created a few: it is in its loop
                assert proc.stdout.readline(), "the writer stopped"
            proc.send_signal(signal.SIGKILL)
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        store = open_store(store_uri)
        objects = store.list()
        assert objects
        for obj in objects:
            assert obj.size == SIZE, obj
            assert store.read(obj.name) == content(int(obj.name.split("-")[1]))
        # the next run goes on after the last name
        for obj in objects:
            store.delete(obj.name)
    store.clear_staging()


# a process inside a conditional replace: the store's lock (the flock a conditional replace
# holds while it compares and renames; docs/failure-scenarios.md names the file)
LOCK = f"{STAGING}/.replace-lock"
DEADLINE = 60.0

_HOLD_AND_STOP = """
import fcntl, os, signal, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)  # as a writer inside its compare-and-swap
print("holding", flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rpartition(")")[2].split()[0]


def _flocks_of(pid: int, path: str) -> list[str]:
    """The /proc/locks lines of ``pid``'s flocks of ``path``, held or waited for."""
    st = os.stat(path)
    device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    with open("/proc/locks") as fh:
        return [ln for ln in fh if f" {pid} {device} " in ln and "FLOCK" in ln]


@pytest.mark.e2e
def test_a_conditional_replace_waiting_for_a_stopped_holder_says_so_and_goes_on_when_it_ends(
    tmp_path, monkeypatch, caplog
):
    """A process paused inside a conditional replace (SIGSTOP, a frozen container) holds
    up every other one on the store: the waiting one says, once, after LOCK_WAIT_WARNING
    seconds, which process holds the lock and that it is stopped, and goes on as soon as
    that process ends."""
    import olr_buffer.store.local as local

    monkeypatch.setattr(local, "LOCK_WAIT_WARNING", 0.2)
    store = LocalStore(tmp_path / "s", durable=False)
    first = store.create("doc.json", b"1")
    os.makedirs(tmp_path / "s" / STAGING, exist_ok=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_AND_STOP, str(tmp_path / "s" / LOCK)], stdout=subprocess.PIPE, text=True
    )
    outcome: list[object] = []
    try:
        assert holder.stdout.readline() == "holding\n"
        waiter = threading.Thread(target=lambda: outcome.append(store.replace_if("doc.json", b"2", first.etag)))
        with caplog.at_level(logging.WARNING, logger="olr_buffer.store"):
            waiter.start()
            deadline = time.monotonic() + DEADLINE
            while time.monotonic() < deadline and not any("waited" in r.getMessage() for r in caplog.records):
                time.sleep(0.05)
            said = [r.getMessage() for r in caplog.records if "waited" in r.getMessage()]
            assert said and not outcome, said
            assert said[0].startswith(f"{tmp_path / 's' / LOCK}: a conditional write has waited ")
            assert f"held by pid {holder.pid} (stopped: " in said[0], said
        holder.kill()  # the lock goes with it
        waiter.join(DEADLINE)
        assert outcome and store.read("doc.json") == b"2"
        assert len(said) == 1
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


_INSIDE_THEN_STOP = """
import sys, threading, time
from olr_buffer.faults import fault_point
from olr_buffer.store.local import LocalStore
store = LocalStore(sys.argv[1], durable=False)
etag = store.read_versioned("doc.json").etag
done = []
writer = threading.Thread(target=lambda: done.append(store.replace_if("doc.json", b"2", etag)))
writer.start()
lock = sys.argv[2]
import os
st = os.stat(lock)
device = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
while not any(f"-> FLOCK" in ln and f" {os.getpid()} {device} " in ln for ln in open("/proc/locks")):
    time.sleep(0.01)  # the writer is inside its conditional replace, waiting for the lock
print("stopping", flush=True)
fault_point("probe")
print("woken", done, flush=True)
"""


@pytest.mark.e2e
def test_a_stop_fault_does_not_pause_the_process_inside_a_conditional_replace(tmp_path):
    """``OLR_BUFFER_FAULT=POINT:stop`` pauses its instant, not another thread's conditional
    replace in flight (a pause there holds up every writer of the store, a limit tested
    above): the stop waits for that replace to end. Here a thread of the process is
    inside one, waiting for the lock this test holds, when the main thread reaches its
    fault point: the process stops only once that replace is done, holding no lock."""
    store = LocalStore(tmp_path / "s", durable=False)
    store.create("doc.json", b"1")
    os.makedirs(tmp_path / "s" / STAGING, exist_ok=True)
    lock_path = str(tmp_path / "s" / LOCK)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # (this test is inside a conditional replace)
    env = dict(os.environ, OLR_BUFFER_FAULT="probe:stop", PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [sys.executable, "-c", _INSIDE_THEN_STOP, str(tmp_path / "s"), lock_path],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline() == "stopping\n"
        os.close(fd)  # its conditional replace goes on
        deadline = time.monotonic() + DEADLINE
        while _state(proc.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _state(proc.pid) == "T", "the process never stopped"
        assert store.read("doc.json") == b"2"  # the replace ended before the pause
        assert _flocks_of(proc.pid, lock_path) == []  # and holds no lock while paused
        os.kill(proc.pid, signal.SIGCONT)
        out, _ = proc.communicate(timeout=DEADLINE)
        assert out.startswith("woken [ObjectInfo("), out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
