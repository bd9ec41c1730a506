"""The changefeed on S3 (moto's server mode, started by the tests) and as a Delta Lake
table, end to end: real `replay` and `run` processes, SIGKILLed at the fault points
(inside each step, and between a file's PUT and its Delta commit), restarted; two
writers; an endpoint that stops answering and comes back; bad credentials, a missing
bucket, a prefix that holds something else. Every transaction ends up exactly once, as
the model says, read through deltalake and as the plain Parquet files on S3."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from olr_buffer.simulate import simulate
from olr_buffer.sinks.parquet.schema import parse_part_name
from olr_buffer.store import open_store
from tests.cli.conftest import Result, olr_buffer
from tests.contract_model import ModelResult, assert_changefeed_equal, expected_changefeed
from tests.live_writer import start_live_writer
from tests.s3_server import TcpProxy, start_moto

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 180
SMALL = ("--file-rows", "150", "--segment-size", "64KiB", "--checkpoint-interval", "0", "--block-records", "64")


# ---------------------------------------------------------------------------------------
# Helpers: the CLI in a process, and the changefeed read back from S3


def cli(*args: Any, fault: str | None = None, env: dict[str, str] | None = None) -> Result:
    return olr_buffer(*args, cwd=ROOT, fault=fault, env=env, timeout=TIMEOUT)


def one_line(result: Result, *parts: str) -> str:
    assert result.returncode == 1, result.describe()
    lines = result.stderr_lines
    assert len(lines) == 1 and lines[0].startswith("olr-buffer: error: "), result.describe()
    for part in parts:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert "Traceback" not in result.stderr
    return lines[0]


def _rows(table) -> list[dict[str, Any]]:
    rows = table.to_pylist()
    for row in rows:
        for column in ("before", "after"):
            if row.get(column) is not None:
                row[column] = json.loads(row[column])
    rows.sort(key=lambda r: (r["tx_seq"], r["op_seq"]))
    return rows


def part_names(uri: str) -> list[str]:
    return [o.name for o in open_store(uri).list("part-") if parse_part_name(o.name)]


def plain_rows(uri: str) -> list[dict[str, Any]]:
    """The plain Parquet files on S3, as ``spark.read.parquet`` would list them: checked
    to be a gapless chain of whole transactions, read with pyarrow."""
    store = open_store(uri)
    fs, root = store.arrow_filesystem()
    expected = 0
    rows: list[dict[str, Any]] = []
    for name in part_names(uri):
        first, last = parse_part_name(name)
        assert first == expected, f"{name}: expected a file from tx_seq {expected}"
        table = pq.read_table(f"{root}/{name}", filesystem=fs)
        got = _rows(table)
        assert got[0]["tx_seq"] == first and got[0]["op_seq"] == 0 and got[-1]["tx_seq"] == last, name
        rows.extend(got)
        expected = last + 1
    return rows


def delta_rows(uri: str) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    table_uri, options = open_store(uri).delta_location()
    return _rows(DeltaTable(table_uri, storage_options=options).to_pyarrow_table())


def delta_log(uri: str) -> list[dict]:
    """Every action of the table's log, in order."""
    store = open_store(uri)
    actions = []
    for obj in store.list("_delta_log/"):
        if obj.name.endswith(".json"):
            actions.extend(json.loads(line) for line in store.read(obj.name).splitlines() if line.strip())
    return actions


def assert_exact(uri: str, model: ModelResult, *, delta: bool = True) -> None:
    """Exactly the model's changefeed, as the plain files on S3 and, for a Delta
    changefeed, through deltalake; each file added by one commit, the queue's
    transaction at the last tx_seq."""
    assert_changefeed_equal(plain_rows(uri), model.rows)
    if not delta:
        return
    assert_changefeed_equal(delta_rows(uri), model.rows)
    actions = delta_log(uri)
    adds = [a["add"]["path"] for a in actions if "add" in a]
    assert sorted(adds) == sorted(set(adds)) == part_names(uri), "a file added twice, or one not added"
    # (the lease's txn, one per take-over, is the writers' generation: docs/failure-scenarios.md)
    versions = [a["txn"]["version"] for a in actions if "txn" in a and a["txn"]["appId"] != "olr-buffer.lease"]
    assert versions == sorted(versions) and versions[-1] == model.committed - 1, versions
    protocol = next(a["protocol"] for a in actions if "protocol" in a)
    assert (protocol["minReaderVersion"], protocol["minWriterVersion"]) == (1, 2)


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("s3-input") / "input"
    simulate(out, threads=2, transactions=260, seed=31, records_per_file=250)
    return out


@pytest.fixture(scope="module")
def staged_plain(tmp_path_factory) -> Path:
    """The workload for `run`, as tests.live_writer plays it (plain sequence files)."""
    out = tmp_path_factory.mktemp("s3-live-input") / "input"
    simulate(out, threads=2, transactions=260, seed=32, records_per_file=250, compress_archived=False)
    return out


@pytest.fixture(scope="module")
def model(staged: Path) -> ModelResult:
    return expected_changefeed(staged)


@pytest.fixture
def paths(staged: Path, tmp_path: Path, s3_uri: str) -> dict[str, Any]:
    return {"input": staged, "queue": tmp_path / "queue", "cf": s3_uri}


def replay(p: dict, *extra: Any, fault: str | None = None, env: dict[str, str] | None = None) -> Result:
    return cli(
        "replay",
        p["input"],
        "--queue",
        p["queue"],
        "--changefeed",
        p["cf"],
        "--no-progress",
        *SMALL,
        *extra,
        fault=fault,
        env=env,
    )


# ---------------------------------------------------------------------------------------
# replay: kills at every step, then exactly once


@pytest.mark.slow
@pytest.mark.parametrize(
    "faults",
    [
        ("after_rename:2", "before_delta_commit:2"),  # between the file's PUT and its commit; inside the commit
        ("after_delta_commit:2", "after_tmp_written:3"),  # committed, manifest not written; file complete, not PUT
        ("after_row_group:3", "before_checkpoint:2"),  # a file being written; published, checkpoint not written
    ],
    ids=["put-commit", "commit-manifest", "write-checkpoint"],
)
def test_replay_to_s3_delta_killed_at_each_step_is_exact(paths, model, faults):
    for i, fault in enumerate(faults):
        killed = replay(paths, "--table-format", "delta", fault=fault)
        assert killed.returncode == -signal.SIGKILL, (fault, killed.describe())
        if i == 0 and fault.startswith("after_rename"):
            # the window: a file on S3 that no Delta commit adds yet
            assert (
                len(part_names(paths["cf"]))
                == len({a["add"]["path"] for a in delta_log(paths["cf"]) if "add" in a}) + 1
            )
    done = replay(paths, "--json")  # no flag: the changefeed is a Delta changefeed, and goes on as one
    assert done.returncode == 0, done.describe()
    assert done.json()["next_tx_seq"] == model.committed
    assert_exact(paths["cf"], model)
    again = replay(paths, "--json")
    assert again.returncode == 0 and again.json()["transactions_published"] == 0
    assert_exact(paths["cf"], model)


def test_replay_to_s3_plain_parquet_is_exact_and_status_reads_it(paths, model):
    first = replay(paths, fault="after_rename:3")
    assert first.returncode == -signal.SIGKILL, first.describe()
    done = replay(paths)
    assert done.returncode == 0, done.describe()
    assert_exact(paths["cf"], model, delta=False)
    store = open_store(paths["cf"])
    assert not store.exists("_delta_log/00000000000000000000.json")
    manifest = json.loads(store.read("_olr_buffer/manifest.json"))
    assert manifest["next_tx_seq"] == model.committed and manifest["table_format"] == "parquet"
    status = cli("status", "--queue", paths["queue"], "--json")
    assert status.returncode == 0, status.describe()
    cf = status.json()["changefeed"]
    assert (cf["path"], cf["source"], cf["next_tx_seq"]) == (paths["cf"], "manifest", model.committed)
    # a later run asking for parquet on it goes on; asking for delta commits what is published, as it is
    assert replay(paths, "--table-format", "delta").returncode == 0
    assert_exact(paths["cf"], model)
    refused = replay(paths, "--table-format", "parquet")
    one_line(refused, "is a Delta changefeed", "--table-format parquet would publish files")


def test_compact_on_s3_delta_is_one_commit_that_deletes_nothing(paths, model):
    assert replay(paths, "--table-format", "delta").returncode == 0
    before = part_names(paths["cf"])
    versions = len([o for o in open_store(paths["cf"]).list("_delta_log/") if o.name.endswith(".json")])
    done = cli("compact", paths["cf"], "--in-place", "--target-rows", "100000", "--json")
    assert done.returncode == 0, done.describe()
    assert done.json()["files_after"] == 1
    after = part_names(paths["cf"])
    assert set(before) < set(after) and len(after) == len(before) + 1  # nothing deleted
    actions = delta_log(paths["cf"])
    logs = [o for o in open_store(paths["cf"]).list("_delta_log/") if o.name.endswith(".json")]
    assert len(logs) == versions + 2  # the lease's fence (a txn, no file: it takes the table over), one commit
    fence = [json.loads(line) for line in open_store(paths["cf"]).read(logs[-2].name).splitlines() if line.strip()]
    assert any(a.get("txn", {}).get("appId") == "olr-buffer.lease" for a in fence)
    assert not any("add" in a or "remove" in a for a in fence)
    removes = [a["remove"] for a in actions if "remove" in a]
    assert sorted(r["path"] for r in removes) == before and not any(r["dataChange"] for r in removes)
    assert_changefeed_equal(delta_rows(paths["cf"]), model.rows)
    # the writer goes on after it, from the table's files
    assert replay(paths).returncode == 0


# ---------------------------------------------------------------------------------------
# run: a service, killed and restarted; an endpoint that goes away and comes back


class Service:
    """``olr-buffer run`` in a process; its stderr collected line by line."""

    def __init__(self, *args: Any, env: dict[str, str] | None = None, fault: str | None = None) -> None:
        environ = {k: v for k, v in os.environ.items() if k != "OLR_BUFFER_FAULT"}
        environ.update(env or {})
        if fault:
            environ["OLR_BUFFER_FAULT"] = fault
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "olr_buffer.cli", "run", *map(os.fspath, args)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=environ,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, pattern: str, timeout: float = 60, since: int = 0) -> re.Match:
        """The first line from line ``since`` on that matches ``pattern``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines)[since:]:
                m = re.search(pattern, line)
                if m:
                    return m
            assert self.proc.poll() is None or self._reader.is_alive(), "\n".join(self.lines[-30:])
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s:\n" + "\n".join(self.lines[-30:]))

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        try:
            return self.wait_stopped(120)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()  # (not left running after the test)
                self.proc.wait()

    def wait_stopped(self, timeout: float) -> int:
        """The service's exit code, once it has ended (within ``timeout`` seconds) and its
        last lines are read."""
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"no stop within {timeout:g} s:\n" + "\n".join(self.lines[-30:])) from None
        self._reader.join(timeout=10)
        return code


def run_args(p: dict, live: Path, *extra: Any) -> list[Any]:
    return [
        live,
        "--queue",
        p["queue"],
        "--changefeed",
        p["cf"],
        "--flush-interval",
        "0.2",
        "--poll-interval",
        "0.02",
        "--checkpoint-interval",
        "0.5",
        "--file-rows",
        "150",
        "--segment-size",
        "64KiB",
        "--log-level",
        "info",
        *extra,
    ]


def live_input(staged: Path, live: Path, rate: float | None = None, allow_file: Path | None = None) -> subprocess.Popen:
    """The staged workload written into ``live`` as a capture process would (an ``lwn``
    on every thread at the end: everything can be published); ``allow_file``: how many
    records it may write so far (see ``tests.live_writer``)."""
    return start_live_writer(staged, live, rate or 1e9, seed=5, allow_file=allow_file)


def manifest_next(uri: str) -> int:
    try:
        return json.loads(open_store(uri).read("_olr_buffer/manifest.json"))["next_tx_seq"]
    except Exception:  # noqa: BLE001 - not there yet, or the store is down
        return -1


def wait_published(uri: str, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while manifest_next(uri) < n:
        assert time.monotonic() < deadline, f"the changefeed holds {manifest_next(uri)} transactions, not {n}"
        time.sleep(0.2)


def metric(port: int, name: str, absent: float | None = None) -> float:
    """A figure of the service's metrics; ``absent``: what a figure not there yet (before
    the first update) counts as (None: an error)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    m = re.search(rf"^olr_buffer_{name} ([0-9.e+-]+)$", text, re.M)
    if m is None and absent is not None:
        return absent
    assert m, f"no {name} in the metrics"
    return float(m.group(1))


@pytest.mark.slow
def test_run_to_s3_delta_killed_then_restarted_is_exact(paths, staged_plain, tmp_path):
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    model = expected_changefeed(live)
    for fault in ("after_rename:2", "before_delta_commit:3"):
        service = Service(*run_args(paths, live, "--table-format", "delta"), fault=fault)
        assert service.proc.wait(timeout=120) == -signal.SIGKILL, "\n".join(service.lines[-20:])
    service = Service(*run_args(paths, live))
    service.wait_line(r"committed \d+ published file\(s\) the Delta table lacked")
    wait_published(paths["cf"], model.committed)
    assert service.stop() == 0, "\n".join(service.lines[-20:])
    assert_exact(paths["cf"], model)


def test_a_second_writer_of_a_changefeed_on_s3_is_refused(paths, staged, staged_plain, tmp_path):
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    service = Service(*run_args(paths, live, "--table-format", "delta"))
    try:
        wait_published(paths["cf"], 1)
        other = cli("replay", staged, "--queue", tmp_path / "other-queue", "--changefeed", paths["cf"])
        one_line(
            other,
            f"{paths['cf']}/_olr_buffer/lease.json: changefeed is written by writer ",
            f"(pid {service.proc.pid}), whose lease runs until ",
        )
        assert not (tmp_path / "other-queue").exists()  # the refused run leaves nothing behind
    finally:
        assert service.stop() == 0, "\n".join(service.lines[-20:])


@pytest.fixture
def proxy(s3_env):
    p = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    yield p
    p.down()


@pytest.mark.slow
def test_run_rides_out_an_unreachable_store_and_says_so(paths, staged_plain, tmp_path, proxy):
    live = tmp_path / "live"
    env = {"AWS_ENDPOINT_URL": proxy.endpoint}
    writer = live_input(staged_plain, live, rate=1500)
    service = Service(
        *run_args(paths, live, "--table-format", "delta", "--metrics-port", "0", "--threads", "1,2"), env=env
    )
    try:
        port = int(service.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        wait_published(paths["cf"], 1)
        proxy.down()
        # the outage is logged once, by whichever call meets it first: a PUT (boto3: "connection
        # refused") or a Delta commit (delta-rs: "error sending request")
        service.wait_line(r"the changefeed's store cannot be reached .*did not answer")
        deadline = time.monotonic() + 60
        while metric(port, "store_outage_seconds") <= 0:
            assert time.monotonic() < deadline, "the outage gauge stays 0"
            time.sleep(0.2)
        assert metric(port, "store_outages_total") >= 1
        time.sleep(2)
        proxy.up()
        service.wait_line(r"the changefeed's store answers again after", timeout=90)
        assert writer.wait(timeout=120) == 0
        model = expected_changefeed(live)
        wait_published(paths["cf"], model.committed)
        assert metric(port, "store_outage_seconds") == 0 and metric(port, "store_retries_total") >= 1
    finally:
        if writer.poll() is None:
            writer.kill()
        assert service.stop() == 0, "\n".join(service.lines[-30:])
    assert_exact(paths["cf"], model)


def health(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_health(port: int, status: int, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        code, doc = health(port)
        if code == status:
            return doc
        assert time.monotonic() < deadline, f"/health stays {code} {doc}"
        time.sleep(0.1)


def split_staged(staged: Path, out: Path) -> tuple[Path, Path]:
    """``staged``'s records in two workloads for tests.live_writer, played one after the
    other into one live directory: those below the middle SCN, then the others (the
    first ends with an ``lwn`` at its highest SCN on every thread: all of it can be
    published before the second starts)."""
    files = {f.name: f.read_bytes().splitlines(keepends=True) for f in staged.glob("redo_*.jsonl")}
    scns = sorted(json.loads(line)["scn"] for lines in files.values() for line in lines)
    middle = scns[len(scns) // 2]
    halves = (out / "first", out / "second")
    for half in halves:
        half.mkdir(parents=True)
    for name, lines in files.items():
        for line in lines:  # (in the file's order)
            with open(halves[json.loads(line)["scn"] >= middle] / name, "ab") as fh:
                fh.write(line)
    return halves


@pytest.mark.slow
def test_run_reports_a_store_that_does_not_answer(paths, staged_plain, tmp_path, proxy):
    """The endpoint stops answering (connections accepted, nothing comes back; not
    refused) while the service has nothing to publish: the lease's renewal that waits is
    an outage once --store-timeout has passed, logged and counted, /health still 200 (the
    loop turns). Then there is work: the loop blocks in a call that waits, and /health
    turns 503 once it has not turned for --health-timeout; when the endpoint answers
    again, the service says so, /health is 200 again, and every transaction is there once.
    (The input comes in two parts, the second after the hang: whatever the machine's load,
    the service is idle at the hang and has work after it.)"""
    live = tmp_path / "live"
    first, second = split_staged(staged_plain, tmp_path / "halves")
    assert live_input(first, live).wait(timeout=120) == 0
    published_first = expected_changefeed(live).committed
    # a store timeout of 3 s: on a loaded machine an answered call of moto's may take over a
    # second, which is an outage too (said and counted), before the endpoint hangs
    service = Service(
        *run_args(
            paths,
            live,
            "--table-format",
            "delta",
            "--metrics-port",
            "0",
            "--threads",
            "1,2",
            "--store-timeout",
            "3",
            "--health-timeout",
            "5",
            "--lease-renew-interval",
            "1",
        ),
        env={"AWS_ENDPOINT_URL": proxy.endpoint},
    )
    writer = None
    try:
        port = int(service.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        wait_published(paths["cf"], published_first)
        seen = len(service.lines)
        outages = metric(port, "store_outages_total")
        deadline = time.monotonic() + 60  # (a slow answer before is an outage too, over once answered)
        while metric(port, "store_outage_seconds") > 0:
            assert time.monotonic() < deadline, "the store answers, and the outage gauge stays above 0"
            time.sleep(0.2)
        proxy.hang()
        service.wait_line(
            r"the changefeed's store cannot be reached \(no answer to renew the changefeed's lease for [\d.]+ s\); "
            "retrying to ",
            since=seen,
        )
        assert metric(port, "store_outages_total") >= outages + 1  # while the renewal still waits
        assert metric(port, "store_outage_seconds") > 0
        code, idle = health(port)
        assert code == 200 and idle["store_outage_seconds"] > 0, idle  # nothing to do: the loop turns
        writer = live_input(second, live)
        stalled = wait_health(port, 503)
        assert stalled["status"] == "stalled" and stalled["store_outage_seconds"] > 0
        proxy.resume()
        service.wait_line(r"the changefeed's store answers again after", timeout=120, since=seen)
        assert writer.wait(timeout=120) == 0
        model = expected_changefeed(live)
        assert model.committed > published_first
        wait_published(paths["cf"], model.committed)
        assert wait_health(port, 200)["status"] == "ok"
        assert metric(port, "store_outage_seconds") == 0
    finally:
        if writer is not None and writer.poll() is None:
            writer.kill()
        if proxy.hung:  # (a failure above: the service stops against a store that answers)
            proxy.resume()
        assert service.stop() == 0, "\n".join(service.lines[-30:])
    assert_exact(paths["cf"], model)


@pytest.mark.parametrize("outage", ["hung", "down"])
def test_sigterm_stops_run_promptly_against_a_store_that_does_not_answer(paths, staged_plain, tmp_path, proxy, outage):
    """SIGTERM while the store does not answer (``hung``: connections accepted, nothing
    comes back; ``down``: refused) and transactions wait in the sink to be published: the
    service gives the store --store-timeout seconds, not boto3's time-outs, then stops: one
    line says what it left undone (the transactions, the lease), exit 0. With the store back, the next run
    publishes every transaction, each once (the queue kept them, the manifest says what
    was published). The bound of 60 s leaves a loaded machine room: a stop that waits out
    the store's time-outs takes minutes."""
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    model = expected_changefeed(live)
    env = {"AWS_ENDPOINT_URL": proxy.endpoint}
    # nothing published before the stop: every transaction handed over waits in the sink
    holding = ("--flush-interval", "3600", "--checkpoint-interval", "3600", "--file-rows", "1000000")
    service = Service(
        *run_args(paths, live, "--metrics-port", "0", "--store-timeout", "2", "--lease-renew-interval", "1", *holding),
        env=env,
    )
    went_down = False
    try:
        port = int(service.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        deadline = time.monotonic() + 120
        while metric(port, "changefeed_next_tx_seq", absent=-1) < model.committed:
            assert time.monotonic() < deadline, "the service does not hand every transaction over"
            time.sleep(0.2)
        assert manifest_next(paths["cf"]) <= 0  # (nothing published yet)
        proxy.hang() if outage == "hung" else proxy.down()
        went_down = outage == "down"
        seen = len(service.lines)
        service.proc.send_signal(signal.SIGTERM)
        code = service.wait_stopped(60)
    finally:
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait()
        proxy.resume()
        if went_down:
            proxy.up()
    lines = "\n".join(service.lines[-30:])
    assert code == 0, lines
    left = [line for line in service.lines[seen:] if "stopping without publishing" in line]
    assert len(left) == 1, lines
    why = r"does not answer \(no answer to .* for [\d.]+ s\)" if outage == "hung" else r"cannot be reached \(.*\)"
    assert re.search(
        rf"WARNING.* stopping without publishing {model.committed} transaction\(s\): the changefeed's store "
        rf"{why}; they are in the queue and are published at the next "
        r"start; the changefeed's lease is not released: another writer takes over once it expires \(15 s \+ 5 s after "
        r"its last renewal\)$",
        left[0],
    ), left[0]
    assert not any("Traceback" in line or "ERROR" in line for line in service.lines), lines
    assert any(f"stopped ({model.committed} transaction(s) left in the queue): " in line for line in service.lines)
    # the store answers again: the next run publishes everything, once
    again = Service(*run_args(paths, live), env=env)
    try:
        wait_published(paths["cf"], model.committed)
    finally:
        assert again.stop() == 0, "\n".join(again.lines[-30:])
    assert_exact(paths["cf"], model, delta=False)


def test_a_second_signal_stops_run_at_once_against_a_store_that_does_not_answer(paths, staged_plain, tmp_path, proxy):
    """Stopping against a store that does not answer, with a --store-timeout of 600 s: a
    second signal (SIGINT after SIGTERM) gives the call under way up at once; the same
    one line says what is left undone, exit 0."""
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    model = expected_changefeed(live)
    holding = ("--flush-interval", "3600", "--checkpoint-interval", "3600", "--file-rows", "1000000")
    service = Service(
        *run_args(paths, live, "--metrics-port", "0", "--store-timeout", "600", *holding),
        env={"AWS_ENDPOINT_URL": proxy.endpoint},
    )
    try:
        port = int(service.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        deadline = time.monotonic() + 120
        while metric(port, "changefeed_next_tx_seq", absent=-1) < model.committed:
            assert time.monotonic() < deadline, "the service does not hand every transaction over"
            time.sleep(0.2)
        proxy.hang()
        seen = len(service.lines)
        service.proc.send_signal(signal.SIGTERM)
        service.wait_line(r"stopping: readers finish their block", since=seen)
        assert service.proc.poll() is None  # (the stop waits for the store: 600 s)
        service.proc.send_signal(signal.SIGINT)
        code = service.wait_stopped(60)  # (after the second signal)
    finally:
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait()
        proxy.resume()
    lines = "\n".join(service.lines[-30:])
    assert code == 0, lines
    assert any(re.search(r"WARNING .*received SIGINT again, stopping at once$", line) for line in service.lines), lines
    left = [line for line in service.lines[seen:] if "stopping without publishing" in line]
    assert len(left) == 1 and f"stopping without publishing {model.committed} transaction(s)" in left[0], lines


def test_replay_fails_with_one_line_when_the_store_is_unreachable_then_resumes(paths, model, proxy):
    env = {"AWS_ENDPOINT_URL": proxy.endpoint}
    killed = replay(paths, "--table-format", "delta", fault="after_rename:2", env=env)
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    proxy.down()
    failed = replay(paths, env=env)
    line = one_line(failed, paths["cf"], "did not answer (connection refused)", "replay resumes when run again")
    assert "testing-secret-key" not in line
    proxy.up()
    done = replay(paths, env=env)
    assert done.returncode == 0, done.describe()
    assert_exact(paths["cf"], model)


# ---------------------------------------------------------------------------------------
# what the operator must fix: one line, exit 1


def test_a_missing_bucket_is_one_line(paths, tmp_path):
    paths = {**paths, "cf": "s3://no-such-bucket-olr/cf"}
    failed = replay(paths)
    one_line(
        failed,
        "s3://no-such-bucket-olr/cf",
        "bucket no-such-bucket-olr does not exist at http://127.0.0.1:",
        "(hint: create the bucket",
    )
    assert not paths["queue"].exists()


def test_bad_credentials_are_one_line(paths, s3_auth_server):
    failed = replay({**paths, "cf": "s3://some-bucket/cf"}, env={"AWS_ENDPOINT_URL": s3_auth_server.endpoint})
    line = one_line(
        failed,
        "s3://some-bucket/cf",
        "access denied by http://127.0.0.1:",
        "InvalidAccessKeyId",
        "(hint: check AWS_ACCESS_KEY_ID",
    )
    assert "testing-secret-key" not in line
    assert not paths["queue"].exists()


def test_a_prefix_that_holds_something_else_is_one_line(paths, s3_env):
    store = open_store(paths["cf"])
    store.create("notes/readme.txt", b"not a changefeed")
    one_line(
        replay(paths),
        f"{paths['cf']}/notes: not a file of this changefeed",
        "(hint: move it out of the changefeed's prefix)",
    )
    store.delete("notes/readme.txt")
    store.create("report.csv", b"a,b\n")
    one_line(replay(paths), f"{paths['cf']}/report.csv: not a file of this changefeed")
    # nothing of olr-buffer's is left there (its lease, taken to look, is gone again)
    assert [o.name for o in store.list(recursive=True)] == ["report.csv"]
    assert not paths["queue"].exists()


def test_a_store_that_ignores_conditional_writes_is_refused(paths, s3_env):
    """A store that drops If-None-Match (here: a proxy renames the header on the wire)
    would let a file be overwritten: refused at start, before anything is written."""
    port = int(s3_env.endpoint.rsplit(":", 1)[1])
    proxy = TcpProxy(port, rewrite=lambda data: data.replace(b"If-None-Match: *", b"X-Not-Matched: *"))
    try:
        failed = replay(paths, env={"AWS_ENDPOINT_URL": proxy.endpoint})
    finally:
        proxy.down()
    one_line(failed, "ignores conditional writes (If-None-Match): it would let a file be overwritten")
    assert part_names(paths["cf"]) == [] and not paths["queue"].exists()


def test_compact_a_local_changefeed_into_one_on_s3(staged, model, tmp_path, s3_uri):
    """--output s3://...: the compacted copy goes up file by file (one PUT each), a
    changefeed of its own, exactly the source's rows; run again, nothing to do."""
    local = tmp_path / "cf"
    done = cli("replay", staged, "--queue", tmp_path / "q", "--changefeed", local, "--no-progress", *SMALL)
    assert done.returncode == 0, done.describe()
    out = cli("compact", local, "--output", s3_uri, "--target-rows", "1000", "--json")
    assert out.returncode == 0, out.describe()
    assert out.json()["next_tx_seq"] == model.committed and 1 < out.json()["files_after"] < len(
        list(local.glob("part-*.parquet"))
    )
    assert_exact(s3_uri, model, delta=False)
    again = cli("compact", local, "--output", s3_uri, "--target-rows", "1000", "--json")
    assert again.returncode == 0 and again.json()["files_written"] == 0


def test_a_changefeed_on_s3_stays_bound_to_its_queue(paths, model, tmp_path):
    """The owner check and the queue's record of the changefeed hold on S3: another
    queue is refused; files removed behind the queue's back are refused, whatever the
    flags (of a Delta changefeed: a file its table holds is missing)."""
    assert replay(paths).returncode == 0
    other = replay({**paths, "queue": tmp_path / "other-queue"})
    one_line(other, f"{paths['cf']}: changefeed was written by queue ", "is queue ")
    assert not (tmp_path / "other-queue").exists()
    store = open_store(paths["cf"])
    newest = part_names(paths["cf"])[-1]
    data = store.read(newest)
    store.delete(newest)
    one_line(
        replay(paths),
        f"{paths['cf']}: published files are missing: the manifest records tx_seq 0..{model.committed - 1}",
    )
    one_line(replay(paths, "--adopt-changefeed"), "published files are missing")
    store.create(newest, data)
    assert replay(paths, "--table-format", "delta").returncode == 0
    store.delete(newest)
    one_line(replay(paths), f"{paths['cf']}/{newest}: a file of the Delta table is missing")
    store.create(newest, data)
    assert replay(paths).returncode == 0
    assert_exact(paths["cf"], model)


def test_a_file_whose_put_went_in_unanswered_is_published_once(s3_uri, s3_env, monkeypatch):
    """The store takes a file's PUT and the answer is lost (the proxy closes the
    connection instead; one try per request: AWS_MAX_ATTEMPTS=1): the writer tries the
    publication again after the outage, and the object there is its own, not another
    writer's. The changefeed holds each transaction once."""
    from olr_buffer.changes import INSERT, CommitKey
    from olr_buffer.sinks.parquet import ChangefeedWriter
    from olr_buffer.store import OutageRetry

    lost: list[bytes] = []

    def lose(data: bytes) -> bool:
        line = data.split(b"\r\n", 1)[0]
        if not lost and line.startswith(b"PUT ") and b"/part-" in line:
            lost.append(line)
            return True
        return False

    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]), lose_reply=lose)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    try:
        writer = ChangefeedWriter(s3_uri, file_rows=4, durable=False, retry=OutageRetry(first=0.05))
        for k in range(4):
            rows = [
                [
                    INSERT,
                    100 + 10 * k + i,
                    0,
                    1,
                    100 + 10 * k + i,
                    None,
                    "O",
                    "T",
                    None,
                    f"R{k}{i}",
                    None,
                    '{"A":1}',
                    None,
                ]
                for i in range(2)
            ]
            writer.write_rows(rows, [(f"X{k}", CommitKey(109 + 10 * k, 1, 1, 109 + 10 * k), None, 1, 2)])
        writer.close()
    finally:
        proxy.down()
        monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
        monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    assert lost and writer.retry.outages == 1
    assert part_names(s3_uri) == [
        "part-00000000000000000000-00000000000000000001.parquet",
        "part-00000000000000000002-00000000000000000003.parquet",
    ]
    assert [r["tx_seq"] for r in plain_rows(s3_uri)] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_run_takes_over_at_once_the_lease_of_a_killed_compact(paths, staged_plain, tmp_path):
    """``compact`` killed while it holds the changefeed's lease (a merged file published, not yet committed):
    the queue's ``run`` takes the lease on its first try (the compaction's process is
    gone), not after the lease's 60 s, and publishes on; the compaction, run again,
    finishes. Every transaction once."""
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    model = expected_changefeed(live)
    service = Service(*run_args(paths, live, "--table-format", "delta"))
    wait_published(paths["cf"], model.committed)
    assert service.stop() == 0, "\n".join(service.lines[-20:])
    killed = cli("compact", paths["cf"], "--in-place", "--target-rows", "100000", fault="after_compaction_publish")
    assert killed.returncode == -signal.SIGKILL, killed.describe()
    lease = json.loads(open_store(paths["cf"]).read("_olr_buffer/lease.json"))
    assert lease["compaction"] and not lease["released"] and lease["expires"] > time.time() + 30
    service = Service(*run_args(paths, live))
    try:
        taken = service.wait_line(r"lease taken over from writer (\w+) on \S+ \(pid (\d+), ")
        assert taken.groups() == (lease["writer"], str(lease["pid"]))
        assert any(
            f"taking over the lease of pid {lease['pid']} on this host, which is gone" in line for line in service.lines
        )
        assert (
            json.loads(open_store(paths["cf"]).read("_olr_buffer/lease.json"))["generation"] == lease["generation"] + 1
        )  # taken once, at the first try
    finally:
        assert service.stop() == 0, "\n".join(service.lines[-20:])
    done = cli("compact", paths["cf"], "--in-place", "--target-rows", "100000")
    assert done.returncode == 0, done.describe()
    assert_changefeed_equal(delta_rows(paths["cf"]), model.rows)


# ---------------------------------------------------------------------------------------
# run: stopped while it starts, its store hung


@pytest.fixture
def hung_store(s3_env, tmp_path, monkeypatch):
    """A moto server of the test's own, with a bucket, then SIGSTOPped: connections are
    accepted (by the kernel), nothing is answered. The process environment points at it;
    it is let go on (SIGCONT) with :func:`answer_again` or at teardown, then stopped."""
    (tmp_path / "moto").mkdir()
    server = start_moto(tmp_path / "moto")
    uri = f"s3://{server.new_bucket()}/changefeed"
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        yield server, uri
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        server.stop()


def connected_to(port: int) -> bool:
    """Whether a TCP connection to 127.0.0.1:``port`` is established (/proc/net/tcp): the
    server's own, SIGSTOPped, accepts none; a client's handshake is done by the kernel."""
    with open("/proc/net/tcp") as fh:
        rows = [line.split() for line in fh.readlines()[1:]]
    return any(r[2] == f"0100007F:{port:04X}" and r[3] == "01" for r in rows)


@pytest.mark.parametrize(
    "second, standby",
    [(None, False), (signal.SIGINT, False), (None, True)],
    ids=["one-signal", "second-signal", "standby"],
)
def test_a_stop_while_run_starts_against_a_hung_store_is_clean(hung_store, staged_plain, tmp_path, second, standby):
    """SIGTERM while ``run`` opens a changefeed whose store does not answer (its S3
    server SIGSTOPped), or while ``run --standby`` looks at its lease: one line says it
    stopped during start-up (a standby: while standing by, not knowing who writes the
    changefeed) and that the store did not answer, exit 0 (a stop by
    signal), no traceback, no error. One signal: after --store-timeout (2 s), not after
    the client's own time-outs (minutes), and the call that waits is said as an outage
    first, within --store-timeout (the standby's look too, naming the changefeed whose
    lease it waits for); a second one (--store-timeout 600 s): at once.
    Nothing is lost: with the store back, the next run publishes every transaction, once."""
    server, uri = hung_store
    live = tmp_path / "live"
    assert live_input(staged_plain, live).wait(timeout=120) == 0
    model = expected_changefeed(live)
    paths = {"queue": tmp_path / "queue", "cf": uri}
    flags = ("--standby",) if standby else ()
    timeout = "2" if second is None else "600"
    # what waits: said by the watchdog within --store-timeout, with the store it waits for
    what = re.escape(f"look at the changefeed's lease at {uri}") if standby else "look at the changefeed"
    service = Service(*run_args(paths, live, "--store-timeout", timeout, *flags))
    try:
        if second is None:  # the watchdog: the call that opens the changefeed (looks at its lease) has waited 2 s
            service.wait_line(
                rf"WARNING .*the changefeed's store cannot be reached \(no answer to {what} for [\d.]+ s\)"
            )
        else:  # (the signal handlers are in place before the store is called)
            port = int(server.endpoint.rsplit(":", 1)[1])
            deadline = time.monotonic() + 120
            while not connected_to(port):
                assert service.proc.poll() is None, "\n".join(service.lines[-30:])
                assert time.monotonic() < deadline, "run never called the store:\n" + "\n".join(service.lines[-30:])
                time.sleep(0.05)
        service.proc.send_signal(signal.SIGTERM)
        if second is not None:
            service.wait_line(r"received SIGTERM, stopping")
            assert service.proc.poll() is None  # (the stop waits for the store: 600 s)
            service.proc.send_signal(second)
        code = service.wait_stopped(60)
    finally:
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait()
    lines = "\n".join(service.lines)
    assert code == 0, lines
    said = [line for line in service.lines if re.search(r"olr_buffer: stopped", line)]
    assert len(said) == 1, lines
    if standby:  # (a standby's closing line: it never saw who writes the changefeed)
        closing = (
            r"WARNING olr_buffer: stopped cleanly while standing by: this standby read and published nothing; who "
            rf"writes the changefeed {re.escape(uri)} is not known: its store does not answer \(no answer to {what} "
            r"for [\d.]+ s\)$"
        )
    else:
        closing = (
            r"WARNING olr_buffer: stopped during start-up, before the changefeed was opened: its store does not "
            rf"answer \(no answer to {what} for [\d.]+ s\); nothing was published or lost, the next start begins "
            r"where this one would have$"
        )
    assert re.search(closing, said[0]), said[0]
    assert not any("Traceback" in line or "ERROR" in line or "error:" in line for line in service.lines), lines
    if second is not None:
        assert any(re.search(r"WARNING .*received SIGINT again, stopping at once$", line) for line in service.lines)
    # the store answers again: the next run publishes everything, once
    os.kill(server.process.pid, signal.SIGCONT)
    again = Service(*run_args(paths, live, *flags))
    try:
        wait_published(uri, model.committed)
    finally:
        assert again.stop() == 0, "\n".join(again.lines[-30:])
    assert_exact(uri, model, delta=False)
