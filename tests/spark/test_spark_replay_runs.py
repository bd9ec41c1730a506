"""Replay on Spark as the command runs it: a driver killed mid-job and the same command
again (exactly once, plain and Delta), and ``run`` taking over from it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.spark import replay_on_spark
from tests.contract_model import assert_changefeed_equal, changefeed_files, load_changefeed

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[2]


def spark_replay_cmd(tmp: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "replay",
        str(tmp / "in"),
        "--queue",
        str(tmp / "q"),
        "--changefeed",
        str(tmp / "cf"),
        "--engine",
        "spark",
        "--master",
        "local[2]",
        "--file-rows",
        "40",
        *extra,
    ]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "PYSPARK_PYTHON": sys.executable}


def published_files(cf: Path) -> int:
    return len(changefeed_files(cf)) if cf.is_dir() else 0


def wait_until(what: str, cond, proc: subprocess.Popen, timeout: float = 180.0, err: Path | None = None) -> None:
    """Wait for ``cond``; ``err`` is the file of the process's stderr, whose end a failure
    shows (read from a file: a pipe nobody reads until the end blocks a chatty child)."""

    def said() -> str:
        if err is not None:
            return err.read_text(errors="replace")[-2000:]
        return proc.communicate()[1][-2000:] if proc.poll() is not None else "(its stderr is read at its end)"

    deadline = time.monotonic() + timeout
    while not cond():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {what}: {said()}"
        assert time.monotonic() < deadline, f"not {what} within {timeout}s; its stderr ends: {said()}"
        time.sleep(0.05)


@pytest.mark.slow  # two Spark drivers of their own (a JVM each)
@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_driver_killed_mid_job_then_the_same_command(tmp_path, table_format):
    """SIGKILL to the driver (and its JVM) once it has published a few files; the same
    command again: the changefeed is replay's, every transaction once (in the Delta
    table too)."""
    simulate(tmp_path / "in", threads=3, transactions=150, seed=21, records_per_file=300)
    replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions())
    expected = load_changefeed(tmp_path / "cf1")
    # with the steps' lines: the time of each is in the error if it is too slow
    cmd = spark_replay_cmd(tmp_path, "--table-format", table_format, "--no-sync")
    err = tmp_path / "driver.err"
    with open(err, "wb") as to_err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=to_err, cwd=ROOT, env=_env(), start_new_session=True
        )
    try:
        wait_until("two files published", lambda: published_files(tmp_path / "cf") >= 2, proc, 600.0, err)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    killed_at = len(load_changefeed(tmp_path / "cf"))
    assert 0 < killed_at < len(expected), "the kill came before or after the publication"

    done = subprocess.run(
        cmd + ["--no-progress", "--json"], capture_output=True, text=True, cwd=ROOT, env=_env(), timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # the killed driver said its steps; neither run drew Spark's progress bar
    assert "] read 14 log file(s)" in err.read_text() and "[Stage " not in err.read_text()
    assert "[Stage " not in done.stderr and "] read " not in done.stderr
    summary = json.loads(done.stdout)
    assert summary["already_published"] > 0
    got = load_changefeed(tmp_path / "cf")
    assert_changefeed_equal(got, expected)
    assert not list((tmp_path / "q" / "staging").rglob("*.parquet")), "the killed run's staged parts are left"
    if table_format == "delta":
        import deltalake

        table = deltalake.DeltaTable(str(tmp_path / "cf")).to_pyarrow_table(columns=["tx_seq", "op_seq"])
        keys = list(zip(table.column("tx_seq").to_pylist(), table.column("op_seq").to_pylist()))
        assert len(keys) == len(set(keys)) == len(expected)
        txns = [a["txn"] for a in _delta_actions(tmp_path / "cf") if "txn" in a]
        assert txns[-1]["version"] == expected[-1]["tx_seq"]


def _rows(cf: Path) -> int:
    try:
        return len(load_changefeed(cf))
    except FileNotFoundError:  # a file compacted away while listed (not here), or none yet
        return 0


def _delta_actions(cf: Path) -> list[dict]:
    out = []
    for p in sorted((cf / "_delta_log").glob("*.json")):
        out += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return out


def test_run_takes_over_from_the_spark_replay(spark, tmp_path):
    """The Spark replay of the first half of each thread's files (until the watermark
    there), then ``run --adopt-changefeed`` on all of them: the changefeed of one replay
    of the whole, transactions open at the cut included."""
    simulate(tmp_path / "full", threads=3, transactions=500, seed=8, records_per_file=200, compress_archived=False)
    files = sorted((tmp_path / "full").iterdir())
    last_scn = max(json.loads(line)["scn"] for p in files for line in p.read_text().splitlines())
    by_thread: dict[int, list[Path]] = {}
    for p in files:
        by_thread.setdefault(int(p.name.split("_")[1]), []).append(p)
    for paths in by_thread.values():
        paths.sort(key=lambda p: int(p.name.split("_")[2].split(".")[0]))
        with open(paths[-1], "a") as fh:  # every thread is past every commit: run publishes them all
            fh.write(json.dumps({"op": "lwn", "scn": last_scn + 1}) + "\n")
    replay(str(tmp_path / "full"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions())
    expected = load_changefeed(tmp_path / "cf1")

    (tmp_path / "half").mkdir()
    for paths in by_thread.values():
        assert len(paths) >= 4
        for p in paths[: len(paths) // 2]:
            shutil.copy(p, tmp_path / "half" / p.name)
    first = replay_on_spark(
        spark, str(tmp_path / "half"), str(tmp_path / "qs"), str(tmp_path / "cf"), until_watermark=True
    )
    assert first.held_for_run > 0 or first.open_transactions > 0
    assert 0 < first.rows_published < len(expected)
    # run needs the files from the oldest transaction it is left: the earlier ones go
    assert first.run_from and set(first.run_from) <= set(by_thread)
    for thread, paths in by_thread.items():
        for p in paths:
            if int(p.name.split("_")[2].split(".")[0]) < first.run_from.get(thread, len(paths) // 2 + 1):
                (tmp_path / "full" / p.name).rename(tmp_path / p.name)
    assert len(list((tmp_path / "full").iterdir())) < len(files)

    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "run",
            str(tmp_path / "full"),
            "--queue",
            str(tmp_path / "qr"),
            "--changefeed",
            str(tmp_path / "cf"),
            "--adopt-changefeed",
            "--flush-interval",
            "0.2",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(),
    )
    try:
        wait_until("caught up", lambda: _rows(tmp_path / "cf") >= len(expected), run, timeout=120)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0, err[-3000:]
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected)


def test_until_watermark_needs_the_spark_engine(tmp_path):
    simulate(tmp_path / "in", threads=1, transactions=3, seed=1)
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "replay", str(tmp_path / "in"), "--queue", str(tmp_path / "q"),
         "--changefeed", str(tmp_path / "cf"), "--until-watermark"],
        capture_output=True, text=True, cwd=ROOT, env=_env(),
    )  # fmt: skip
    assert r.returncode == 2 and "--until-watermark goes with --engine spark" in r.stderr
    assert not (tmp_path / "cf").exists()


@pytest.fixture(params=["parquet", "delta"])
def taken_from_spark(request, spark, tmp_path: Path) -> dict:
    """tests.test_run_from's first part replayed on Spark until the watermark (X left
    open), its second part written, the files before the recorded ones moved away."""
    from tests.test_run_from import FIRST, SECOND, manifest, write

    inp, whole, cf = tmp_path / "in", tmp_path / "whole", str(tmp_path / "cf")
    write(inp, FIRST)
    s = replay_on_spark(
        spark, str(inp), str(tmp_path / "qs"), cf, file_rows=2, table_format=request.param, until_watermark=True
    )
    assert (s.transactions_published, s.open_transactions) == (5, 1)
    # as the one-process replay records it: X's thread from its first file, thread 2 from
    # the last file holding a record (E's)
    assert s.run_from == {1: 2, 2: 2}
    assert manifest(cf)["run_from"] == {"1": 2, "2": 2}
    write(inp, SECOND)
    write(whole, FIRST)
    write(whole, SECOND)
    (tmp_path / "moved").mkdir()
    for name in ("redo_1_1.jsonl", "redo_2_1.jsonl"):
        shutil.move(inp / name, tmp_path / "moved" / name)
    return {"input": inp, "whole": whole, "cf": cf, "queue": tmp_path / "q2", "delta": request.param == "delta"}


@pytest.mark.parametrize("how", ["--adopt-changefeed", "--standby"])
def test_run_after_the_spark_replay_reads_from_the_recorded_files(taken_from_spark, how):
    """The Spark replay records run_from in the manifest with its last publication:
    ``run --adopt-changefeed`` (or ``--standby``) on a new queue starts each thread there,
    and the changefeed is one replay of the whole input."""
    from tests.contract_model import expected_changefeed
    from tests.test_changefeed_s3 import Service, assert_exact
    from tests.test_run_from import manifest, wait_next

    t = taken_from_spark
    model = expected_changefeed(t["whole"])
    args = [t["input"], "--queue", t["queue"], "--changefeed", t["cf"], "--threads", "1,2", how]
    service = Service(*args, "--checkpoint-interval", "0.2", "--log-level", "info")
    try:
        service.wait_line(
            r"reading from where the changefeed needs it .*thread 1 from sequence 2, thread 2 from sequence 2"
        )
        wait_next(t["cf"], model.committed, service)
    finally:
        assert service.stop() == 0, "\n".join(service.lines[-30:])
    assert_exact(t["cf"], model, delta=t["delta"])
    assert manifest(t["cf"])["run_from"] == {"1": 4, "2": 4}


def test_a_file_the_spark_replay_recorded_gone_is_a_one_line_error(taken_from_spark):
    """X began in thread 1's sequence 2: without it, run would publish the changefeed
    without X; it stops with one line instead."""
    from tests.test_changefeed_s3 import cli

    t = taken_from_spark
    shutil.move(t["input"] / "redo_1_2.jsonl", t["input"].parent / "moved" / "redo_1_2.jsonl")
    result = cli("replay", t["input"], "--queue", t["queue"], "--changefeed", t["cf"], "--adopt-changefeed")
    assert result.returncode != 0, result.describe()
    assert "needs redo thread 1 from sequence 2, which is not here (sequences 3..4 are)" in result.stderr
    assert "Traceback" not in result.stderr
