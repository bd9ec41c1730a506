"""Threads in play, closed threads and late input, with real processes (issues 14, 16, 18).

* `run` never publishes with nothing in play: it refuses to start;
* a thread that appears later and is not in play: a WARNING, late records counted
  (metrics, `status`), nothing published out of order;
* input below what a complete-period replay published: a one-line error, not a silent skip;
* `close`: a closed thread does not hold the others back; it opens again with its next
  record; a record after a close below what was published is bad input; a rolling restart
  publishes exactly the contract's changefeed; SIGKILL while a thread is closed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from olr_buffer.errors import OlrBufferError
from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from tests.cli.conftest import status_json
from tests.contract_model import (
    assert_changefeed_equal,
    check_changefeed_layout,
    check_close_rule,
    expected_changefeed,
    load_changefeed,
    load_input,
)
from tests.live_writer import start_live_writer
from tests.test_run_service import ROOT, published_rows, run_cmd, start, stop, wait_for_rows

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`


def lines(*recs: dict[str, Any]) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def append(path: Path, *recs: dict[str, Any]) -> None:
    with open(path, "a") as fh:
        fh.write(lines(*recs))


def tx(xid: str, scn: int, rid: str) -> list[dict[str, Any]]:
    return [
        {"op": "begin", "scn": scn, "xid": xid},
        {"op": "insert", "scn": scn + 1, "xid": xid, "owner": "O", "table": "T", "rid": rid, "after": {"ID": rid}},
        {"op": "commit", "scn": scn + 2, "xid": xid, "tm": scn + 2},
    ]


# `run` with the readers as threads of the service (PipelineOptions(reader_processes=False)),
# which has no command-line flag: the same options as run_cmd, an error as the CLI prints it
_THREADS_SERVICE = """
import logging, signal, sys, threading
from olr_buffer.errors import OlrBufferError
from olr_buffer.runtime import PipelineOptions, run_service
live, q, cf, threads = sys.argv[1:5]
logging.basicConfig(level="WARNING", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
opts = PipelineOptions(reader_processes=False, flush_seconds=0.3, poll_seconds=0.02, checkpoint_seconds=0.5,
                       segment_bytes=128 << 10, threads=[int(t) for t in threads.split(",")] if threads else None)
try:
    run_service(live, q, cf, opts, stop)
except OlrBufferError as exc:
    print(f"olr-buffer: error: {exc}", file=sys.stderr)
    sys.exit(exc.exit_code)
"""


def service_cmd(tmp: Path, processes: bool, threads: str = "") -> list[str]:
    if processes:
        return run_cmd(tmp, *(("--threads", threads) if threads else ()))
    return [sys.executable, "-c", _THREADS_SERVICE, str(tmp / "live"), str(tmp / "q"), str(tmp / "cf"), threads]


def status(tmp: Path) -> dict:
    return status_json(tmp / "q")


def status_text(tmp: Path) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp / "q")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def wait_until(predicate, what: str, timeout: float = 30.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout}s: {what}")


def checkpoint_says(tmp: Path, key: str, value: Any) -> bool:
    try:
        return status(tmp).get(key) == value
    except (AssertionError, json.JSONDecodeError):
        return False


# -- issue 16: nothing in play ---------------------------------------------------------------


def test_run_with_no_thread_in_play_refuses_at_once(tmp_path: Path):
    (tmp_path / "live").mkdir()
    r = subprocess.run(run_cmd(tmp_path), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2
    err = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(err) == 1 and "no redo thread has log files yet" in err[0] and "--threads" in err[0], r.stderr
    assert published_rows(tmp_path / "cf") == 0


def test_a_refused_run_leaves_no_directory_behind(tmp_path: Path):
    """Issue 29.8: the refused run left new, empty queue and changefeed directories (and
    `status` then showed a queue). Two refused at once: neither leaves anything, whatever
    the interleaving (one may be refused because the other holds the new queue)."""
    (tmp_path / "live").mkdir()
    r = subprocess.run(run_cmd(tmp_path), capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 2, r.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()
    for _ in range(3):
        both = [start(run_cmd(tmp_path)) for _ in range(2)]
        for p in both:
            _, err = p.communicate(timeout=60)
            assert p.returncode in (1, 2) and "Traceback" not in err, err
            assert len([ln for ln in err.splitlines() if ln.strip()]) == 1, err
        assert sorted(os.listdir(tmp_path)) == ["live"], os.listdir(tmp_path)


def test_two_services_started_at_once_on_a_new_queue(tmp_path: Path):
    """One takes the new queue, the other is refused (in use): the refused one removes
    nothing of the queue and changefeed that the first one goes on with."""
    simulate(tmp_path / "live", threads=2, transactions=200, seed=29, records_per_file=100_000, compress_archived=False)
    cmd = run_cmd(tmp_path, "--threads", "1,2")
    both = [start(cmd) for _ in range(2)]
    deadline = time.monotonic() + 60
    while all(p.poll() is None for p in both):
        assert time.monotonic() < deadline, "neither was refused"
        time.sleep(0.05)
    refused = next(p for p in both if p.poll() is not None)
    running = next(p for p in both if p is not refused)
    err = refused.communicate(timeout=30)[1]
    assert refused.returncode == 1 and "in use by another process" in err, err
    model = expected_changefeed(tmp_path / "live")
    try:
        wait_for_rows(tmp_path / "cf", len(model.rows))
    finally:
        code, err = stop(running)
    assert code == 0, err
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), model.rows)


def test_run_started_before_the_capture_with_threads_equals_replay(tmp_path: Path):
    """The reproduction of issue 16, with --threads: the service waits (and says for what),
    then publishes exactly what replay publishes from the same files."""
    simulate(tmp_path / "stage", threads=3, transactions=300, seed=16, records_per_file=100_000)
    live = tmp_path / "live"
    live.mkdir()
    service = start(run_cmd(tmp_path, "--threads", "1,2,3", "--log-level", "info"))
    try:
        wait_until(lambda: checkpoint_says(tmp_path, "waiting_for", [1, 2, 3]), "status names the threads waited for")
        assert "waiting for the first records of thread(s) 1, 2, 3" in status_text(tmp_path)
        shutil.copy(tmp_path / "stage" / "redo_1_1.jsonl", live)
        time.sleep(1.5)
        assert published_rows(tmp_path / "cf") == 0  # threads 2 and 3 have not written yet
        wait_until(lambda: checkpoint_says(tmp_path, "waiting_for", [2, 3]), "status waits for 2 and 3")
        st = status(tmp_path)
        assert st["thread_states"] == {"1": "open", "2": "waiting", "3": "waiting"}, st["thread_states"]
        assert st["progress"]["2"] is None and st["progress"]["1"] > 0, st["progress"]
        text = status_text(tmp_path)
        assert "2 waiting for its first record" in text and "2=none yet" in text and "=-1" not in text, text
        for t in (2, 3):
            shutil.copy(tmp_path / "stage" / f"redo_{t}_1.jsonl", live)
        expected = expected_changefeed(live)
        wait_for_rows(tmp_path / "cf", len(expected.rows))
    finally:
        code, err = stop(service)
    assert code == 0, err
    assert "waiting for the first records of redo thread(s) 1, 2, 3" in err
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected.rows)
    replay(str(live), str(tmp_path / "rq"), str(tmp_path / "rcf"))
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), load_changefeed(tmp_path / "rcf"))


# -- issue 16 / 18.3: a thread that appears later, not in play --------------------------------


def test_thread_appearing_later_not_in_play_is_late_warned_counted(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "r1"), {"op": "lwn", "scn": 100}))
    (live / "redo_2_1.jsonl").write_text(lines({"op": "lwn", "scn": 100}))
    service = start(run_cmd(tmp_path, "--metrics-port", "0", "--log-level", "info"))
    port = None
    try:
        t0 = time.monotonic()
        while port is None and time.monotonic() - t0 < 20:
            line = service.stderr.readline()
            if "metrics on http://127.0.0.1:" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
        assert port, "no metrics address logged"
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
        # thread 3 appears: a whole transaction below the published commit 12, and a row of A
        (live / "redo_3_1.jsonl").write_text(
            lines(
                *tx("B", 5, "r2"),
                {"op": "insert", "scn": 11, "xid": "A", "owner": "O", "table": "T", "rid": "r3", "after": {"ID": "r3"}},
            )
        )
        wait_until(lambda: (status(tmp_path).get("totals") or {}).get("late_records") == 4, "4 late records in status")
        time.sleep(1.2)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        text = status_text(tmp_path)
    finally:
        code, err = stop(service)
    assert code == 0, err
    warnings = [ln for ln in err.splitlines() if " WARNING " in ln]
    assert any("redo thread 3 appeared after the start and is not in play" in ln for ln in warnings), err
    assert any("redo thread 3: 4 late record(s)" in ln for ln in warnings), err
    assert "olr_buffer_late_records_total 4" in metrics
    assert 'olr_buffer_thread_state{state="open",thread="3"} 1' in metrics
    assert "late records: 4 (in 1 whole transaction(s)" in text
    assert "3 open (not in play)" in text
    assert [(r["xid"], r["rid"]) for r in load_changefeed(tmp_path / "cf")] == [("A", "r1")]


# -- issue 18.2: replay, then more input below what it published ------------------------------


def test_input_below_what_a_complete_replay_published_is_an_error(tmp_path: Path):
    simulate(tmp_path / "full", threads=3, transactions=400, seed=18, records_per_file=250, compress_archived=False)
    h = tmp_path / "h"
    h.mkdir()
    for t in (1, 2, 3):
        for s in (1, 2):
            shutil.copy(tmp_path / "full" / f"redo_{t}_{s}.jsonl", h)
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "replay",
        str(h),
        "--queue",
        str(tmp_path / "q"),
        "--changefeed",
        str(tmp_path / "cf"),
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert first.returncode == 0, first.stderr
    rows = load_changefeed(tmp_path / "cf")
    c = max(r["c_scn"] for r in rows)
    for t in (1, 2, 3):
        shutil.copy(tmp_path / "full" / f"redo_{t}_3.jsonl", h)
    below = [
        (r.thread, r.line, r.scn)
        for r in load_input(h)
        if r.sequence == 3 and r.line == 1 and r.scn <= c and r.op not in ("lwn", "close")
    ]
    assert below, "the workload must put a sequence 3 below the published commit"
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert second.returncode == 3, second.stdout + second.stderr
    err = [ln for ln in second.stderr.splitlines() if ln.strip()]
    assert len(err) == 1, second.stderr
    m = re.search(
        r"redo_(\d)_3\.jsonl:1: record at scn (\d+) is at or below commit scn (\d+), already published", err[0]
    )
    assert m, err[0]
    assert (int(m.group(1)), 1, int(m.group(2))) in below and int(m.group(3)) == c
    # not a bad line to fix and run again: say what can be done instead
    assert "into a new queue and changefeed" in err[0] and "fix them" not in err[0], err[0]
    assert load_changefeed(tmp_path / "cf") == rows  # nothing more, nothing out of order


# -- issue 29.4: a thread that a later replay brings -------------------------------------------


@pytest.mark.parametrize("processes", [True, False], ids=["reader-processes", "reader-threads"])
def test_a_thread_a_later_replay_brings_below_what_was_published_is_refused(tmp_path: Path, processes: bool):
    """Replay threads 1 and 2 (taken as the complete input), then thread 3's files too:
    its transactions interleave with what was published, so they cannot be published in
    commit order. Refused, exit 3, one line naming the thread; never exit 0 with them lost."""
    simulate(tmp_path / "full", threads=3, transactions=300, seed=29, records_per_file=200, compress_archived=False)
    h = tmp_path / "h"
    h.mkdir()
    for f in (tmp_path / "full").glob("redo_[12]_*.jsonl"):
        shutil.copy(f, h)
    opts = PipelineOptions(reader_processes=processes)
    replay(str(h), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
    rows = load_changefeed(tmp_path / "cf")
    for f in (tmp_path / "full").glob("redo_3_*.jsonl"):
        shutil.copy(f, h)
    if processes:  # the CLI, as a user runs it: the error as printed, the exit code
        cmd = [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "replay",
            str(h),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
        ]
        for _ in range(2):  # and the same again: still refused, nothing published
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
            assert done.returncode == 3, done.stdout + done.stderr
            err = [ln for ln in done.stderr.splitlines() if ln.strip()]
            assert len(err) == 1, done.stderr
            assert re.search(
                r"redo_3_1\.jsonl:1: record at scn \d+ is at or below commit scn \d+, already "
                r"published \(redo thread 3 is new to this queue",
                err[0],
            ), err[0]
            assert "replay the logs of every thread together into a new queue and changefeed" in err[0], err[0]
    else:
        with pytest.raises(OlrBufferError, match="redo thread 3 is new to this queue") as caught:
            replay(str(h), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
        assert caught.value.exit_code == 3
    assert load_changefeed(tmp_path / "cf") == rows
    # what the hint says gives the whole changefeed
    replay(str(h), str(tmp_path / "q2"), str(tmp_path / "cf2"), opts)
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), expected_changefeed(h).rows)


def test_a_thread_a_later_replay_brings_above_what_was_published_is_published(tmp_path: Path):
    """A thread whose records all lie above the last published commit (an instance that
    started after the first period) is published exactly, with the next period of the others."""
    h = tmp_path / "h"
    h.mkdir()
    (h / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "a")))
    (h / "redo_2_1.jsonl").write_text(lines(*tx("B", 20, "b")))
    replay(str(h), str(tmp_path / "q"), str(tmp_path / "cf"))
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == ["A", "B"]
    (h / "redo_3_1.jsonl").write_text(lines(*tx("C", 50, "c"), *tx("E", 70, "e")))
    (h / "redo_1_2.jsonl").write_text(lines(*tx("D", 60, "d")))
    summary = replay(str(h), str(tmp_path / "q"), str(tmp_path / "cf"))
    assert summary.late_records == 0
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(h).rows)
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == ["A", "B", "C", "D", "E"]


# -- issue 14: close ---------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [True, False], ids=["reader-processes", "reader-threads"])
def test_close_does_not_stall_the_others_and_survives_sigkill(tmp_path: Path, processes: bool):
    """Thread 1 closes while distributed transaction D spans it; commits on thread 2 are
    published while it is closed; SIGKILL while closed; it opens again; the changefeed is
    exactly the contract's."""
    live = tmp_path / "live"
    live.mkdir()
    t1, t2 = live / "redo_1_1.jsonl", live / "redo_2_1.jsonl"
    t1.write_text(
        lines(
            *tx("A", 10, "a"),
            {"op": "insert", "scn": 21, "xid": "D", "owner": "O", "table": "T", "rid": "d1", "after": {"ID": "d1"}},
            {"op": "close", "scn": 22},
        )
    )
    t2.write_text(
        lines(
            {"op": "begin", "scn": 20, "xid": "D"},
            {"op": "insert", "scn": 23, "xid": "D", "owner": "O", "table": "T", "rid": "d2", "after": {"ID": "d2"}},
            {"op": "commit", "scn": 24, "xid": "D"},
            *tx("B", 30, "b"),
            {"op": "lwn", "scn": 40},
        )
    )
    cmd = service_cmd(tmp_path, processes, "1,2")
    service = start(cmd)
    try:
        t0 = time.monotonic()
        wait_for_rows(tmp_path / "cf", 4, timeout=20)  # A, D (both rows), B: thread 1 is closed at 22
        latency = time.monotonic() - t0
        wait_until(lambda: (status(tmp_path).get("thread_states") or {}).get("1") == "closed", "status: 1 closed")
        os.kill(service.pid, signal.SIGKILL)
        service.wait(timeout=30)
        service = start(cmd)
        append(t2, *tx("C", 50, "c"), {"op": "lwn", "scn": 60})
        wait_for_rows(tmp_path / "cf", 5, timeout=20)  # still closed after the restart: C goes through
        append(t1, *tx("E", 70, "e"), {"op": "lwn", "scn": 80})  # opens again, above every SCN written
        time.sleep(1.0)
        assert published_rows(tmp_path / "cf") == 5  # thread 2 is at 60: E (72) waits for it
        append(t2, {"op": "lwn", "scn": 90})
        wait_for_rows(tmp_path / "cf", 6, timeout=20)
        wait_until(lambda: (status(tmp_path).get("thread_states") or {}).get("1") == "open", "status: 1 open")
    finally:
        code, err = stop(service)
    assert code == 0, err
    assert latency < 15
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(live).rows)
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == ["A", "D", "D", "B", "C", "E"]


@pytest.mark.parametrize("processes", [True, False], ids=["reader-processes", "reader-threads"])
def test_record_after_close_below_what_was_published_is_bad_input(tmp_path: Path, processes: bool):
    live = tmp_path / "live"
    live.mkdir()
    t1 = live / "redo_1_1.jsonl"
    t1.write_text(lines(*tx("A", 10, "a"), {"op": "close", "scn": 20}))
    (live / "redo_2_1.jsonl").write_text(lines(*tx("B", 30, "b"), {"op": "lwn", "scn": 40}))
    service = start(service_cmd(tmp_path, processes))
    try:
        wait_for_rows(tmp_path / "cf", 2, timeout=20)  # A and B: B's commit (32) is published
        append(t1, *tx("X", 25, "x"))  # thread 1 opens again below 32: the contract forbids it
        _, err = service.communicate(timeout=30)
    finally:
        if service.poll() is None:
            service.kill()
            service.wait()
    assert service.returncode == 3, err
    msg = [ln for ln in err.splitlines() if "error:" in ln]
    assert len(msg) == 1 and f"{t1}:5: record at scn 25 is at or below commit scn 32, already published" in msg[0], err
    assert "must lie above them" in msg[0] and "fix them" not in msg[0], msg[0]
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == ["A", "B"]


def test_rolling_restart_during_run_publishes_the_contract_changefeed(tmp_path: Path):
    stats = simulate(
        tmp_path / "stage",
        threads=3,
        transactions=500,
        seed=14,
        records_per_file=400,
        compress_archived=False,
        rolling_restarts=True,
    )
    assert stats.closes == 3 and stats.reopens == 3
    check_close_rule(sorted(load_input(tmp_path / "stage"), key=lambda r: (r.scn, r.data.get("sub", 0))))
    (tmp_path / "live").mkdir()
    service = start(run_cmd(tmp_path, "--threads", "1,2,3"))
    writer = start_live_writer(tmp_path / "stage", tmp_path / "live", 3000, seed=14)
    try:
        assert writer.wait(timeout=120) == 0
        expected = expected_changefeed(tmp_path / "live")
        wait_for_rows(tmp_path / "cf", len(expected.rows))
    finally:
        if writer.poll() is None:
            writer.kill()
        code, err = stop(service)
    assert code == 0, err
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected.rows)


def test_replay_of_rolling_restarts_and_a_thread_closed_for_good_is_exact(tmp_path: Path):
    simulate(
        tmp_path / "in",
        threads=3,
        transactions=600,
        seed=41,
        records_per_file=300,
        rolling_restarts=True,
        close_thread_at=0.7,
    )
    assert [r.op for r in load_input(tmp_path / "in") if r.thread == 3][-1] == "close"
    opts = PipelineOptions(checkpoint_seconds=0.0, block_records=64)
    replay(str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_changefeed(tmp_path / "in").rows)
    st = status(tmp_path)
    assert st["thread_states"] == {"1": "finished", "2": "finished", "3": "closed"}


def test_a_silent_thread_that_is_not_closed_is_warned_about_once(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "a"), {"op": "close", "scn": 20}))
    (live / "redo_2_1.jsonl").write_text(lines({"op": "lwn", "scn": 5}))
    service = start(run_cmd(tmp_path, "--stall-warning", "1"))
    err_lines: list[str] = []

    def drain() -> None:
        for line in service.stderr:
            err_lines.append(line)

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()
    try:
        # wait for the warning rather than a fixed time: a loaded machine starts the service slowly
        deadline = time.monotonic() + 60
        while not any("has written nothing for" in ln for ln in err_lines):
            assert time.monotonic() < deadline, "no stall warning in 60 s:\n" + "".join(err_lines)
            time.sleep(0.1)
        time.sleep(3.0)  # three more stall-warning periods: still one warning
        assert published_rows(tmp_path / "cf") == 0  # thread 2 holds A (12) back at 5
    finally:
        service.send_signal(signal.SIGTERM)
        code = service.wait(timeout=30)
        drainer.join(timeout=10)
    err = "".join(err_lines)
    assert code == 0, err
    stalls = [ln for ln in err.splitlines() if "has written nothing for" in ln]
    assert len(stalls) == 1 and " WARNING " in stalls[0], err
    assert "redo thread 2 has written nothing for" in stalls[0] and "(progress 5)" in stalls[0]


def test_an_idle_source_is_not_warned_about(tmp_path: Path):
    """Every commit published, both threads silent: a silent thread holds nothing back,
    so no stall warning (it used to say 'holds the watermark' of each idle thread)."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "a"), {"op": "lwn", "scn": 30}))
    (live / "redo_2_1.jsonl").write_text(lines({"op": "lwn", "scn": 40}))
    service = start(run_cmd(tmp_path, "--stall-warning", "0.5"))
    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=30)
        time.sleep(2.5)  # five stall-warning periods of silence
    finally:
        service.send_signal(signal.SIGTERM)
        _, err = service.communicate(timeout=30)
    assert service.returncode == 0, err
    assert "has written nothing for" not in err, err
