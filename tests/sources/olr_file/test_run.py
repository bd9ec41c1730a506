"""``olr-buffer run olr+file://OUTPUT``: the service follows OpenLogReplicator's output
as it is written (a last line without its ``\\n`` is not read yet) and as it rotates to
the next file; killed and started again, it publishes every transaction once."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, load_changefeed
from tests.paths import ROOT
from tests.sources.olr.service import service, status, transactions, wait_for, wait_transactions
from tests.sources.olr.streams import FORMS, expected_rows, messages, workload

pytestmark = pytest.mark.e2e


def tx_messages(msgs: list[bytes]) -> list[list[bytes]]:
    """``msgs`` cut after each commit (per-row form): one list per transaction."""
    out, cur = [], []
    for m in msgs:
        cur.append(m)
        if b'"op":"commit"' in m:
            out.append(cur)
            cur = []
    assert not cur
    return out


def test_run_follows_the_output_as_it_is_written_and_rotated(tmp_path):
    f = FORMS["per-row"]
    txs = workload(random.Random(11), 9)
    per_tx = tx_messages(messages(txs, f))
    out = tmp_path / "olr"
    out.mkdir()
    first = out / "OLR-1.json"
    first.write_bytes(b"".join(m + b"\n" for tx in per_tx[:3] for m in tx))
    with service(f"olr+file://{out}/OLR-%i.json", tmp_path) as box:
        wait_transactions(tmp_path / "cf", 3, box=box)
        # the next transaction, its commit line still being written (no "\n" yet)
        tx = per_tx[3]
        with open(first, "ab") as fh:
            fh.write(b"".join(m + b"\n" for m in tx[:-1]) + tx[-1][:10])
            fh.flush()

            def holds_the_rows() -> bool:
                doc = status(tmp_path / "q").get("olr_file") or {}
                return (doc.get("open_transaction") or {}).get("rows") == len(tx) - 2

            # the service has read every whole line: the transaction's rows are in the
            # queue, its commit line (no "\n" yet) is not taken
            wait_for(holds_the_rows, 60, "the rows of the fourth transaction in the queue")
            doc = status(tmp_path / "q")["olr_file"]
            assert doc["line"] == sum(len(t) for t in per_tx[:4])  # the commit's line, read next
            assert transactions(tmp_path / "cf") == 3
            fh.write(tx[-1][10:] + b"\n")
        wait_transactions(tmp_path / "cf", 4, box=box)
        # OpenLogReplicator writes out one file and opens the next (max-file-size)
        with open(first, "ab") as fh:
            fh.write(b"".join(m + b"\n" for m in per_tx[4][:2]))
        (out / "OLR-2.json").write_bytes(b"".join(m + b"\n" for m in per_tx[4][2:] + per_tx[5]))
        wait_transactions(tmp_path / "cf", 6, box=box)
        with open(out / "OLR-2.json", "ab") as fh:
            fh.write(b"".join(m + b"\n" for tx in per_tx[6:8] for m in tx))
        (out / "OLR-3.json").write_bytes(b"".join(m + b"\n" for m in per_tx[8]))
        wait_transactions(tmp_path / "cf", 9, box=box)
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_rows(txs, f))
    check_changefeed_layout(tmp_path / "cf")


def run_cmd(tmp: Path, output: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "run",
        f"olr+file://{output}",
        "--queue",
        str(tmp / "q"),
        "--changefeed",
        str(tmp / "cf"),
        "--flush-interval",
        "0.05",
        "--poll-interval",
        "0.02",
        "--checkpoint-interval",
        "0.3",
        "--block-records",
        "5",
        "--file-rows",
        "7",
    ]


@pytest.mark.slow
def test_a_killed_run_started_again_publishes_every_transaction_once(tmp_path):
    f = FORMS["per-transaction"]
    txs = workload(random.Random(13), 80, large=30, rac=True)
    msgs = messages(txs, f)
    out = tmp_path / "olr"
    out.mkdir()
    rng = random.Random(2)
    written = 0
    name = 1
    kills = 0
    while True:
        proc = subprocess.Popen(
            run_cmd(tmp_path, f"{out}/OLR-%i.json"), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            # write some more while it runs: appends, and now and then the next file
            for _ in range(3):
                if written < len(msgs):
                    n = rng.randint(1, 12)
                    if rng.random() < 0.3:
                        name += 1
                    with open(out / f"OLR-{name}.json", "ab") as fh:
                        fh.write(b"".join(m + b"\n" for m in msgs[written : written + n]))
                    written += n
                time.sleep(rng.uniform(0.05, 0.4))
            if written >= len(msgs):
                wait_for(
                    lambda proc=proc: transactions(tmp_path / "cf") >= len(txs) or proc.poll() is not None,
                    120,
                    "every transaction published",
                )
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(60) == 0, proc.stderr.read().decode()
                break
            if proc.poll() is not None:
                raise AssertionError(proc.stderr.read().decode())
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            kills += 1
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert kills >= 3
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected_rows(txs, f))
    check_changefeed_layout(tmp_path / "cf")
