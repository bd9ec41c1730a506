"""Replay on Spark (olr_buffer.spark.replay_on_spark) against the one-process replay: the
same changefeed, row for row, on generated RAC inputs; bad lines as replay words them."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olr_buffer.runtime import PipelineOptions, replay
from olr_buffer.simulate import simulate
from olr_buffer.sources.redo import InputError
from olr_buffer.spark import replay_on_spark
from tests.contract_model import assert_changefeed_equal, load_changefeed

pytestmark = pytest.mark.spark

_TM0 = 1_700_000_000_000_000_000


def _row(xid: str, op: str, rid: str, n: int) -> dict:
    rec = {"op": op, "xid": xid, "owner": "HR", "table": "EMP", "obj": 77, "rid": rid}
    if op != "insert":
        rec["before"] = {"ID": n}
    if op != "delete":
        rec["after"] = {"ID": n, "N": "é"}
    return rec


@st.composite
def workloads(draw) -> dict[int, list[dict]]:
    """Per thread, its records in order: transactions interleaved, some spread over
    threads, XIDs used again after their end, partial rollbacks (compensations), rows
    after the end (late), ``lwn`` and ``close`` records here and there."""
    n_threads = draw(st.integers(3, 6))
    # XIDs whose transaction ended, written whole on one thread: used again on that thread
    # (a transaction spread over threads could reach the one-process replay's queue in
    # either order with the next one of its XID, whose records then go to the one or the
    # other: the contract does not say which)
    reusable: list[tuple[str, int]] = []
    order: list[tuple[int, dict]] = []
    live: list[tuple[str, list[tuple[int, dict]], bool, set[int]]] = []
    n_tx = draw(st.integers(1, 14))
    made = 0
    while made < n_tx or live:
        if made < n_tx and (not live or draw(st.integers(0, 2)) == 0):
            reuse = bool(reusable) and draw(st.integers(0, 2)) == 0
            if reuse:
                xid, home = reusable.pop(draw(st.integers(0, len(reusable) - 1)))
            else:
                xid, home = f"0x{made:04x}.001.00000001", draw(st.integers(1, n_threads))
            events: list[tuple[int, dict]] = []
            if draw(st.integers(0, 9)) > 0:
                events.append((home, {"op": "begin", "xid": xid}))
            for _ in range(draw(st.integers(0, 6))):
                thread = home if reuse or draw(st.integers(0, 3)) else draw(st.integers(1, n_threads))
                op = draw(st.sampled_from(["insert", "update", "delete", "ddl"]))
                if op == "ddl":
                    rec = {
                        "op": "ddl",
                        "xid": xid,
                        "owner": "HR",
                        "table": "EMP",
                        "sql": "alter table x add (c number)",
                    }
                else:
                    rec = _row(xid, op, draw(st.sampled_from(["AAAA", "AAAB", "AAAC"])), draw(st.integers(0, 3)))
                    if draw(st.integers(0, 3)) == 0:
                        rec["rollback"] = True
                events.append((thread, rec))
            end = draw(st.sampled_from(["commit", "commit", "commit", "rollback", None]))
            if end:
                end_thread = home if reuse or draw(st.integers(0, 2)) else draw(st.integers(1, n_threads))
                events.append((end_thread, {"op": end, "xid": xid, "tm": _TM0 + made}))
                if draw(st.integers(0, 4)) == 0:  # a row after the end: late, dropped
                    events.append((end_thread, _row(xid, "insert", "AAAZ", 9)))
            live.append((xid, events, end is not None, {t for t, _ in events}))
            made += 1
            if reuse:
                order.append((0, {"op": "_tick"}))  # the begin of a reused XID lies above its last end
            continue
        i = draw(st.integers(0, len(live) - 1))
        xid, events, ends, threads = live[i]
        if events:
            order.append(events.pop(0))
        if not events:
            live.pop(i)
            if ends and len(threads) == 1:
                reusable.append((xid, threads.pop()))
    per_thread: dict[int, list[dict]] = {t: [] for t in range(1, n_threads + 1)}
    last_scn = {t: -1 for t in per_thread}
    sub = {t: 0 for t in per_thread}
    clock = 100
    for thread, rec in order:
        if rec["op"] == "_tick":
            clock += 1
            continue
        clock += draw(st.integers(0, 2))
        if draw(st.integers(0, 5)) == 0:  # lwn N: every record of the thread with scn <= N is written
            t = draw(st.integers(1, n_threads))
            if last_scn[t] < clock - 1:
                per_thread[t].append({"op": "lwn", "scn": clock - 1})
                last_scn[t], sub[t] = clock - 1, 0
        if draw(st.integers(0, 7)) == 0:  # a thread closes; its next record lies above every SCN
            t = draw(st.integers(1, n_threads))
            if last_scn[t] < clock - 1:
                per_thread[t].append({"op": "close", "scn": clock - 1})
                last_scn[t], sub[t] = clock - 1, 0
        sub[thread] = sub[thread] + 1 if last_scn[thread] == clock else 0
        last_scn[thread] = clock
        per_thread[thread].append({**rec, "scn": clock, "sub": sub[thread]})
    return per_thread


def write_input(root: Path, per_thread: dict[int, list[dict]], per_file: int) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for thread, recs in per_thread.items():
        for n, start in enumerate(range(0, len(recs), per_file), start=1):
            with open(root / f"redo_{thread}_{n}.jsonl", "w", encoding="utf-8") as fh:
                for rec in recs[start : start + per_file]:
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def _schemas(cf: Path) -> dict[str, bytes]:
    folder = cf / "_olr_buffer" / "schemas"
    return {p.name: p.read_bytes() for p in folder.iterdir()} if folder.is_dir() else {}


# each example is a few Spark jobs (seconds): a twentieth of the profile's examples
# (HYPOTHESIS_PROFILE=big: 100)
@settings(
    max_examples=max(6, settings.default.max_examples // 20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(workload=workloads(), per_file=st.integers(1, 6))
def test_spark_replay_equals_replay(spark, workload, per_file):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_input(root / "in", workload, per_file)
        if not any(workload.values()):
            return
        expected = replay(str(root / "in"), str(root / "q1"), str(root / "cf1"), PipelineOptions(file_rows=50))
        got = replay_on_spark(spark, str(root / "in"), str(root / "q2"), str(root / "cf2"), file_rows=30)
        assert_changefeed_equal(load_changefeed(root / "cf2"), load_changefeed(root / "cf1"))
        assert got.next_tx_seq == expected.next_tx_seq
        assert got.rows_published == expected.rows_published
        assert got.rolled_back == expected.rolled_back
        assert got.no_begin == expected.no_begin
        assert got.unmatched_compensations == expected.unmatched_compensations


def test_simulated_workload_with_zst_files_and_schemas(spark, tmp_path):
    """A simulated RAC workload: archived sequences compressed, DDL with schema documents,
    a few transactions open at the end; files cut differently, rows and schema documents
    the same."""
    simulate(tmp_path / "in", threads=3, transactions=300, seed=11, records_per_file=250, open_at_end=2)
    assert any(p.suffix == ".zst" for p in (tmp_path / "in").iterdir())
    expected = replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions())
    got = replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q2"), str(tmp_path / "cf2"), file_rows=700)
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), load_changefeed(tmp_path / "cf1"))
    assert _schemas(tmp_path / "cf2") == _schemas(tmp_path / "cf1")
    assert got.changefeed_files > 1
    assert got.open_transactions == expected.open_transactions == 2
    assert got.compensations == expected.compensations > 0


def test_rerun_publishes_nothing_twice(spark, tmp_path):
    """Run again on the same queue and changefeed: nothing new; the changefeed unchanged."""
    simulate(tmp_path / "in", threads=3, transactions=60, seed=5, records_per_file=100)
    first = replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), file_rows=100)
    before = load_changefeed(tmp_path / "cf")
    again = replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"), file_rows=100)
    assert again.transactions_published == 0
    assert again.next_tx_seq == first.next_tx_seq == first.transactions_published > 0
    assert load_changefeed(tmp_path / "cf") == before


@pytest.mark.parametrize(
    "lines",
    [
        # a malformed line in the second file of thread 1
        {"redo_1_1.jsonl": [{"op": "lwn", "scn": 5}], "redo_1_2.jsonl": ["{not json"]},
        # the second file of a thread goes back below the first's last record
        {
            "redo_1_1.jsonl": [{"op": "begin", "xid": "x", "scn": 10}],
            "redo_1_2.jsonl": [{"op": "commit", "xid": "x", "scn": 9}],
        },
        # an xid that is not valid Unicode
        {"redo_2_1.jsonl": [{"op": "lwn", "scn": 5}, '{"op": "begin", "xid": "a\\ud800", "scn": 6}']},
    ],
    ids=["malformed", "scn-back-across-files", "lone-surrogate-xid"],
)
def test_bad_line_stops_with_replays_message(spark, tmp_path, lines):
    src = tmp_path / "in"
    src.mkdir()
    for name, recs in lines.items():
        (src / name).write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in recs))
    with pytest.raises(InputError) as replay_error:
        replay(str(src), str(tmp_path / "q1"), str(tmp_path / "cf1"))
    with pytest.raises(InputError) as spark_error:
        replay_on_spark(spark, str(src), str(tmp_path / "q2"), str(tmp_path / "cf2"))
    got, expected = spark_error.value, replay_error.value
    assert (got.path, got.line, got.reason) == (expected.path, expected.line, expected.reason)
    assert not list((tmp_path / "cf2").glob("part-*"))


def test_dead_letter_file_takes_bad_lines(spark, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    good = [
        {"op": "begin", "xid": "x", "scn": 10},
        _row("x", "insert", "AAAA", 1) | {"scn": 11},
        {"op": "commit", "xid": "x", "scn": 12},
    ]
    text = "".join(json.dumps(r) + "\n" for r in good[:2]) + '{"op": "insert"}\n' + json.dumps(good[2]) + "\n"
    (src / "redo_1_1.jsonl").write_text(text)
    expected = replay(
        str(src), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions(dead_letter=str(tmp_path / "d1"))
    )
    got = replay_on_spark(
        spark, str(src), str(tmp_path / "q2"), str(tmp_path / "cf2"), dead_letter=str(tmp_path / "d2")
    )
    assert got.quarantined == expected.quarantined == 1
    assert load_changefeed(tmp_path / "cf2") == load_changefeed(tmp_path / "cf1")
    strip = lambda p: [{k: v for k, v in json.loads(x).items() if k != "ts"} for x in p.read_text().splitlines()]  # noqa: E731
    assert strip(tmp_path / "d2") == strip(tmp_path / "d1")
    assert os.path.exists(tmp_path / "q2" / "spark-replay.json")


def _table(cf: Path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.contract_model import changefeed_files

    table = pa.concat_tables([pq.read_table(p) for p in changefeed_files(cf)])
    return table.sort_by([("tx_seq", "ascending"), ("op_seq", "ascending")])


@pytest.mark.slow
def test_a_transaction_of_a_million_rows(spark, tmp_path):
    """One transaction of 1,000,000 rows among small ones: sorted and streamed, never held
    whole; the changefeed is replay's (compared as Arrow tables)."""
    simulate(tmp_path / "in", threads=3, transactions=40, seed=2, large_tx_rows=1_000_000, records_per_file=200_000)
    replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions(durable=False))
    got = replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q2"), str(tmp_path / "cf2"), durable=False)
    assert got.rows_published > 1_000_000
    expected = _table(tmp_path / "cf1")
    assert _table(tmp_path / "cf2").equals(expected)


def test_delta_changefeed_on_s3(spark, tmp_path, s3_uri):
    """The changefeed on S3 (moto) as a Delta table: exactly the contract's, each file
    added by one commit with the queue's transaction."""
    from tests.contract_model import expected_changefeed
    from tests.test_changefeed_s3 import assert_exact

    simulate(tmp_path / "in", threads=3, transactions=80, seed=9, records_per_file=200)
    replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q"), s3_uri, table_format="delta", file_rows=300)
    assert_exact(s3_uri, expected_changefeed(tmp_path / "in"))


def test_input_on_s3(spark, tmp_path, s3_env):
    """The log files on S3 (``.zst`` among them): read by the tasks from the store; the
    changefeed is replay's of the same files on disk."""
    from olr_buffer.store import open_store

    simulate(tmp_path / "in", threads=2, transactions=60, seed=4, records_per_file=150)
    uri = f"s3://{s3_env.new_bucket()}/archive"
    store = open_store(uri)
    for p in (tmp_path / "in").iterdir():
        store.create(p.name, p.read_bytes())
    assert any(p.suffix == ".zst" for p in (tmp_path / "in").iterdir())
    replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions())
    replay_on_spark(spark, uri, str(tmp_path / "q2"), str(tmp_path / "cf2"))
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), load_changefeed(tmp_path / "cf1"))


def test_xid_used_again_late_rows_and_compensation(spark, tmp_path):
    """One XID, three transactions on its thread (a begin above the last end's SCN starts
    the next), a row after each commit, compensations with and without a row to cancel,
    an extra end; an lwn and a close among them: replay's changefeed, and each of the
    XID's committed transactions published once."""
    x = "0x0001.002.00000003"
    t1 = [
        {"op": "begin", "xid": x, "scn": 10},
        _row(x, "insert", "R1", 1) | {"scn": 11},
        _row(x, "update", "R1", 2) | {"scn": 12},
        _row(x, "update", "R1", 2) | {"scn": 13, "rollback": True},  # cancels the update at 12
        {"op": "commit", "xid": x, "scn": 14, "tm": _TM0},
        _row(x, "insert", "R9", 9) | {"scn": 15},  # after the commit: late, dropped
        {"op": "lwn", "scn": 16},
        {"op": "begin", "xid": x, "scn": 20},  # the XID used again
        _row(x, "delete", "R1", 1) | {"scn": 21},
        _row(x, "insert", "R2", 3) | {"scn": 22, "rollback": True},  # nothing to cancel
        {"op": "commit", "xid": x, "scn": 23, "tm": _TM0 + 1},
        {"op": "commit", "xid": x, "scn": 24, "tm": _TM0 + 2},  # an extra end
        {"op": "close", "scn": 25},
        {"op": "begin", "xid": x, "scn": 30},  # and again: rolled back
        _row(x, "insert", "R3", 4) | {"scn": 31},
        {"op": "rollback", "xid": x, "scn": 32},
    ]
    y = "0x0009.001.00000001"
    t2 = [
        {"op": "begin", "xid": y, "scn": 12},
        _row(y, "insert", "S1", 5) | {"scn": 17},
        {"op": "commit", "xid": y, "scn": 22, "tm": _TM0 + 3},
    ]
    write_input(tmp_path / "in", {1: t1, 2: t2}, per_file=4)
    expected = replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"))
    got = replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q2"), str(tmp_path / "cf2"))
    rows = load_changefeed(tmp_path / "cf2")
    assert_changefeed_equal(rows, load_changefeed(tmp_path / "cf1"))
    assert [(r["xid"], r["op"], r["rid"], r["c_scn"]) for r in rows] == [
        (x, "c", "R1", 14),
        (y, "c", "S1", 22),
        (x, "d", "R1", 23),
    ]
    assert (got.rolled_back, got.extra_end_records, got.unmatched_compensations) == (1, 1, 1)
    assert got.late_records >= 1 and expected.rows_published == got.rows_published == 3


def test_large_files_read_in_splits(spark, tmp_path):
    """Plain files cut in splits of 4 KiB (each a task; a split reads the lines that start
    in it), archived ``.zst`` files one task each: replay's changefeed, its summary's
    figures, and run_from (which needs each file's records)."""
    simulate(tmp_path / "in", threads=3, transactions=200, seed=13, records_per_file=400, open_at_end=2)
    plain = [p for p in (tmp_path / "in").iterdir() if p.suffix == ".jsonl"]
    assert any(p.stat().st_size > 4 * 4096 for p in plain)
    assert any(p.suffix == ".zst" for p in (tmp_path / "in").iterdir())
    stages: list[str] = []
    expected = replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions())
    got = replay_on_spark(
        spark,
        str(tmp_path / "in"),
        str(tmp_path / "q2"),
        str(tmp_path / "cf2"),
        split_bytes=4096,
        on_stage=stages.append,
    )
    assert any(s.startswith("count the lines of") for s in stages), stages
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), load_changefeed(tmp_path / "cf1"))
    assert got.records_read == expected.records_read
    assert got.compensations == expected.compensations > 0
    assert got.open_transactions == expected.open_transactions == 2
    whole = replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q3"), str(tmp_path / "cf3"))
    assert got.run_from == whole.run_from


def _lines(n: int, start_scn: int = 100) -> list[str]:
    """``n`` lines of one thread, of uneven lengths: transactions of a row each."""
    out = []
    for i in range(n // 3):
        x = f"0x{i:04x}.001.00000001"
        out.append(json.dumps({"op": "begin", "xid": x, "scn": start_scn + 3 * i}))
        rec = _row(x, "insert", f"R{i}", i) | {"scn": start_scn + 3 * i + 1}
        rec["after"]["PAD"] = "x" * (i * 37 % 300)
        out.append(json.dumps(rec))
        out.append(json.dumps({"op": "commit", "xid": x, "scn": start_scn + 3 * i + 2}))
    return out


@pytest.mark.parametrize("bad", ["malformed", "scn-back"])
def test_a_bad_line_in_the_second_split_has_its_line_number(spark, tmp_path, bad):
    """A file cut in splits; a bad line in the second one (a malformed line, an SCN below
    the line before it, which the first split read): the job stops with replay's
    ``FILE:LINE: reason``, the line counted from the file's start; with a dead-letter
    file, the same bad line set aside as replay sets it aside."""
    lines = _lines(300)
    split_bytes = sum(len(x) + 1 for x in lines) // 4
    at, size = 0, 0
    while size < split_bytes * 1.3:  # a line in the second split, not at its start
        size += len(lines[at]) + 1
        at += 1
    at -= at % 3  # a begin
    lines[at] = '{"op": "begin", "xid": "y", "scn": 5}' if bad == "scn-back" else '{"op": "begin", "xid"'
    src = tmp_path / "in"
    src.mkdir()
    (src / "redo_1_1.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as replay_error:
        replay(str(src), str(tmp_path / "q1"), str(tmp_path / "cf1"))
    with pytest.raises(InputError) as spark_error:
        replay_on_spark(spark, str(src), str(tmp_path / "q2"), str(tmp_path / "cf2"), split_bytes=split_bytes)
    got, expected = spark_error.value, replay_error.value
    assert expected.line == at + 1
    assert (got.path, got.line, got.reason) == (expected.path, expected.line, expected.reason)
    if bad == "malformed":  # (a line out of order is not set aside: it stops replay either way)
        replay(str(src), str(tmp_path / "q3"), str(tmp_path / "cf3"), PipelineOptions(dead_letter=str(tmp_path / "d1")))
        got_dl = replay_on_spark(
            spark,
            str(src),
            str(tmp_path / "q4"),
            str(tmp_path / "cf4"),
            split_bytes=split_bytes,
            dead_letter=str(tmp_path / "d2"),
        )
        assert got_dl.quarantined == 1
        assert load_changefeed(tmp_path / "cf4") == load_changefeed(tmp_path / "cf3")
        strip = lambda p: [{k: v for k, v in json.loads(x).items() if k != "ts"} for x in p.read_text().splitlines()]  # noqa: E731
        assert strip(tmp_path / "d2") == strip(tmp_path / "d1")


def test_sorted_rows_staged_on_s3_in_many_parts(spark, tmp_path, s3_env, monkeypatch):
    """The executors stage the sorted rows as many Parquet files (partitions of 150 rows)
    on S3; the driver publishes them in order: replay's changefeed, and nothing of the job
    is left in the staging prefix, not even what an earlier, killed run left there; what
    else the prefix holds is not touched."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    import olr_buffer.spark_sink.replay as spark_replay
    from olr_buffer.store import open_store

    monkeypatch.setattr(spark_replay, "PARTITION_ROWS", 150)
    simulate(tmp_path / "in", threads=3, transactions=120, seed=23, records_per_file=200)
    staging = f"s3://{s3_env.new_bucket()}/staging"
    store = open_store(staging)
    left = tmp_path / "left.parquet"
    pq.write_table(pa.table({"tx_seq": [0]}), left)
    queue_id = spark_replay._queue_id(str(tmp_path / "q2"))
    store.create_from_file(f"olr-buffer-{queue_id}/killed-run/part-00000-7.parquet", left)
    store.create_from_file("someone-else/part-00000-7.parquet", left)
    store.create("notes.txt", b"not the job's")
    stages: list[str] = []
    replay(str(tmp_path / "in"), str(tmp_path / "q1"), str(tmp_path / "cf1"), PipelineOptions())
    got = replay_on_spark(
        spark,
        str(tmp_path / "in"),
        str(tmp_path / "q2"),
        str(tmp_path / "cf2"),
        staging=staging,
        on_stage=stages.append,
    )
    assert_changefeed_equal(load_changefeed(tmp_path / "cf2"), load_changefeed(tmp_path / "cf1"))
    parts = int(stages[-1].rsplit(": ", 1)[1].split()[0])
    assert parts >= got.rows_published // 150 > 3, stages[-1]
    assert sorted(o.name for o in store.list("", recursive=True)) == [
        "notes.txt",
        "someone-else/part-00000-7.parquet",
    ]


def test_a_staged_part_not_reported_stops_the_job_before_a_row_is_published(spark, tmp_path, monkeypatch):
    """The driver checks that the staged parts hold every row once before it publishes
    one: a part whose task did not report it is an error, and the changefeed stays
    empty."""
    import olr_buffer.spark_sink.replay as spark_replay

    real = spark_replay._stager

    def losing_the_first(staging):
        write = real(staging)

        def lossy(batches):
            from pyspark import TaskContext

            reported = list(write(batches))
            ctx = TaskContext.get()
            return iter([] if ctx is not None and ctx.partitionId() == 0 else reported)

        return lossy

    monkeypatch.setattr(spark_replay, "PARTITION_ROWS", 100)
    monkeypatch.setattr(spark_replay, "_stager", losing_the_first)
    simulate(tmp_path / "in", threads=2, transactions=60, seed=3, records_per_file=200)
    with pytest.raises(spark_replay.SparkReplayError, match=r"the staged parts hold \d+ rows, not \d+: this is a bug"):
        replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"))
    assert not list((tmp_path / "cf").glob("*.parquet"))
    assert not list((tmp_path / "q" / "staging").rglob("*.parquet"))


def test_staged_parts_the_driver_cannot_see_are_a_one_line_error(spark, tmp_path, monkeypatch):
    """On a cluster whose executors staged on their own disks (a --spark-staging that not
    every machine reaches), the driver does not find the parts: an error that says what to
    give, before a row is published."""
    import olr_buffer.spark_sink.replay as spark_replay

    real = spark_replay._stager

    def on_another_disk(staging):
        write = real(staging)

        def elsewhere(batches):
            import os as os_

            reported = list(write(batches))
            fs, folder = staging.filesystem()
            for r in reported:  # as if written on the executor's machine: the driver's has none
                os_.remove(f"{folder}/{r.column('name')[0].as_py()}")
            return iter(reported)

        return elsewhere

    monkeypatch.setattr(spark_replay, "_stager", on_another_disk)
    simulate(tmp_path / "in", threads=2, transactions=30, seed=3, records_per_file=200)
    with pytest.raises(spark_replay.SparkReplayError) as err:
        replay_on_spark(spark, str(tmp_path / "in"), str(tmp_path / "q"), str(tmp_path / "cf"))
    assert "part(s) the executors staged are not there for the driver" in str(err.value)
    assert "hint: give --spark-staging (staging=) a directory that every executor and the driver reach" in str(
        err.value
    )
    assert not list((tmp_path / "cf").glob("*.parquet"))
