"""Fencing in the data path (docs/failure-scenarios.md, "A paused writer and its standby"):
a writer process stopped (SIGSTOP) at each step of a publication, past its lease; a
second writer takes the lease over, fences, publishes the rest of the stream; the first
is woken (SIGCONT): it publishes nothing (no visible file, no Delta commit, no manifest
change, no Iceberg snapshot) and stops with one line naming the take-over; the
changefeed holds every transaction once, gapless, in order. Local and S3 (moto's server),
plain, Delta and Iceberg (on S3 with a SQLite catalog in the test's directory, shared by
both writers).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from olr_buffer.sinks.parquet import Location, compact, list_files
from olr_buffer.store import LeaseHeldError
from tests.fault_helpers import cli, one_line_error
from tests.test_changefeed_iceberg import iceberg_table

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
    ("after_decide", ("parquet", "delta", "iceberg")),  # decided in the manifest, not yet visible
    ("after_rename", ("parquet", "delta", "iceberg")),  # visible; no Delta commit, no manifest yet
    ("before_delta_commit", ("delta",)),  # visible; the Delta commit about to be written
    ("before_iceberg_commit", ("iceberg",)),  # visible; the Iceberg commit about to be made
    ("iceberg_manifests_written", ("iceberg",)),  # its snapshot's manifests written, the catalog not told
]
CASES = [
    pytest.param(where, fmt, point, id=f"{where}-{fmt}-{point}")
    for where in ("local", "s3")
    for point, formats in POINTS
    for fmt in formats
]


def _worker(
    cf: str,
    queue_id: str,
    per_file: int,
    fmt: str,
    fault: str | None = None,
    catalog: str | None = None,
    ttl: float = 2.0,
) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "OLR_BUFFER_FAULT"}
    env["PYTHONPATH"] = str(ROOT)
    if fault:
        env["OLR_BUFFER_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sinks.parquet.fence_worker", cf, queue_id]
        + ["--total", str(TOTAL), "--per-file", str(per_file), "--format", fmt, "--ttl", str(ttl)]
        + (["--iceberg-catalog", catalog] if catalog else []),
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


def _state(cf: str, catalog: str | None) -> dict[str, str]:
    """Every object of the changefeed but the temporary ones and the lease, by content hash:
    what a writer publishes (files, Delta log entries, the manifest); an Iceberg table: its
    current metadata file, as its catalog names it (a commit that failed may leave files
    under _iceberg/metadata/ that no snapshot names: no reader sees them)."""
    store = Location(cf).store
    out = {}
    for obj in store.list("", recursive=True):
        if obj.name.startswith(("_olr_buffer/tmp/", "_iceberg/")) or obj.name == "_olr_buffer/lease.json":
            continue
        out[obj.name] = hashlib.sha256(store.read(obj.name)).hexdigest()
    if store.list("_iceberg/metadata/"):
        out["(iceberg)"] = iceberg_table(cf, catalog).metadata_location
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


def _xids_iceberg(cf: str, catalog: str | None) -> list[tuple[int, str]]:
    t = iceberg_table(cf, catalog).scan(selected_fields=("tx_seq", "xid")).to_arrow()
    return sorted(zip(t.column("tx_seq").to_pylist(), t.column("xid").to_pylist()))


@pytest.mark.parametrize("where,fmt,point", CASES)
def test_a_writer_paused_past_its_lease_publishes_nothing_after_the_take_over(where, fmt, point, tmp_path, request):
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}" if where == "s3" and fmt == "iceberg" else None
    old = _worker(cf, "queue-old", OLD_PER_FILE, fmt, fault=f"{point}:2:stop", catalog=catalog)  # its second file
    try:
        _wait_stopped(old)
        new = _worker(cf, "queue-new", NEW_PER_FILE, fmt, catalog=catalog)
        code, out, err = _finish(new)
        assert code == 0 and out.splitlines()[-1] == "DONE", (code, out, err)
        before = _state(cf, catalog)
        os.kill(old.pid, signal.SIGCONT)
        code, out, err = _finish(old)
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, (code, out, err)
    assert lines[0].startswith("olr-buffer: error: ") and "taken over" in lines[0], lines
    assert _state(cf, catalog) == before  # nothing published after the take-over, not even the manifest
    expected = [(i, f"x{i}") for i in range(TOTAL)]
    assert _xids_plain(cf) == expected
    if fmt == "delta":
        assert _xids_delta(cf) == expected
    if fmt == "iceberg":
        assert _xids_iceberg(cf, catalog) == expected


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


@pytest.mark.parametrize("where", ["local", "s3"])
@pytest.mark.parametrize(
    "fault",
    [
        "after_rename:2",
        "before_iceberg_commit:2",
        "iceberg_manifests_written:2",
        "before_iceberg_commit:1",  # its first file: the table holds nothing yet
    ],
)
def test_an_iceberg_writer_woken_before_the_new_holder_commits_makes_no_commit(where, fault, tmp_path, request):
    """The old writer paused with its file decided and visible, before its Iceberg commit;
    the new holder took over and is itself paused before its first Iceberg commit (of that
    very file: published, not committed); the old writer, woken first, must not commit it
    (the table carries the new generation from the take-over on), and stops with the line.
    Then the new holder commits it and the rest: every transaction once."""
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}" if where == "s3" else None
    old = _worker(cf, "queue-old", OLD_PER_FILE, "iceberg", fault=f"{fault}:stop", catalog=catalog)
    new = None
    try:
        _wait_stopped(old)
        new = _worker(cf, "queue-new", NEW_PER_FILE, "iceberg", fault="before_iceberg_commit:1:stop", catalog=catalog)
        _wait_stopped(new)  # took over, fenced; its first Iceberg commit about to be made
        before = _state(cf, catalog)
        os.kill(old.pid, signal.SIGCONT)
        code, out, err = _finish(old)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 1 and len(lines) == 1, (code, out, err)
        assert lines[0].startswith("olr-buffer: error: ") and "taken over" in lines[0], lines
        assert _state(cf, catalog) == before  # not one commit after the take-over
        os.kill(new.pid, signal.SIGCONT)
        code, out, err = _finish(new)
        assert code == 0 and out.splitlines()[-1] == "DONE", (code, out, err)
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    expected = [(i, f"x{i}") for i in range(TOTAL)]
    assert _xids_plain(cf) == expected
    assert _xids_iceberg(cf, catalog) == expected


@pytest.mark.parametrize("where", ["local", "s3"])
def test_compact_in_place_is_refused_while_a_writer_holds_the_lease(where, tmp_path, request):
    """A changefeed written under a lease (a local one too): ``compact --in-place`` takes
    the lease as a writer does, so it is refused while a service holds it, and changes
    nothing."""
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    holder = _worker(cf, "queue-a", 1, "parquet", fault="before_stage:4:stop", ttl=60)  # 3 files, lease held
    try:
        _wait_stopped(holder)
        before = _state(cf, None)
        done = cli("compact", cf, "--in-place", "--i-know-no-reader-is-running", "--target-rows", "3")
        one_line_error(done, "changefeed is written by writer")
        assert _state(cf, None) == before
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_writer_woken_right_after_its_take_over_adopts_nothing(where, tmp_path, request):
    """The old writer paused right after it took the lease, before it read the changefeed
    (no Iceberg table yet); the new holder makes the table, publishes a file and is paused
    before committing it; the old writer, woken, finds that file missing from the manifest:
    its conditional manifest write fails before it logs or commits anything (no audit-log
    line, no Iceberg commit), and it leaves the new holder's manifest and lease alone
    though it made the changefeed. The new holder goes on."""
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    catalog = f"sqlite:///{tmp_path / 'catalog.db'}" if where == "s3" else None
    old = _worker(cf, "queue-old", OLD_PER_FILE, "iceberg", fault="after_take_over:1:stop", catalog=catalog)
    new = None
    try:
        _wait_stopped(old)
        new = _worker(cf, "queue-new", NEW_PER_FILE, "iceberg", fault="before_iceberg_commit:1:stop", catalog=catalog)
        _wait_stopped(new)  # its first file published, not yet committed
        before = _state(cf, catalog)
        os.kill(old.pid, signal.SIGCONT)
        code, out, err = _finish(old)
        lines = [line for line in err.splitlines() if line.strip()]
        assert code == 1 and len(lines) == 1, (code, out, err)
        assert lines[0].startswith("olr-buffer: error: ") and "taken over" in lines[0], lines
        assert _state(cf, catalog) == before  # not one commit after the take-over
        os.kill(new.pid, signal.SIGCONT)
        code, out, err = _finish(new)
        assert code == 0 and out.splitlines()[-1] == "DONE", (code, out, err)
    finally:
        for proc in (old, new):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
    expected = [(i, f"x{i}") for i in range(TOTAL)]
    assert _xids_plain(cf) == expected
    assert _xids_iceberg(cf, catalog) == expected


def _compact_when_free(cf: str, target_rows: int):
    """``compact --in-place`` as soon as the lease is free (its holder paused past it)."""
    deadline = time.monotonic() + DEADLINE
    while True:
        try:
            return compact(cf, in_place=True, no_reader_running=True, target_rows=target_rows, durable=False)
        except LeaseHeldError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.parametrize("where", ["local", "s3"])
def test_compact_in_place_takes_a_changefeed_over_from_a_paused_writer(where, tmp_path, request):
    """A writer paused past its lease with a publication decided (not yet visible): the
    compaction takes the lease over as a writer would, finishes that publication, compacts
    it with the rest, and writes the manifest stamped with its own generation; the writer,
    woken, publishes nothing (the file the compaction replaced does not come back) and
    stops with the line. The next writer goes on after the compacted file."""
    cf = str(tmp_path / "changefeed") if where == "local" else request.getfixturevalue("s3_uri")
    old = _worker(cf, "queue-a", OLD_PER_FILE, "parquet", fault="after_decide:2:stop")  # 3..5 decided
    try:
        _wait_stopped(old)
        result = _compact_when_free(cf, 2 * OLD_PER_FILE)
        assert result.files_merged == 2 and result.next_tx_seq == 2 * OLD_PER_FILE
        loc = Location(cf)
        assert [f.name for f in list_files(loc)] == ["part-00000000000000000000-00000000000000000005.parquet"]
        manifest = orjson.loads(loc.store.read("_olr_buffer/manifest.json"))
        assert "pending" not in manifest and manifest["lease"]["generation"] > 1, manifest
        before = _state(cf, None)
        os.kill(old.pid, signal.SIGCONT)
        code, out, err = _finish(old)
    finally:
        if old.poll() is None:
            old.kill()
            old.wait()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1, (code, out, err)
    assert lines[0].startswith("olr-buffer: error: ") and "taken over" in lines[0], lines
    assert _state(cf, None) == before
    code, out, err = _finish(_worker(cf, "queue-a", OLD_PER_FILE, "parquet"))
    assert code == 0 and out.splitlines()[0] == f"OPEN {2 * OLD_PER_FILE}", (code, out, err)
    assert _xids_plain(cf) == [(i, f"x{i}") for i in range(TOTAL)]
