"""A changefeed records, with each publication, from which log file of each redo thread a
new queue reads again (``run_from`` in its manifest: the oldest transaction still open at
its last commit); ``run --adopt-changefeed`` and ``run --standby`` on a new queue start
there, so the files before may be gone. The changefeed stays one replay of the whole
input (tests.contract_model)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from olr_buffer.store import open_store
from tests.contract_model import expected_changefeed
from tests.test_changefeed_s3 import Service, assert_exact, cli

pytestmark = pytest.mark.e2e


def _ins(scn: int, xid: str) -> dict:
    return {"op": "insert", "scn": scn, "xid": xid, "owner": "S", "table": "T", "rid": f"r{scn}", "after": {"ID": scn}}


def _tx(xid: str, scn: int) -> list[dict]:
    return [{"op": "begin", "scn": scn, "xid": xid}, _ins(scn + 1, xid), {"op": "commit", "scn": scn + 2, "xid": xid}]


# thread -> sequence -> records: X begins in thread 1's sequence 2, has a row in 3, and is
# still open when the first part ends; its commit comes with the second part
FIRST = {
    1: {
        1: [*_tx("A", 10), {"op": "lwn", "scn": 13}],
        2: [{"op": "begin", "scn": 20, "xid": "X"}, _ins(21, "X"), *_tx("B", 22)],
        3: [_ins(30, "X"), *_tx("C", 31), {"op": "lwn", "scn": 34}],
    },
    2: {
        1: _tx("D", 14),
        2: _tx("E", 25),
        3: [{"op": "lwn", "scn": 35}],
    },
}
SECOND = {
    1: {4: [_ins(40, "X"), {"op": "commit", "scn": 41, "xid": "X"}, *_tx("F", 42), {"op": "lwn", "scn": 50}]},
    2: {4: [*_tx("G", 45), {"op": "lwn", "scn": 50}]},
}


def write(input_dir: Path, files: dict[int, dict[int, list[dict]]]) -> None:
    input_dir.mkdir(parents=True, exist_ok=True)
    for thread, seqs in files.items():
        for seq, records in seqs.items():
            text = "".join(json.dumps(r) + "\n" for r in records)
            (input_dir / f"redo_{thread}_{seq}.jsonl").write_text(text)


def manifest(cf: str) -> dict:
    return json.loads(open_store(cf).read("_olr_buffer/manifest.json"))


def wait_next(cf: str, n: int, service: Service, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while manifest(cf)["next_tx_seq"] < n:
        assert service.proc.poll() is None, "\n".join(service.lines[-30:])
        assert time.monotonic() < deadline, "\n".join(service.lines[-30:])
        time.sleep(0.05)


@pytest.fixture(params=["local", "s3", "s3-delta"])
def taken(request, tmp_path: Path) -> dict:
    """The first part replayed into a changefeed (X left open): in a directory, on S3
    (moto), on S3 as a Delta table; the second part written; the queue deleted; the files
    before the recorded ones moved away."""
    inp, whole = tmp_path / "in", tmp_path / "whole"
    cf = str(tmp_path / "cf") if request.param == "local" else request.getfixturevalue("s3_uri")
    fmt = ("--table-format", "delta") if request.param == "s3-delta" else ()
    write(inp, FIRST)
    result = cli("replay", inp, "--queue", tmp_path / "q1", "--changefeed", cf, "--block-records", "1", *fmt)
    assert result.returncode == 0, result.describe()
    # X open: its thread from its first file (2); thread 2 from where it was read (E's file)
    assert manifest(cf)["run_from"] == {"1": 2, "2": 2}
    write(inp, SECOND)
    write(whole, FIRST)
    write(whole, SECOND)
    shutil.rmtree(tmp_path / "q1")
    moved = tmp_path / "moved"
    moved.mkdir()
    for name in ("redo_1_1.jsonl", "redo_2_1.jsonl"):
        shutil.move(inp / name, moved / name)
    return {"input": inp, "whole": whole, "cf": cf, "queue": tmp_path / "q2", "delta": bool(fmt)}


@pytest.mark.parametrize("how", ["--adopt-changefeed", "--standby"])
def test_a_new_queue_adopting_a_changefeed_reads_from_the_recorded_files(taken, how):
    model = expected_changefeed(taken["whole"])
    args = [taken["input"], "--queue", taken["queue"], "--changefeed", taken["cf"], "--threads", "1,2", how]
    service = Service(*args, "--checkpoint-interval", "0.2", "--log-level", "info")
    try:
        service.wait_line(
            r"reading from where the changefeed needs it .*thread 1 from sequence 2, thread 2 from sequence 2"
        )
        wait_next(taken["cf"], model.committed, service)
    finally:
        assert service.stop() == 0, "\n".join(service.lines[-30:])
    assert_exact(taken["cf"], model, delta=taken["delta"])
    # what it records now: X is published, nothing is open
    assert manifest(taken["cf"])["run_from"] == {"1": 4, "2": 4}


def test_a_recorded_file_that_is_gone_is_a_one_line_error(taken):
    shutil.move(taken["input"] / "redo_1_2.jsonl", taken["input"].parent / "moved" / "redo_1_2.jsonl")
    shutil.move(taken["input"] / "redo_1_3.jsonl", taken["input"].parent / "moved" / "redo_1_3.jsonl")
    result = cli("replay", taken["input"], "--queue", taken["queue"], "--changefeed", taken["cf"], "--adopt-changefeed")
    assert result.returncode != 0, result.describe()
    assert "needs redo thread 1 from sequence 2, which is not here (sequences 4..4 are)" in result.stderr
    assert "Traceback" not in result.stderr
