"""The local store: link-into-place creation, modes, staging, URIs; and, for both stores,
objects that a SIGKILLed writer left are whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
