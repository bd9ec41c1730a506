"""What `run` logs and counts: one INFO summary line per --log-summary-interval instead of a
line per published file (that one at DEBUG); each bad record --dead-letter sets aside
logged (the first ten a minute, then how many more) and counted in the metrics at once,
with the readers in their own processes; the process's own figures in the metrics."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.processes import run_args
from tests.test_operations import lines, samples, tx
from tests.test_run_service import ROOT, wait_for_rows

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def start_run(tmp: Path, *extra: str) -> tuple[subprocess.Popen, Path]:
    """``run`` on ``tmp/live`` with JSON logs written to ``tmp/run.log``."""
    log = tmp / "run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            run_args(
                tmp / "live",
                tmp,
                "--flush-interval",
                "0.2",
                "--poll-interval",
                "0.02",
                "--checkpoint-interval",
                "0.5",
                "--log-format",
                "json",
                *extra,
            ),
            stdout=subprocess.DEVNULL,
            stderr=fh,
            cwd=ROOT,
        )
    return proc, log


def log_docs(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]


def wait_for_log(proc: subprocess.Popen, log: Path, test, what: str, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        docs = log_docs(log)
        found = [d for d in docs if test(d)]
        if found:
            return found
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() < deadline, f"no {what} within {timeout}s:\n{log.read_text()}"
        time.sleep(0.05)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0


def test_run_logs_a_summary_per_interval_and_each_file_at_debug(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    now = time.time_ns()
    (live / "redo_1_1.jsonl").write_text(
        lines(*(r for i in range(6) for r in tx(f"X{i}", 10 + 10 * i, f"r{i}", now)), {"op": "lwn", "scn": 100})
    )
    proc, log = start_run(tmp_path, "--log-level", "info", "--file-rows", "2", "--log-summary-interval", "1")
    try:
        wait_for_rows(tmp_path / "cf", 6, timeout=30)
        deadline = time.monotonic() + 30
        while sum(d.get("transactions", 0) for d in log_docs(log) if d["msg"].startswith("published ")) < 6:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        stop(proc)
    docs = log_docs(log)
    assert not [d for d in docs if "part-" in d["msg"]], "a line per file at INFO"
    summaries = [d for d in docs if d["msg"].startswith("published ")]
    assert sum(d["files"] for d in summaries) == 3 and sum(d["transactions"] for d in summaries) == 6
    assert sum(d["rows"] for d in summaries) == 6
    last = summaries[-1]
    assert last["level"] == "info" and last["last_tx_seq"] == 5 and last["c_scn"] == 62 and last["position"] == "62"
    assert 0 <= last["seconds_behind_source"] < 60 and 0.9 <= last["interval_seconds"] < 30
    assert "changefeed at tx_seq 5, last commit at scn 62; " in last["msg"] and " behind the source" in last["msg"]

    # at DEBUG, each published file has its line (with its facts)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "--log-level",
            "debug",
            "replay",
            str(live),
            "--queue",
            str(tmp_path / "q2"),
            "--changefeed",
            str(tmp_path / "cf2"),
            "--file-rows",
            "2",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    per_file = [
        ln for ln in proc.stderr.splitlines() if " DEBUG olr_buffer.sinks.parquet.writer: published part-" in ln
    ]
    assert len(per_file) == 3, proc.stderr


def test_run_logs_and_counts_each_bad_record_set_aside(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    bad = "".join(f'{{"op":"insert","scn":"line {n}"}}\n' for n in range(25))
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "r1")) + bad + lines({"op": "lwn", "scn": 20}))
    dead = tmp_path / "dead.jsonl"
    proc, log = start_run(tmp_path, "--log-level", "info", "--dead-letter", str(dead), "--metrics-port", "0")

    def metrics() -> dict[str, float]:
        port = wait_for_log(proc, log, lambda d: "metrics_port" in d, "metrics address")[0]["metrics_port"]
        return samples(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())

    def wait_for_dead_letters(n: int) -> dict[str, float]:
        deadline = time.monotonic() + 30
        while (m := metrics())["olr_buffer_dead_letters_total"] != n:
            assert time.monotonic() < deadline, f"dead_letters_total {m['olr_buffer_dead_letters_total']}, not {n}"
            time.sleep(0.1)
        return m

    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=30)
        m = wait_for_dead_letters(25)
        # a bad line alone, no good record after it (no block to carry the count): counted at once
        with open(live / "redo_1_1.jsonl", "a") as fh:
            fh.write("{not json\n")
        wait_for_dead_letters(26)
    finally:
        stop(proc)
    # the readers ran in their own processes (run's default), which wrote the file
    assert len(dead.read_text().splitlines()) == 26
    docs = log_docs(log)
    each = [d for d in docs if "bad record set aside in" in d["msg"]]
    assert len(each) == 10, each  # the first ten of the minute, one by one
    assert [d["line"] for d in each] == list(range(4, 14))
    assert all(
        d["level"] == "warning" and d["file"].endswith("redo_1_1.jsonl") and "'scn' must be an integer" in d["reason"]
        for d in each
    )
    assert each[0]["msg"].startswith(f"{live / 'redo_1_1.jsonl'}:4: bad record set aside in {dead}: ")
    more = [d for d in docs if "more bad record(s) set aside" in d["msg"]]
    assert [(d["bad_records"], d["total"]) for d in more] == [(16, 26)], more  # then how many more, once
    # the process's own figures, from prometheus_client's process and platform collectors
    assert m["process_resident_memory_bytes"] > 10e6 and m["process_open_fds"] > 3
    assert "process_cpu_seconds_total" in m and m["process_start_time_seconds"] > 1e9
    assert any(k.startswith("python_info{") for k in m)


def test_the_summary_line_counts_the_transactions_of_the_files_it_counts(tmp_path: Path):
    """A transaction is handed to the sink at once and published in a file
    --flush-interval later, intervals of the summary line after: the line that counts the
    file counts its transaction and row too (not `1 file(s), 0 transaction(s)`)."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "r1", time.time_ns()), {"op": "lwn", "scn": 100}))
    log = tmp_path / "run.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "olr_buffer.cli",
                "run",
                str(live),
                "--queue",
                str(tmp_path / "q"),
                "--changefeed",
                str(tmp_path / "cf"),
                "--flush-interval",
                "4",
                "--poll-interval",
                "0.02",
                "--checkpoint-interval",
                "60",
                "--log-summary-interval",
                "0.5",
                "--log-format",
                "json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=fh,
            cwd=ROOT,
        )
    try:
        found = wait_for_log(proc, log, lambda d: d["msg"].startswith("published "), "summary line")
    finally:
        stop(proc)
    assert [(d["files"], d["transactions"], d["rows"]) for d in found] == [(1, 1, 1)], found
