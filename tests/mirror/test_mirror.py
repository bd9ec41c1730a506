"""``olr-buffer mirror`` over a redo changefeed: every mirror table equals the model's final
rows per key (tests/mirror/workload.py), however the changefeed is batched, plain or
Delta; exactly once (the same batch twice, a rerun); foreign or ahead targets refused."""

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
from deltalake import DeltaTable

from olr_buffer.mirror import MirrorDataError, MirrorError, MirrorOptions, app_id, mirror
from olr_buffer.runtime import PipelineOptions, replay

from .workload import model, write_workload

TABLES = ("ORDERS", "ITEMS", "LOG")


def make_changefeed(
    tmp_path: Path, seed: int = 1, transactions: int = 300, file_rows: int = 40, table_format: str = "parquet"
) -> Path:
    write_workload(tmp_path / "in", seed, transactions)
    cf = tmp_path / "cf"
    replay(
        str(tmp_path / "in"),
        str(tmp_path / "q"),
        str(cf),
        PipelineOptions(file_rows=file_rows, durable=False, table_format=table_format)
        if table_format != "parquet"
        else PipelineOptions(file_rows=file_rows, durable=False),
    )
    return cf


def mirror_rows(target: Path, table: str) -> list[dict]:
    return DeltaTable(str(target / "SHOP" / table)).to_pyarrow_table().to_pylist()


def assert_mirror_equals_model(cf: Path, target: Path) -> None:
    expected = model(cf)
    for table in TABLES:
        got = mirror_rows(target, table)
        columns = [c for c in DeltaTable(str(target / "SHOP" / table)).schema().to_arrow().names if c != "c_scn"]
        have = sorted(({c: r[c] for c in columns} for r in got), key=repr)
        want = sorted(({c: r.get(c) for c in columns} for r in expected[table]), key=repr)
        assert have == want, table
        assert expected[table], table  # the workload leaves rows in every table


@pytest.mark.parametrize("batch_rows", [1, 50, 1_000_000])
def test_mirror_equals_the_final_state_per_key(tmp_path, batch_rows):
    cf = make_changefeed(tmp_path)
    target = tmp_path / "mirror"
    result = mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=batch_rows))
    assert result.last_tx_seq == 299
    assert_mirror_equals_model(cf, target)
    orders = DeltaTable(str(target / "SHOP" / "ORDERS"))
    names = orders.schema().to_arrow().names
    assert names == ["ORDER_ID", "TOTAL", "CITY", "CREATED", "TAG", "NOTE", "tx_seq", "c_scn"]  # NOTE added
    assert "SKU" in DeltaTable(str(target / "SHOP" / "ITEMS")).schema().to_arrow().names  # dropped: kept, null
    # each table's commits carry the changefeed's application transaction: its last tx_seq
    queue_id = json.loads((cf / "_olr_buffer" / "manifest.json").read_text())["queue_id"]
    for table in TABLES:
        dt = DeltaTable(str(target / "SHOP" / table))
        last = max(r["tx_seq"] for r in mirror_rows(target, table))
        assert dt.transaction_version(app_id(queue_id, "SHOP", table)) >= last


def test_a_delta_changefeed_mirrors_the_same(tmp_path):
    cf = make_changefeed(tmp_path, seed=2, table_format="delta")
    assert (cf / "_delta_log").is_dir()
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=100))
    assert_mirror_equals_model(cf, target)


def test_a_rerun_and_the_same_batch_again_change_nothing(tmp_path):
    cf = make_changefeed(tmp_path, seed=3)
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=60))
    versions = {t: DeltaTable(str(target / "SHOP" / t)).version() for t in TABLES}
    # a rerun: nothing to do
    assert mirror(MirrorOptions(str(cf), str(target), until_caught_up=True)).commits == 0
    # the progress note lost: every batch is read again, and every table refuses it by its version
    (target / "_olr_buffer" / "mirror.json").unlink()
    assert mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=60)).commits == 0
    assert {t: DeltaTable(str(target / "SHOP" / t)).version() for t in TABLES} == versions
    assert_mirror_equals_model(cf, target)


def test_a_table_behind_the_others_catches_up(tmp_path):
    """A kill between two tables' commits of a batch: one table holds it, the other not."""
    cf = make_changefeed(tmp_path, seed=4)
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=60))
    expected_items = sorted(map(repr, mirror_rows(target, "ITEMS")))
    shutil.rmtree(target / "SHOP" / "ITEMS")
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=60, tables={("SHOP", "ITEMS")}))
    assert sorted(map(repr, mirror_rows(target, "ITEMS"))) == expected_items
    assert_mirror_equals_model(cf, target)


def test_only_the_tables_asked_for(tmp_path):
    cf = make_changefeed(tmp_path, seed=5)
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, tables={("SHOP", "LOG")}))
    assert sorted(p.name for p in (target / "SHOP").iterdir()) == ["LOG"]


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        timeout=300,
    )


@pytest.mark.e2e
def test_a_target_of_another_changefeed_is_refused(tmp_path):
    cf = make_changefeed(tmp_path / "a", seed=6)
    other = make_changefeed(tmp_path / "b", seed=6)
    target = tmp_path / "mirror"
    assert _cli("mirror", str(cf), "--target", str(target), "--until-caught-up").returncode == 0
    done = _cli("mirror", str(other), "--target", str(target), "--until-caught-up")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "holds the mirror of another changefeed" in lines[0], done.stderr
    # without the progress note: the tables themselves say whose they are
    (target / "_olr_buffer" / "mirror.json").unlink()
    done = _cli("mirror", str(other), "--target", str(target), "--until-caught-up")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "a Delta table that the mirror of this changefeed" in lines[0], done.stderr


@pytest.mark.e2e
def test_a_target_ahead_of_the_changefeed_is_refused(tmp_path):
    cf = make_changefeed(tmp_path / "a", seed=7, transactions=300)
    target = tmp_path / "mirror"
    assert _cli("mirror", str(cf), "--target", str(target), "--until-caught-up").returncode == 0
    # the changefeed made again from the first half of its input, into the same queue id:
    # a copy of it that lacks its last files
    short = tmp_path / "short"
    shutil.copytree(cf, short)
    parts = sorted(short.glob("part-*.parquet"))
    for p in parts[len(parts) // 2 :]:
        p.unlink()
    (short / "_olr_buffer" / "manifest.json").unlink()
    done = _cli("mirror", str(short), "--target", str(target), "--until-caught-up")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the target is ahead of it" in lines[0], done.stderr


def test_a_table_without_schema_documents_is_named(tmp_path):
    inp = tmp_path / "in"
    inp.mkdir()
    recs = [
        {"op": "begin", "scn": 1, "xid": "x"},
        {"op": "insert", "scn": 2, "xid": "x", "owner": "O", "table": "T", "rid": "R", "after": {"A": 1}},
        {"op": "commit", "scn": 3, "xid": "x"},
    ]
    (inp / "redo_1_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"))
    with pytest.raises(MirrorDataError, match=r"O\.T: tx_seq 0: its rows name no schema document"):
        mirror(MirrorOptions(str(tmp_path / "cf"), str(tmp_path / "m"), until_caught_up=True))


def test_a_foreign_delta_table_is_refused(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake

    cf = make_changefeed(tmp_path, seed=8, transactions=20)
    write_deltalake(str(tmp_path / "m" / "SHOP" / "ORDERS"), pa.table({"x": [1]}))
    with pytest.raises(MirrorError, match="a Delta table that the mirror of this changefeed"):
        mirror(MirrorOptions(str(cf), str(tmp_path / "m"), until_caught_up=True))


@pytest.mark.e2e
@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_a_changefeed_and_a_target_on_object_storage(tmp_path, s3_uri, table_format):
    write_workload(tmp_path / "in", 9, 120)
    cf = s3_uri
    options = PipelineOptions(
        file_rows=40, durable=False, **({"table_format": "delta"} if table_format == "delta" else {})
    )
    replay(str(tmp_path / "in"), str(tmp_path / "q"), cf, options)
    target = s3_uri.rsplit("/", 1)[0] + "/mirror"
    mirror(MirrorOptions(cf, target, until_caught_up=True, batch_rows=50, history=True))
    assert mirror(MirrorOptions(cf, target, until_caught_up=True, history=True)).commits == 0
    from olr_buffer.mirror import mirror_status

    doc = mirror_status(cf, target)
    assert doc["selections"] == [{"tables": "*", "scanned": 119, "behind": 0}]
    assert sorted(t["table"] for t in doc["tables"] if t["ours"]) == [
        "SHOP.ITEMS",
        "SHOP.ITEMS__history",
        "SHOP.LOG",
        "SHOP.ORDERS",
        "SHOP.ORDERS__history",
    ]
    # the model reads a local copy of the changefeed; the mirror tables are read from S3
    from olr_buffer.store import open_store

    store, local = open_store(cf), tmp_path / "copy"
    for obj in store.list("", recursive=True):
        path = local / obj.name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(store.read(obj.name))
    shutil.rmtree(local / "_delta_log", ignore_errors=True)
    expected = model(local)
    for table in TABLES:
        uri, opts = open_store(f"{target}/SHOP/{table}").delta_location()
        got = DeltaTable(uri, storage_options=opts or None).to_pyarrow_table().to_pylist()
        columns = [c for c in (got[0] if got else {}) if c != "c_scn"]
        assert sorted(({c: r[c] for c in columns} for r in got), key=repr) == sorted(
            ({c: r.get(c) for c in columns} for r in expected[table]), key=repr
        ), table


@pytest.mark.e2e
def test_status_shows_how_far_behind_the_mirror_is(tmp_path):
    write_workload(tmp_path / "all", 10, 200)
    inp = tmp_path / "in"
    inp.mkdir()
    files = sorted((tmp_path / "all").iterdir())
    shutil.copy(files[0], inp)
    opts = PipelineOptions(file_rows=30, durable=False)
    first = replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"), opts).next_tx_seq
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(tmp_path / "cf"), str(target), until_caught_up=True))
    for f in files[1:]:
        shutil.copy(f, inp)
    last = replay(str(inp), str(tmp_path / "q"), str(tmp_path / "cf"), opts).next_tx_seq
    done = _cli("status", "--changefeed", str(tmp_path / "cf"), "--mirror", str(target))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"mirror {target} of {tmp_path / 'cf'} (changefeed up to tx_seq {last - 1})"
    assert lines[1] == f"  every table: read up to tx_seq {first - 1}, {last - first} transaction(s) behind"
    assert any(line.startswith("  SHOP.ORDERS: last change applied at tx_seq ") for line in lines)
    doc = json.loads(_cli("status", "--changefeed", str(tmp_path / "cf"), "--mirror", str(target), "--json").stdout)
    assert doc["selections"] == [{"tables": "*", "scanned": first - 1, "behind": last - first}]


@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_a_changefeed_compacted_in_place_under_the_mirror(tmp_path, table_format):
    """The mirror's listing starts over when the changefeed's files are merged under it
    (a Delta changefeed's compaction is a commit), and applies nothing twice."""
    from olr_buffer.mirror import Mirror
    from olr_buffer.sinks.parquet import compact

    write_workload(tmp_path / "all", 14, 240)
    inp = tmp_path / "in"
    inp.mkdir()
    files = sorted((tmp_path / "all").iterdir())
    for f in files[:2]:
        shutil.copy(f, inp)
    cf = tmp_path / "cf"
    opts = PipelineOptions(
        file_rows=20, durable=False, **({"table_format": "delta"} if table_format == "delta" else {})
    )
    replay(str(inp), str(tmp_path / "q"), str(cf), opts)
    target = tmp_path / "mirror"
    m = Mirror(MirrorOptions(str(cf), str(target), until_caught_up=True, batch_rows=30))
    m.run()
    read = m.feed.last_tx_seq
    for f in files[2:]:
        shutil.copy(f, inp)
    replay(str(inp), str(tmp_path / "q"), str(cf), opts)
    # files the mirror read and files it did not, merged into one
    result = compact(str(cf), in_place=True, no_reader_running=True, target_rows=10_000, durable=False)
    assert result.files_merged > 1, result
    m.run()
    assert m.feed.files[0].last > read  # listed again
    assert_mirror_equals_model(cf, target)
    versions = _versions_of(target)
    (target / "_olr_buffer" / "mirror.json").unlink()
    assert mirror(MirrorOptions(str(cf), str(target), until_caught_up=True)).commits == 0
    assert _versions_of(target) == versions


def _versions_of(target: Path) -> dict:
    return {t: DeltaTable(str(target / "SHOP" / t)).version() for t in TABLES}


@pytest.mark.e2e
def test_a_second_mirror_of_a_target_is_refused(tmp_path):
    cf = make_changefeed(tmp_path, seed=15, transactions=40)
    target = tmp_path / "mirror"
    first = subprocess.Popen(
        [sys.executable, "-m", "olr_buffer.cli", "mirror", str(cf), "--target", str(target)],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not (target / "_olr_buffer" / "mirror.json").exists():
            assert time.monotonic() < deadline and first.poll() is None
            time.sleep(0.05)
        done = _cli("mirror", str(cf), "--target", str(target), "--until-caught-up")
        assert done.returncode == 1
        assert done.stderr.strip().splitlines() == [
            f"olr-buffer: error: {target}: another mirror (pid {first.pid}) writes this target "
            "(hint: one mirror per target: stop the other one first)"
        ]
    finally:
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    assert first.returncode == 0
    assert _cli("mirror", str(cf), "--target", str(target), "--until-caught-up").returncode == 0


@pytest.mark.e2e
def test_a_mirror_table_that_cannot_be_read_is_named_in_one_line(tmp_path):
    cf = make_changefeed(tmp_path, seed=16, transactions=30)
    target = tmp_path / "mirror"
    assert _cli("mirror", str(cf), "--target", str(target), "--until-caught-up").returncode == 0
    log = target / "SHOP" / "ORDERS" / "_delta_log"
    last = max(int(p.stem) for p in log.glob("*.json"))
    (log / f"{last + 1:020d}.json").write_text("{not json\n")
    done = _cli("mirror", str(cf), "--target", str(target), "--until-caught-up")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"olr-buffer: error: {target / 'SHOP' / 'ORDERS'}: cannot read the mirror table: "
    ), done.stderr


def test_a_target_of_a_changefeed_that_is_empty_now_is_ahead(tmp_path):
    cf = make_changefeed(tmp_path, seed=17, transactions=20)
    target = tmp_path / "mirror"
    mirror(MirrorOptions(str(cf), str(target), until_caught_up=True))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(
        MirrorError, match=r"holds transactions up to tx_seq 19, and the changefeed .* ends at tx_seq -1"
    ):
        mirror(MirrorOptions(str(empty), str(target), until_caught_up=True))


@pytest.mark.e2e
@pytest.mark.slow
def test_the_service_rides_out_a_changefeed_store_that_cannot_be_reached(tmp_path, s3_env):
    from tests.s3_server import TcpProxy

    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    write_workload(tmp_path / "all", 18, 200)
    inp = tmp_path / "in"
    inp.mkdir()
    files = sorted((tmp_path / "all").iterdir())
    shutil.copy(files[0], inp)
    opts = PipelineOptions(file_rows=30, durable=False)
    cf = f"s3://{s3_env.new_bucket()}/cf"
    first = replay(str(inp), str(tmp_path / "q"), cf, opts).next_tx_seq
    target = tmp_path / "mirror"

    def scanned() -> int:
        try:
            return json.loads((target / "_olr_buffer" / "mirror.json").read_text())["scanned"]["*"]
        except (FileNotFoundError, ValueError, KeyError):
            return -1

    log = tmp_path / "mirror.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "olr_buffer.cli", "mirror", cf, "--target", str(target), "--poll-interval", "0.1"],
            env={**os.environ, "PYTHONPATH": os.getcwd(), "AWS_ENDPOINT_URL": proxy.endpoint},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while scanned() != first - 1:
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        proxy.down()
        deadline = time.monotonic() + 120
        while "trying again in" not in log.read_text():  # its look for new files fails, and it waits
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        for f in files[1:]:
            shutil.copy(f, inp)
        last = replay(str(inp), str(tmp_path / "q"), cf, opts).next_tx_seq
        proxy.up()
        deadline = time.monotonic() + 180
        while scanned() != last - 1:
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.2)
    finally:
        if proxy._listener is None:
            proxy.up()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
        proxy.down()
    assert proc.returncode == 0, log.read_text()
    assert "the stores answer again" in log.read_text()
    assert mirror(MirrorOptions(cf, str(target), until_caught_up=True)).commits == 0


@pytest.mark.e2e
def test_a_second_signal_stops_the_service_at_once_against_a_store_that_does_not_answer(tmp_path, s3_env):
    """The changefeed's store stops answering (a black hole: each call waits 30 s a try,
    10 tries): SIGTERM asks for a stop, which waits for the call under way; a second
    SIGTERM stops at once, with one line, exit 0; run again, the mirror finishes what was
    left."""
    from tests.s3_server import TcpProxy

    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    write_workload(tmp_path / "in", 6, 60)
    cf = f"s3://{s3_env.new_bucket()}/cf"
    replay(str(tmp_path / "in"), str(tmp_path / "q"), cf, PipelineOptions(file_rows=30, durable=False))
    target = tmp_path / "mirror"
    log = tmp_path / "mirror.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "olr_buffer.cli", "mirror", cf, "--target", str(target), "--poll-interval", "0.1"],
            env={**os.environ, "PYTHONPATH": os.getcwd(), "AWS_ENDPOINT_URL": proxy.endpoint, "AWS_MAX_ATTEMPTS": "10"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )

    def wait_for(cond, what: str) -> None:
        deadline = time.monotonic() + 120
        while not cond():
            assert time.monotonic() < deadline and proc.poll() is None, f"{what}:\n{log.read_text()}"
            time.sleep(0.05)

    try:
        wait_for(lambda: (target / "_olr_buffer" / "mirror.json").exists(), "the mirror never started")
        proxy.hang()
        wait_for(lambda: proxy.swallowed > 0, "the mirror never looked at the changefeed again")
        proc.send_signal(signal.SIGTERM)
        wait_for(lambda: "received SIGTERM, stopping" in log.read_text(), "the first signal is not logged")
        assert proc.poll() is None  # (its call waits for the store: 30 s a try, 10 tries)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError("no stop within 60 s of the second signal:\n" + log.read_text()) from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proxy.down()
    text = log.read_text()
    assert proc.returncode == 0, text
    assert "received SIGTERM again, stopping at once" in text, text
    lines = [line for line in text.splitlines() if line.startswith("olr-buffer: ")]
    assert lines == ["olr-buffer: stopped at once (SIGTERM again): what it waited for is left undone"], text
    assert "Traceback" not in text, text
    mirror(MirrorOptions(cf, str(target), until_caught_up=True))
    local = tmp_path / "local-cf"  # (the same input's changefeed, for the model)
    replay(str(tmp_path / "in"), str(tmp_path / "q2"), str(local), PipelineOptions(file_rows=30, durable=False))
    assert_mirror_equals_model(local, target)


@pytest.mark.e2e
def test_metrics_and_health_of_the_service(tmp_path):
    import re
    import urllib.request

    cf = make_changefeed(tmp_path, seed=19, transactions=60)
    target = tmp_path / "mirror"
    log = tmp_path / "mirror.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "olr_buffer.cli",
                "mirror",
                str(cf),
                "--target",
                str(target),
                "--metrics-port",
                "0",
                "--poll-interval",
                "0.1",
            ],
            env={**os.environ, "PYTHONPATH": os.getcwd()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while not (m := re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text())):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.05)
        url = f"http://127.0.0.1:{m.group(1)}"

        def value(name: str) -> float:
            text = urllib.request.urlopen(f"{url}/metrics", timeout=30).read().decode()
            found = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
            return float(found.group(1)) if found else float("nan")

        while value("olr_buffer_mirror_last_tx_seq") != 59:
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text()
            time.sleep(0.1)
        assert value("olr_buffer_mirror_changefeed_last_tx_seq") == 59
        assert value("olr_buffer_mirror_transactions_behind") == 0
        assert value("olr_buffer_mirror_commits_total") >= 3 and value("olr_buffer_mirror_changes_total") > 60
        health = urllib.request.urlopen(f"{url}/health", timeout=30)
        assert health.status == 200 and json.loads(health.read())["status"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    assert proc.returncode == 0, log.read_text()


@pytest.mark.parametrize("batch_rows", [1, 40, 250])
def test_a_file_larger_than_a_batch_is_read_in_parts_of_whole_transactions(tmp_path, batch_rows):
    from olr_buffer.sinks.parquet import compact

    cf = make_changefeed(tmp_path, seed=20, transactions=300)
    big = tmp_path / "big"
    compact(str(cf), output=str(big), target_rows=1_000_000, row_group_rows=25, durable=False)
    (part,) = big.glob("part-*.parquet")
    import pyarrow.parquet as pq

    assert pq.ParquetFile(part).metadata.num_row_groups > 10
    target = tmp_path / "mirror"
    result = mirror(MirrorOptions(str(big), str(target), until_caught_up=True, batch_rows=batch_rows))
    assert result.transactions == 300 and result.last_tx_seq == 299
    assert result.commits > (3 if batch_rows < 250 else 0)  # in parts: more than one commit a table
    assert_mirror_equals_model(big, target)


def test_a_changefeed_that_is_not_there_is_named_and_the_target_left_alone(tmp_path):
    with pytest.raises(MirrorError, match=r"nope: no such changefeed directory"):
        mirror(MirrorOptions(str(tmp_path / "nope"), str(tmp_path / "m"), until_caught_up=True))
    assert not (tmp_path / "m").exists()
