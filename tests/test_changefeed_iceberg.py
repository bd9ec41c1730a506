"""The changefeed as an Apache Iceberg table, end to end, on a local directory and on S3
(moto's server): real `replay` processes SIGKILLed between a file's upload and its commit,
inside the commit and after it, restarted; the catalog locked, damaged; the store
unreachable. Every transaction ends up exactly once, as the model says, read through
pyiceberg and as the plain Parquet files; every snapshot carries the queue id and the
last tx_seq it holds."""

from __future__ import annotations

import json
import signal
import socket
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from olr_buffer.simulate import simulate
from olr_buffer.sinks.parquet.schema import parse_part_name
from olr_buffer.store import open_store
from tests.contract_model import ModelResult, assert_changefeed_equal, expected_changefeed
from tests.s3_server import TcpProxy
from tests.test_changefeed_s3 import SMALL, Service, cli, live_input, one_line, plain_rows, run_args, wait_published

pytestmark = pytest.mark.e2e


def iceberg_table(cf: str, catalog: str | None):
    """The changefeed's table, loaded as a reader would (the catalog olr-buffer names
    ``olr_buffer``)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from olr_buffer.sinks.parquet.iceberg_settings import default_catalog_uri

    props: dict[str, str] = {}
    if cf.startswith("s3://"):
        import os

        props = {
            "s3.endpoint": os.environ["AWS_ENDPOINT_URL"],
            "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
        }
    uri = catalog or default_catalog_uri(cf)
    return SqlCatalog("olr_buffer", uri=uri, **props).load_table("olr_buffer.changefeed")


def sorted_rows(table) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    for row in rows:
        for column in ("before", "after"):
            if row.get(column) is not None:
                row[column] = json.loads(row[column])
    rows.sort(key=lambda r: (r["tx_seq"], r["op_seq"]))
    return rows


def part_names(cf: str) -> list[str]:
    return [o.name for o in open_store(cf).list("part-") if parse_part_name(o.name)]


def table_files(table) -> list[str]:
    return sorted(task.file.file_path.rsplit("/", 1)[1] for task in table.scan().plan_files())


def assert_exact(cf: str, catalog: str | None, model: ModelResult) -> None:
    """Exactly the model's changefeed, as the plain files and through pyiceberg; each
    published file in the table once; every snapshot stamped, the current one with the
    last tx_seq (a fence, by a leased writer's take-over, repeats where the table ends)."""
    assert_changefeed_equal(plain_rows(cf) if cf.startswith("s3://") else local_rows(cf), model.rows)
    table = iceberg_table(cf, catalog)
    assert_changefeed_equal(sorted_rows(table.scan().to_arrow()), model.rows)
    assert table_files(table) == part_names(cf)
    snapshots = table.snapshots()
    assert all(s.summary["olr_buffer.app_id"] and s.summary["olr_buffer.last_tx_seq"] for s in snapshots)
    assert int(snapshots[-1].summary["olr_buffer.last_tx_seq"]) == model.committed - 1
    snapshots = [s for s in snapshots if s.summary["olr_buffer.fence"] is None]  # (a take-over's: adds nothing)
    added = sum(int(s.summary["added-data-files"]) for s in snapshots)
    assert added == len(part_names(cf)), "a file added twice"
    stamps = [int(s.summary["olr_buffer.last_tx_seq"]) for s in snapshots]
    assert stamps == sorted(set(stamps)) and stamps[-1] == model.committed - 1, stamps


def local_rows(cf: str) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for name in part_names(cf):
        rows.extend(sorted_rows(pq.read_table(Path(cf) / name)))
    return rows


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("iceberg-input") / "input"
    simulate(out, threads=2, transactions=260, seed=31, records_per_file=250)
    return out


@pytest.fixture(scope="module")
def model(staged: Path) -> ModelResult:
    return expected_changefeed(staged)


@pytest.fixture(params=["local", "s3"])
def paths(request, staged: Path, tmp_path: Path) -> dict[str, Any]:
    if request.param == "s3":
        cf = request.getfixturevalue("s3_uri")
        catalog: str | None = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        cf, catalog = str(tmp_path / "cf"), None
    return {"input": staged, "queue": tmp_path / "queue", "cf": cf, "catalog": catalog}


def replay(p: dict, *extra: Any, fault: str | None = None, env: dict[str, str] | None = None):
    catalog = ("--iceberg-catalog", p["catalog"]) if p["catalog"] and "--table-format" in extra else ()
    return cli(
        "replay",
        p["input"],
        "--queue",
        p["queue"],
        "--changefeed",
        p["cf"],
        "--no-progress",
        *SMALL,
        *catalog,
        *extra,
        fault=fault,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "faults",
    [
        ("after_rename:2", "before_iceberg_commit:2"),  # between the file's upload and its commit; in the commit
        ("after_iceberg_commit:2", "after_tmp_written:3"),  # committed, manifest not written; file not published
        ("iceberg_manifests_written:3",),  # the snapshot's manifests written, the catalog not told
    ],
    ids=["upload-commit", "commit-manifest", "manifests-catalog"],
)
def test_replay_iceberg_killed_at_each_step_is_exact(paths, model, faults):
    for i, fault in enumerate(faults):
        killed = replay(paths, "--table-format", "iceberg", fault=fault)
        assert killed.returncode == -signal.SIGKILL, (fault, killed.describe())
        if i == 0 and fault.startswith("after_rename"):
            # the window: a published file that no snapshot adds yet
            assert len(part_names(paths["cf"])) == len(table_files(iceberg_table(paths["cf"], paths["catalog"]))) + 1
    done = replay(paths, "--json")  # no flags: the changefeed records its format and its catalog
    assert done.returncode == 0, done.describe()
    assert done.json()["next_tx_seq"] == model.committed
    assert_exact(paths["cf"], paths["catalog"], model)
    again = replay(paths, "--json")
    assert again.returncode == 0 and again.json()["transactions_published"] == 0
    assert_exact(paths["cf"], paths["catalog"], model)


def test_replay_iceberg_is_exact_and_records_its_catalog(paths, model):
    done = replay(paths, "--table-format", "iceberg", "--json")
    assert done.returncode == 0, done.describe()
    assert_exact(paths["cf"], paths["catalog"], model)
    manifest = json.loads(open_store(paths["cf"]).read("_olr_buffer/manifest.json"))
    assert manifest["table_format"] == "iceberg"
    assert manifest.get("iceberg", {}).get("catalog") == paths["catalog"]
    refused = replay(paths, "--table-format", "delta")
    one_line(refused, "is an Iceberg changefeed", "--table-format delta would publish files")


def test_a_parquet_changefeed_becomes_an_iceberg_one_with_its_files_as_they_are(paths, model):
    half = replay(paths, fault="after_rename:4")  # a plain Parquet changefeed of 4 files, then killed
    assert half.returncode == -signal.SIGKILL
    before = {name: open_store(paths["cf"]).stat(name).size for name in part_names(paths["cf"])}
    assert len(before) == 4
    done = replay(paths, "--table-format", "iceberg")
    assert done.returncode == 0, done.describe()
    assert_exact(paths["cf"], paths["catalog"], model)
    first = iceberg_table(paths["cf"], paths["catalog"]).snapshots()[0]
    assert int(first.summary["added-data-files"]) == 4  # the files published before: one commit, not rewritten
    assert {n: open_store(paths["cf"]).stat(n).size for n in before} == before


def test_iceberg_on_s3_without_a_catalog_is_one_line(staged, tmp_path, s3_uri):
    p = {"input": staged, "queue": tmp_path / "queue", "cf": s3_uri, "catalog": None}
    refused = replay(p, "--table-format", "iceberg")
    one_line(refused, "an Iceberg changefeed on object storage needs a catalog", "--iceberg-catalog")


def test_a_damaged_catalog_is_one_line_and_nothing_is_published_twice(staged, model, tmp_path):
    p = {"input": staged, "queue": tmp_path / "queue", "cf": str(tmp_path / "cf"), "catalog": None}
    killed = replay(p, "--table-format", "iceberg", fault="after_rename:3")
    assert killed.returncode == -signal.SIGKILL
    catalog = tmp_path / "cf" / "_iceberg" / "catalog.db"
    saved = catalog.read_bytes()
    catalog.write_bytes(b"this is not a SQLite database" * 200)
    refused = replay(p)
    one_line(refused, "the Iceberg catalog", "is damaged")
    catalog.write_bytes(saved)  # put back (from a backup)
    done = replay(p)
    assert done.returncode == 0, done.describe()
    assert_exact(p["cf"], None, model)


@pytest.mark.slow
def test_a_locked_catalog_is_one_line_then_resumes(staged, model, tmp_path):
    p = {"input": staged, "queue": tmp_path / "queue", "cf": str(tmp_path / "cf"), "catalog": None}
    killed = replay(p, "--table-format", "iceberg", fault="after_rename:3")
    assert killed.returncode == -signal.SIGKILL
    lock = sqlite3.connect(tmp_path / "cf" / "_iceberg" / "catalog.db", timeout=0)
    try:
        lock.execute("BEGIN EXCLUSIVE")  # another process holds the catalog
        refused = replay(p)
        one_line(refused, "the Iceberg catalog", "is locked by another process")
    finally:
        lock.rollback()
        lock.close()
    done = replay(p)
    assert done.returncode == 0, done.describe()
    assert_exact(p["cf"], None, model)


def test_compact_is_one_snapshot_of_the_same_rows_that_deletes_nothing(paths, model):
    assert replay(paths, "--table-format", "iceberg").returncode == 0
    before = part_names(paths["cf"])
    table = iceberg_table(paths["cf"], paths["catalog"])
    old_snapshot = table.current_snapshot().snapshot_id
    done = cli(
        "compact", paths["cf"], "--in-place", "--target-rows", "1000"
    )  # no promise needed: readers read a snapshot
    assert done.returncode == 0, done.describe()
    table = iceberg_table(paths["cf"], paths["catalog"])
    snapshot = table.current_snapshot()
    parent = table.snapshot_by_id(snapshot.parent_snapshot_id)
    if paths["cf"].startswith("s3://"):  # under the lease: it takes the table over first (a stamp, no file)
        assert parent.summary["olr_buffer.fence"] is not None and parent.summary["added-data-files"] is None
        assert int(snapshot.summary["olr_buffer.lease_generation"]) == int(parent.summary["olr_buffer.fence"])
        parent = table.snapshot_by_id(parent.parent_snapshot_id)
    assert parent.snapshot_id == old_snapshot  # one commit
    summary = snapshot.summary
    assert summary["added-records"] == summary["deleted-records"] and int(summary["deleted-data-files"]) > 1
    queue_id = json.loads(open_store(paths["cf"]).read("_olr_buffer/manifest.json"))["queue_id"]
    assert summary["olr_buffer.app_id"] == queue_id
    assert int(summary["olr_buffer.last_tx_seq"]) == model.committed - 1  # still says where the table ends
    assert set(before) <= set(part_names(paths["cf"]))  # nothing deleted
    assert len(table_files(table)) < len(before)
    assert_changefeed_equal(sorted_rows(table.scan().to_arrow()), model.rows)
    # a reader of the snapshot before the compaction still reads it whole
    assert_changefeed_equal(sorted_rows(table.scan(snapshot_id=old_snapshot).to_arrow()), model.rows)
    again = replay(paths, "--json")  # the writer goes on over the compacted table
    assert again.returncode == 0 and again.json()["transactions_published"] == 0, again.describe()


def test_status_shows_the_iceberg_table(paths, model):
    assert replay(paths, "--table-format", "iceberg").returncode == 0
    shown = cli("status", "--queue", paths["queue"], "--json")
    assert shown.returncode == 0, shown.describe()
    table = shown.json()["changefeed"]["iceberg"]
    assert table["table"] == "olr_buffer.changefeed" and table["last_tx_seq"] == model.committed - 1
    assert table["snapshot_id"] == iceberg_table(paths["cf"], paths["catalog"]).current_snapshot().snapshot_id
    text = cli("status", "--queue", paths["queue"])
    assert f"Iceberg table olr_buffer.changefeed at snapshot {table['snapshot_id']}" in text.stdout


@pytest.fixture
def proxy(s3_env):
    p = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    yield p
    p.down()


@pytest.mark.slow
def test_an_unreachable_store_is_one_line_then_replay_resumes_exactly(staged, model, tmp_path, s3_uri, proxy):
    env = {"AWS_ENDPOINT_URL": proxy.endpoint}
    p = {"input": staged, "queue": tmp_path / "queue", "cf": s3_uri, "catalog": f"sqlite:///{tmp_path / 'cat.db'}"}
    killed = replay(p, "--table-format", "iceberg", fault="after_rename:2", env=env)  # a file not committed
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    proxy.down()
    failed = replay(p, env=env)
    one_line(failed, s3_uri, "did not answer", "replay resumes when run again")
    proxy.up()
    done = replay(p, env=env)
    assert done.returncode == 0, done.describe()
    assert_exact(s3_uri, p["catalog"], model)


def test_a_catalog_that_does_not_answer_is_one_line(staged, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    catalog = f"postgresql+psycopg2://olr@127.0.0.1:{port}/catalog"
    p = {"input": staged, "queue": tmp_path / "queue", "cf": str(tmp_path / "cf"), "catalog": catalog}
    failed = replay(p, "--table-format", "iceberg")
    one_line(failed, "the store or the catalog did not answer", "replay resumes when run again")


def test_another_writer_of_the_table_stops_the_next_run_with_one_line(staged, model, tmp_path):
    p = {"input": staged, "queue": tmp_path / "queue", "cf": str(tmp_path / "cf"), "catalog": None}
    assert replay(p, "--table-format", "iceberg").returncode == 0
    table = iceberg_table(p["cf"], None)
    table.append(table.scan(limit=3).to_arrow())  # another program appends rows of its own
    refused = replay(p)
    line = one_line(refused, "was committed by another writer (append)", "the only writer")
    assert str(table.current_snapshot().snapshot_id) in line


def test_a_second_queue_is_refused(staged, model, tmp_path):
    p = {"input": staged, "queue": tmp_path / "queue", "cf": str(tmp_path / "cf"), "catalog": None}
    assert replay(p, "--table-format", "iceberg").returncode == 0
    other = {**p, "queue": tmp_path / "other-queue"}
    refused = replay(other, "--table-format", "iceberg")
    one_line(refused, "changefeed was written by")
    assert_exact(p["cf"], None, model)  # nothing published twice


@pytest.mark.slow
def test_run_killed_then_restarted_is_exact(paths, tmp_path):
    staged_plain = tmp_path / "input-plain"
    simulate(staged_plain, threads=2, transactions=260, seed=32, records_per_file=250, compress_archived=False)
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    model = expected_changefeed(live)
    catalog = ["--iceberg-catalog", paths["catalog"]] if paths["catalog"] else []
    for fault in ("after_rename:2", "before_iceberg_commit:3"):
        service = Service(*run_args(paths, live, "--table-format", "iceberg", *catalog), fault=fault)
        assert service.proc.wait(timeout=120) == -signal.SIGKILL, "\n".join(service.lines[-20:])
    service = Service(*run_args(paths, live))
    service.wait_line(r"committed \d+ published file\(s\) the Iceberg table lacked")
    wait_published(paths["cf"], model.committed)
    assert service.stop() == 0, "\n".join(service.lines[-20:])
    assert_exact(paths["cf"], paths["catalog"], model)


@pytest.mark.slow
def test_a_compaction_killed_before_its_snapshot_is_finished_by_the_next(paths, model):
    assert replay(paths, "--table-format", "iceberg").returncode == 0
    before = {t.file.file_path for t in iceberg_table(paths["cf"], paths["catalog"]).scan().plan_files()}
    args = ("compact", paths["cf"], "--in-place", "--target-rows", "1000")
    killed = cli(*args, fault="after_compaction_publish:1")  # a merged file published, in no snapshot
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    table = iceberg_table(paths["cf"], paths["catalog"])
    # the table holds the same files (on S3 the compaction took the lease over: a fence
    # snapshot that adds none)
    assert {t.file.file_path for t in table.scan().plan_files()} == before
    before = table.current_snapshot().snapshot_id
    assert_changefeed_equal(sorted_rows(table.scan().to_arrow()), model.rows)
    done = cli(*args)
    assert done.returncode == 0, done.describe()
    table = iceberg_table(paths["cf"], paths["catalog"])
    parent = table.snapshot_by_id(table.current_snapshot().parent_snapshot_id)
    if parent.snapshot_id != before:  # on S3 the compaction takes the lease over first: a fence, no file
        assert parent.summary["olr_buffer.fence"] is not None and parent.parent_snapshot_id == before
    assert_changefeed_equal(sorted_rows(table.scan().to_arrow()), model.rows)
    again = replay(paths, "--json")
    assert again.returncode == 0 and again.json()["transactions_published"] == 0, again.describe()
