"""`olr-buffer run` with a transaction that never ends: with --transaction-retention the
queue's disk use stays flat over an hour of load, without it the queue grows.

The hour is simulated: the input's `tm` values advance 5 minutes per log file, so the
retention limit (10 minutes of the source's clock) is passed within seconds of wall time.
The real service runs in its own process on a real queue; the queue's size is read
after every file, once the service has published it and checkpointed twice.
"""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.status import queue_status, render
from tests.contract_model import assert_changefeed_equal, expected_changefeed, load_changefeed
from tests.processes import run_args

ROOT = Path(__file__).resolve().parent.parent
T0 = 1_717_200_000_000_000_000
MINUTE = 60 * 1_000_000_000
CHUNKS = 12  # an hour: 5 minutes a log file
TX_PER_CHUNK = 150
SEGMENT = 64 * 1024


def run_cmd(tmp: Path, *extra: str) -> list[str]:
    return run_args(
        tmp / "live",
        tmp,
        "--threads",
        "1",
        "--flush-interval",
        "0.1",
        "--poll-interval",
        "0.02",
        "--checkpoint-interval",
        "0.2",
        "--segment-size",
        f"{SEGMENT // 1024}KiB",
        "--block-records",
        "64",
        "--dead-letter",
        str(tmp / "dead.jsonl"),
        "--log-level",
        "warning",
        *extra,
    )


def chunk(k: int, scn: int) -> tuple[list[dict], int]:
    """Log file k: 5 minutes of small transactions (begin, 2 rows, commit), and, in the
    first, the start of STUCK, which never ends; a late row of STUCK in the 7th, its
    commit in the last. Row images are not compressible, so the queue's size is real."""
    recs: list[dict] = []

    def rec(op: str, xid: str, tm: int, **fields) -> None:
        nonlocal scn
        scn += 1
        recs.append({"op": op, "scn": scn, "xid": xid, "tm": tm, **fields})

    def row(xid: str, tm: int) -> None:
        blob = "".join(hashlib.sha256(f"{xid}{scn}{i}".encode()).hexdigest() for i in range(4))
        rec("insert", xid, tm, owner="APP", table="T", rid=f"r{scn}", after={"ID": scn, "PAD": blob})

    start = T0 + k * 5 * MINUTE
    if k == 0:
        rec("begin", "STUCK", start)
        for _ in range(3):
            row("STUCK", start)
    for j in range(TX_PER_CHUNK):
        tm = start + j * 5 * MINUTE // TX_PER_CHUNK
        xid = f"T{k}.{j}"
        rec("begin", xid, tm)
        row(xid, tm)
        row(xid, tm)
        rec("commit", xid, tm)
        if k == 6 and j == TX_PER_CHUNK // 2:
            row("STUCK", tm)  # STUCK is not dead after all: a row long after it was abandoned
    if k == CHUNKS - 1:
        rec("commit", "STUCK", start + 5 * MINUTE)
    scn += 1
    recs.append({"op": "lwn", "scn": scn})
    return recs, scn


def start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    return proc.returncode, err


def wait_until(what: str, cond, proc: subprocess.Popen, timeout: float = 90.0):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        value = cond()
        if value:
            return value
        if proc.poll() is not None:
            raise AssertionError(
                f"the service stopped (exit {proc.returncode}) waiting for {what}: "
                f"{proc.stderr.read() if proc.stderr else ''}"
            )
        time.sleep(0.05)
    raise AssertionError(f"still waiting for {what} after {timeout}s")


def settled_queue_bytes(tmp: Path, rows: int, proc: subprocess.Popen) -> dict:
    """The queue's status once ``rows`` rows are published and two checkpoints were
    written after that (the first one's cleanup is then done)."""
    cf = tmp / "cf"
    wait_until(
        f"{rows} rows in the changefeed",
        lambda: cf.is_dir() and any(cf.glob("part-*")) and len(load_changefeed(cf)) >= rows,
        proc,
    )
    seen: list[str] = []

    def two_checkpoints():
        doc = queue_status(str(tmp / "q"))
        written = (doc.get("checkpoint") or {}).get("written")
        if written and written not in seen:
            seen.append(written)
        return doc if len(seen) >= 3 else None

    return wait_until("two checkpoints", two_checkpoints, proc)


@pytest.mark.slow
@pytest.mark.e2e  # the service in its own process
@pytest.mark.parametrize("retention", [True, False], ids=["retention", "without"])
def test_a_transaction_that_never_ends_leaves_disk_flat_with_retention(tmp_path: Path, retention: bool):
    live = tmp_path / "live"
    live.mkdir()
    extra = ("--transaction-retention", "600") if retention else ()
    service = start(run_cmd(tmp_path, *extra))
    sizes: list[int] = []
    held_text = ""
    rows = 0
    scn = 1000
    err_text = ""
    try:
        for k in range(CHUNKS):
            recs, scn = chunk(k, scn)
            tmp_file = live / f".redo_1_{k + 1}.tmp"
            tmp_file.write_text("".join(json.dumps(r) + "\n" for r in recs))
            tmp_file.rename(live / f"redo_1_{k + 1}.jsonl")
            rows += 2 * TX_PER_CHUNK
            doc = settled_queue_bytes(tmp_path, rows, service)
            sizes.append(doc["segments"]["bytes"])
            if k == 5:
                held_text = render(doc)
            if k == 7:  # a clean stop and a restart: what was abandoned stays abandoned
                code, err = stop(service)
                assert code == 0, err
                err_text += err
                service = start(run_cmd(tmp_path, *extra))
        status = subprocess.run(
            [sys.executable, "-m", "olr_buffer.cli", "status", "--queue", str(tmp_path / "q")],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )
    finally:
        code, err = stop(service)
        err_text += err
    assert code == 0, err_text
    assert status.returncode == 0, status.stderr

    mib = [round(s / 2**20, 2) for s in sizes]
    if retention:
        # STUCK began at minute 0 and is abandoned once the newest commit is more than
        # 10 minutes later (in the third file): from then on the queue holds what the
        # current transactions need, a few segments, whatever the hour's length
        late = sizes[3:]
        assert max(late) <= 4 * SEGMENT, f"queue MiB per 5 minutes: {mib}"
        assert max(sizes[-4:]) <= max(sizes[3:6]) + SEGMENT, f"queue MiB per 5 minutes: {mib}"
        assert "transaction STUCK abandoned by the retention limit" in err_text
        assert "record(s) of abandoned transaction STUCK" in err_text and "its end came (commit" in err_text
        (line,) = (tmp_path / "dead.jsonl").read_text().splitlines()
        dead = json.loads(line)
        assert dead["kind"] == "abandoned_transaction" and (dead["xid"], dead["rows"], dead["begin_tm"]) == (
            "STUCK",
            3,
            T0,
        )
        assert "abandoned by the retention limit: 1 transaction(s), 3 rows, not published; 2 record(s)" in status.stdout
        expected = expected_changefeed(live)
        kept = [r for r in expected.rows if r["xid"] != "STUCK"]
        renumber = {tx: n for n, tx in enumerate(dict.fromkeys(r["tx_seq"] for r in kept))}
        assert_changefeed_equal(
            load_changefeed(tmp_path / "cf"), [{**r, "tx_seq": renumber[r["tx_seq"]]} for r in kept]
        )
    else:
        # STUCK pins every segment from its first block: the queue grows with the load
        assert all(b > a for a, b in zip(sizes[:-2], sizes[1:-1])), f"queue MiB per 5 minutes: {mib}"
        assert sizes[-2] > 5 * 4 * SEGMENT, f"queue MiB per 5 minutes: {mib}"
        # status names the transaction that pins cleanup, and what it keeps
        assert (
            "held by transaction STUCK (from scn 1001, age" in held_text and "3 rows, not ended): it keeps" in held_text
        )
        assert "held by transaction STUCK" not in status.stdout  # it ended in the last file: nothing held
        assert not (tmp_path / "dead.jsonl").exists() or not (tmp_path / "dead.jsonl").read_text()


def test_the_metrics_count_what_was_abandoned(tmp_path: Path):
    from olr_buffer.runtime import Pipeline, PipelineOptions, run_to_end
    from olr_buffer.service.metrics import render_metrics

    live = tmp_path / "live"
    live.mkdir()
    recs, _ = chunk(0, 1000)
    later, _ = chunk(3, 5000)  # 15 minutes later
    (live / "redo_1_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs + later))
    opts = PipelineOptions(durable=False, transaction_retention_seconds=600, reader_processes=False)
    p = Pipeline(str(live), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
    try:
        summary = run_to_end(p)
        text = render_metrics(p.run_figures()).decode()
    finally:
        p.close()
    assert (summary.abandoned_transactions, summary.abandoned_rows, summary.transactions_published) == (
        1,
        3,
        2 * TX_PER_CHUNK,
    )
    assert "olr_buffer_abandoned_transactions_total 1.0" in text
    assert "olr_buffer_abandoned_rows_total 3.0" in text
    assert "olr_buffer_abandoned_records_total 0.0" in text
