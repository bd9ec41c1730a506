"""Segment cleanup by confirmed position, retention, and `olr-buffer status`, on real queues."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from olr_buffer.errors import OlrBufferError
from olr_buffer.runtime import Pipeline, PipelineOptions, replay
from olr_buffer.status import queue_status
from tests.contract_model import assert_changefeed_equal, expected_changefeed, load_changefeed

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

SMALL = dict(segment_bytes=32 * 1024, block_records=64, checkpoint_seconds=0.0, file_rows=200)


def write_long_and_short(root: Path, *, long_open: bool) -> None:
    """Thread 1: transaction L begins first and gets a row every 25 small transactions;
    it commits at the very end (or never, with ``long_open``: thread 1 ends with an ``lwn``
    there instead). Thread 2: small ones."""
    root.mkdir(parents=True, exist_ok=True)
    per = {1: [], 2: []}
    scn = 100
    per[1].append({"op": "begin", "scn": scn, "xid": "L", "tm": 1_700_000_000_000_000_000})
    for i in range(1500):
        t = 1 + i % 2
        scn += 1
        x = f"S{i}"
        per[t].append({"op": "begin", "scn": scn, "xid": x})
        per[t].append(
            {
                "op": "insert",
                "scn": scn,
                "sub": 1,
                "xid": x,
                "owner": "A",
                "table": "T",
                "rid": f"r{i}",
                "after": {"i": i, "pad": "x" * 80},
            }
        )
        per[t].append({"op": "commit", "scn": scn, "sub": 2, "xid": x})
        if i % 25 == 0:
            per[1].append(
                {
                    "op": "insert",
                    "scn": scn + 1,
                    "xid": "L",
                    "owner": "A",
                    "table": "L",
                    "rid": f"l{i}",
                    "after": {"i": i},
                }
            )
            scn += 1
    scn += 1
    if long_open:
        # both threads have written everything up to here: under `run`, every small
        # transaction is safe, and only L holds segments. (Without thread 2's `lwn`, its
        # last transaction, S1499, would wait for the watermark for ever: a thread's last
        # record says only that every SCN below its own is written. Its block would hold
        # cleanup too, and, when thread 2's reader ran ahead of thread 1's first block, be
        # the one that holds it: status would rightly name S1499, not L.)
        per[1].append({"op": "lwn", "scn": scn})
        per[2].append({"op": "lwn", "scn": scn})
    else:
        per[1].append({"op": "commit", "scn": scn, "xid": "L"})
    for t, recs in per.items():
        with open(root / f"redo_{t}_1.jsonl", "w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in recs)


def test_long_transaction_across_many_segments_survives_cleanup(tmp_path: Path):
    write_long_and_short(tmp_path / "in", long_open=False)
    s = replay(str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL))
    assert s.segments_deleted > 5  # cleanup ran many times while L was open
    expected = expected_changefeed(tmp_path / "in")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected.rows)
    assert expected.rows[-1]["xid"] == "L" and sum(r["xid"] == "L" for r in expected.rows) == 60
    # everything published: the queue is down to its current segment
    assert s.queue_segments == 1
    assert len(list((tmp_path / "q" / "segments").glob("seg-*.mdb"))) == 1


def test_open_transaction_pins_its_segments_and_status_shows_it(tmp_path: Path):
    write_long_and_short(tmp_path / "in", long_open=True)
    s = replay(str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL))
    assert s.open_transactions == 1
    doc = queue_status(str(tmp_path / "q"))
    ot = doc["open_transactions"]
    assert ot["count"] == 1 and ot["oldest"]["xid"] == "L" and ot["largest"]["rows"] == 60
    assert ot["oldest"]["age_seconds"] > 0
    # L's first block is kept, with everything after it; only what lies wholly before it
    # (blocks of thread 2 appended before thread 1's first one) may have gone
    first = ot["oldest"]["first_index"]
    assert doc["cleanup"]["needed_from_index"] == first and doc["cleanup"]["segments_freeable"] == 0
    assert doc["segments"]["first_index"] <= first and doc["segments"]["count"] > 5
    assert doc["changefeed"]["last_tx_seq"] == 1499
    assert doc["watermark"] == min(doc["progress"].values()) > 0
    assert set(doc["readers"]) == {"1", "2"} and all(r["finished"] for r in doc["readers"].values())
    text = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "q")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "open transactions: 1 " in text and "oldest: L" in text and "last tx_seq 1499" in text


def test_retention_keeps_segments_cleanup_could_delete(tmp_path: Path):
    write_long_and_short(tmp_path / "in", long_open=False)
    s = replay(
        str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL, retain_segments=3)
    )
    assert s.queue_segments == 4  # the current one and three retained
    doc = queue_status(str(tmp_path / "q"))
    assert doc["cleanup"]["segments_freeable"] == 3  # what a run without retention would free
    s2 = replay(
        str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL, retain_seconds=3600)
    )
    assert s2.queue_segments == 4 and s2.transactions_published == 0


def test_status_of_a_missing_queue_is_a_clean_error(tmp_path: Path):
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 1 and r.stderr.strip().endswith("no queue here (hint: check --queue)")


def _status(queue: Path, *extra: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(queue), *extra],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


STATUS_KEYS = {
    "queue",
    "state",
    "failure",
    "as_of",
    "owner",
    "role",
    "segments",
    "readers",
    "checkpoint",
    "watermark",
    "progress",
    "threads_in_play",
    "waiting_for",
    "thread_states",
    "open_transactions",
    "changefeed",
    "cleanup",
    "totals",
    "receivers",
}


def test_status_before_anything_was_dispatched_has_every_key_and_no_made_up_numbers(tmp_path: Path):
    """A new queue, then one whose replay published nothing (its one transaction is open):
    --json has the same keys as later (null where nothing is known yet), and the text says
    "none yet" rather than -1 or None."""
    from olr_buffer.txbuffer import LmdbQueue

    LmdbQueue(str(tmp_path / "new")).close()
    doc = json.loads(_status(tmp_path / "new", "--json"))
    assert set(doc) == STATUS_KEYS and doc["checkpoint"] is None and doc["watermark"] is None
    assert doc["waiting_for"] == [] and doc["thread_states"] == {}
    text = _status(tmp_path / "new")
    assert "no record" in text and "no dispatcher checkpoint yet" in text and " -1" not in text, text

    inp = tmp_path / "in"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_text(
        '{"op":"begin","scn":5,"xid":"X"}\n{"op":"insert","scn":6,"xid":"X","owner":"A","table":"T","rid":"r",'
        '"after":{"a":1}}\n'
    )
    s = replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL))
    assert s.transactions_published == 0
    doc = json.loads(_status(tmp_path / "q", "--json"))
    assert set(doc) == STATUS_KEYS and doc["changefeed"]["last_tx_seq"] is None
    assert doc["open_transactions"]["count"] == 1
    text = _status(tmp_path / "q")
    assert "nothing published yet" in text and "None" not in text and "..-1" not in text, text


def test_status_running_follows_the_lock_not_the_pid_left_in_its_file(tmp_path: Path):
    """The queue's LOCK keeps the pid of its last owner; status says running only while a
    process holds the lock: this one while it has the queue open, then nobody, and
    nobody after an owner killed with SIGKILL (whose pid may be reused by then)."""
    from olr_buffer.txbuffer import LmdbQueue

    q = LmdbQueue(str(tmp_path / "q"))
    doc = queue_status(str(tmp_path / "q"))
    assert doc["state"] == "running" and doc["owner"] == {"pid": os.getpid(), "running": True}
    q.close()
    assert (tmp_path / "q" / "LOCK").read_text().strip() == str(os.getpid())  # still there, and alive
    doc = queue_status(str(tmp_path / "q"))
    assert doc["state"] == "stopped" and doc["owner"] == {"pid": None, "running": False}

    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            (
                "import sys, time; from olr_buffer.txbuffer import LmdbQueue; q = LmdbQueue(sys.argv[1]); "
                "print('open', flush=True); time.sleep(60)"
            ),
            str(tmp_path / "q"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout.readline().strip() == "open"
        assert queue_status(str(tmp_path / "q"))["owner"] == {"pid": child.pid, "running": True}
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert queue_status(str(tmp_path / "q"))["owner"] == {"pid": None, "running": False}
    assert ": stopped, as of " in _status(tmp_path / "q").splitlines()[0]


def run_until_logged(
    input_dir: Path,
    queue: Path,
    changefeed: Path,
    text: str,
    timeout: float = 60.0,
    *,
    until: Callable[[], bool] = lambda: True,
    started: Callable[[], None] = lambda: None,
) -> str:
    """Run ``olr-buffer run`` with small segments until its log (stderr) has ``text`` and
    ``until()`` holds, then stop it with SIGTERM; returns the log. ``started()`` is called
    once the run is started."""
    log_path = queue.parent / "run.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "olr_buffer.cli",
                "run",
                str(input_dir),
                "--queue",
                str(queue),
                "--changefeed",
                str(changefeed),
                "--segment-size",
                "32KiB",
                "--block-records",
                "64",
                "--checkpoint-interval",
                "0.2",
                "--poll-interval",
                "0.05",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            started()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and proc.poll() is None:
                if text in log_path.read_text() and until():
                    break
                time.sleep(0.2)
            time.sleep(1.0)  # more checkpoints: the warning is not repeated
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == 0, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    return log_path.read_text()


def _status_now(queue: Path) -> dict | None:
    """The status of a queue being written, or None before the run made it."""
    try:
        return queue_status(str(queue))
    except OlrBufferError:
        return None


def _published_all_small(queue: Path) -> bool:
    doc = _status_now(queue)
    return doc is not None and (doc["changefeed"] or {}).get("last_tx_seq") == 1499


@pytest.mark.parametrize("order", ["together", "thread_2_first"])
def test_a_transaction_that_never_ends_is_named_by_status_and_warned_once(tmp_path: Path, order: str):
    """``thread_2_first``: thread 1's reader is held back (its first line not ended) until
    thread 2's has read its whole file, so that L's first block lies above every block
    of thread 2 (as when thread 1's reader starts late on a loaded machine): once the
    small transactions are published, L alone holds cleanup all the same."""
    write_long_and_short(tmp_path / "in", long_open=True)
    first = tmp_path / "in" / "redo_1_1.jsonl"
    whole = first.read_bytes()
    thread_2_lines = len((tmp_path / "in" / "redo_2_1.jsonl").read_bytes().splitlines())

    def hold_thread_1_back() -> None:
        if order != "thread_2_first":
            return
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            doc = _status_now(tmp_path / "q")
            if doc is not None and doc["readers"].get("2", {}).get("line") == thread_2_lines:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("thread 2's reader never read its whole file")
        with open(first, "ab") as fh:
            fh.write(whole[whole.index(b"\n") :])  # thread 1's first line ends, and the rest follows

    if order == "thread_2_first":
        first.write_bytes(whole[: whole.index(b"\n")])  # a line not ended: not read yet
    log = run_until_logged(
        tmp_path / "in",
        tmp_path / "q",
        tmp_path / "cf",
        "transaction L",
        until=lambda: _published_all_small(tmp_path / "q"),  # then only L holds cleanup
        started=hold_thread_1_back,
    )
    warnings = [ln for ln in log.splitlines() if "WARNING" in ln]
    about_l = [ln for ln in warnings if "transaction L (from scn 100) has not ended and keeps" in ln]
    assert len(about_l) == 1, log
    # another warning can only be of a small transaction in flight at two checkpoints in a
    # row (its end in a block of a reader descheduled meanwhile): it ended, and was published
    # (other warnings, e.g. a reader stalled a minute on a loaded machine, say nothing of it)
    of_tx = [ln for ln in warnings if ln not in about_l and "has not ended" in ln]
    others = [ln.split("transaction ", 1)[1].split(" ", 1)[0] for ln in of_tx]
    published = {r["xid"] for r in load_changefeed(tmp_path / "cf")}
    assert all(x.startswith("S") and x in published for x in others), log
    doc = queue_status(str(tmp_path / "q"))
    c = doc["cleanup"]
    assert c["held_by"]["xid"] == "L" and not c["held_by"]["ended"] and c["segments_held"] > 5, c
    assert doc["changefeed"]["last_tx_seq"] == 1499  # every small transaction published
    assert c["bytes_held"] == sum(s["bytes"] for s in doc["segments"]["list"][:-1])
    text = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "q")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "held by transaction L (from scn 100, " in text and f"keeps {c['segments_held']} segment(s)" in text, text


def test_the_held_warning_waits_for_the_same_transaction_at_two_checkpoints(tmp_path: Path, monkeypatch, caplog):
    """A transaction seen holding segments at one checkpoint only may be in flight (its end
    in a block another thread's reader has not appended yet): no warning for it; the one
    seen at two checkpoints in a row is warned about, once."""
    write_long_and_short(tmp_path / "in", long_open=True)
    replay(str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL))
    p = Pipeline(str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), PipelineOptions(**SMALL))
    try:
        held = p.dispatcher.oldest_unended()
        assert held is not None and held.xid == "L"
        in_flight = msgspec.structs.replace(held, xid="S-in-flight")  # holds as much, seen once
        seen = iter([in_flight, held, held, held, in_flight, in_flight])
        monkeypatch.setattr(p.dispatcher, "oldest_unended", lambda: next(seen))
        with caplog.at_level(logging.WARNING, logger="olr_buffer"):
            for _ in range(6):
                p.checkpointer.warn_held()
        warned = [r.getMessage() for r in caplog.records if "has not ended" in r.getMessage()]
        assert len(warned) == 2, warned
        assert warned[0].startswith("transaction L (from scn 100) has not ended and keeps")
        assert warned[1].startswith("transaction S-in-flight ")  # at two checkpoints in a row at the end
    finally:
        p.close()
