"""``run --standby`` end to end: two services, each with its own queue, on one changefeed
on S3 (moto's server), fed by redo files being written (tests.live_writer). The active one
is SIGKILLed, SIGSTOPped past its lease, restarted; the other takes over, and back. The
changefeed is always one replay of the whole input: every committed transaction exactly
once, in order (plain Parquet and Delta)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from olr_buffer.simulate import simulate
from olr_buffer.store import open_store
from tests.contract_model import expected_changefeed
from tests.s3_server import TcpProxy, start_moto
from tests.test_changefeed_s3 import Service, assert_exact, cli, live_input, manifest_next, metric, wait_published

pytestmark = pytest.mark.e2e

#: A short lease, so that a take-over of a hung service takes a few seconds.
LEASE = ("--lease-seconds", "2", "--lease-renew-interval", "0.5", "--lease-clock-skew", "0.5")
TAKEN_OVER = r"standby: took over the changefeed .*: active now, lease generation (\d+)"
STEP = 400  # records the input writer may write at a time in the take-over turns
WAITING = r"standby: the changefeed .* is written by writer (\w+) on \S+ \(pid (\d+)"


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> Path:
    """The workload, as tests.live_writer plays it (plain sequence files)."""
    out = tmp_path_factory.mktemp("standby-input") / "input"
    simulate(out, threads=2, transactions=300, seed=42, records_per_file=250, compress_archived=False)
    return out


def standby(live: Path | str, queue: Path, cf: str, *extra: Any, fault: str | None = None) -> Service:
    """``run --standby`` of ``live`` (a directory, a URI) with the queue ``queue`` on the
    changefeed ``cf``, a short lease, small files; ``fault``: ``OLR_BUFFER_FAULT``."""
    return Service(
        live,
        "--queue",
        queue,
        "--changefeed",
        cf,
        "--standby",
        *LEASE,
        "--standby-poll-interval",
        "0.1",
        "--flush-interval",
        "0.2",
        "--poll-interval",
        "0.02",
        "--checkpoint-interval",
        "0.5",
        "--file-rows",
        "40",
        "--segment-size",
        "64KiB",
        "--log-level",
        "info",
        *extra,
        fault=fault,
    )


def status(queue: Path) -> dict:
    result = cli("status", "--queue", queue, "--json")
    assert result.returncode == 0, result.describe()
    return json.loads(result.stdout)


def lease(cf: str) -> dict:
    from olr_buffer.store import open_store

    return json.loads(open_store(cf).read("_olr_buffer/lease.json"))


def wait_more(cf: str, than: int, timeout: float = 120) -> int:
    """Wait until the changefeed holds more than ``than`` transactions."""
    deadline = time.monotonic() + timeout
    while (n := manifest_next(cf)) <= than:
        assert time.monotonic() < deadline, f"the changefeed holds {n} transactions, not more than {than}"
        time.sleep(0.05)
    return n


def let_write(allow: Path, cf: str, allowed: int) -> int:
    """Let the input writer write ``STEP`` records more and wait until the active service
    publishes more; the records it may now write."""
    published = manifest_next(cf)
    allowed += STEP
    allow.write_text(str(allowed))
    wait_more(cf, published)
    return allowed


def finish(writer: subprocess.Popen | None, live: Path, cf: str, *services: Service) -> None:
    """The input written to its end, everything published, the services stopped."""
    assert writer is not None and writer.wait(timeout=180) == 0
    model = expected_changefeed(live)
    wait_published(cf, model.committed, timeout=180)
    for s in services:
        if s.proc.poll() is None:
            assert s.stop() == 0, "\n".join(s.lines[-30:])


@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_a_standby_takes_over_a_killed_service_and_the_restarted_one_stands_by(staged, tmp_path, s3_uri, table_format):
    live = tmp_path / "live"
    live.mkdir()
    cf = s3_uri
    # the input is written once the roles are set (and looked at)
    a = standby(live, tmp_path / "qa", cf, "--table-format", table_format, "--threads", "1,2")
    b = writer = None
    try:
        a.wait_line("standby: nobody writes the changefeed .*: starting at once")
        a.wait_line(r"standby: writes the changefeed .*: active now, lease generation 1")
        b = standby(live, tmp_path / "qb", cf, "--threads", "1,2")
        m = b.wait_line(WAITING)
        assert int(m.group(2)) == a.proc.pid
        assert lease(cf)["ttl"] == 2  # --lease-seconds
        # status shows the roles: who waits for whom, until when
        doc = status(tmp_path / "qb")
        assert doc["state"] == "running" and doc["role"]["role"] == "standby", doc
        assert doc["role"]["holder"]["pid"] == a.proc.pid and doc["role"]["lease_ends"], doc
        text = cli("status", "--queue", tmp_path / "qb").stdout
        assert re.search(
            rf"role: standby since \S+: the changefeed is written by writer \w+ on \S+ \(pid {a.proc.pid}", text
        ), text
        assert "whose lease runs until" in text, text
        assert status(tmp_path / "qa")["role"]["role"] == "active"

        writer = live_input(staged, live, rate=500)
        wait_more(cf, 0)
        a.stop(signal.SIGKILL)
        m = b.wait_line(TAKEN_OVER, timeout=120)
        assert int(m.group(1)) == 2
        published = manifest_next(cf)
        assert writer.poll() is None, "the input was written to its end before the take-over"
        wait_more(cf, published)
        # the killed one, restarted on its queue, stands by: it never takes the lease back
        a = standby(live, tmp_path / "qa", cf, "--threads", "1,2")
        m = a.wait_line(WAITING)
        assert int(m.group(2)) == b.proc.pid
        assert status(tmp_path / "qa")["role"]["role"] == "standby"
        finish(writer, live, cf, a, b)  # (the standby first: a clean stop hands the lease over)
        assert lease(cf)["generation"] == 2
        assert not [line for line in a.lines if "took over" in line]
    finally:
        if writer is not None:
            writer.kill()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)
    assert_exact(cf, expected_changefeed(live), delta=table_format == "delta")


def test_a_standby_without_a_holder_starts_at_once_and_shows_it_in_metrics(staged, tmp_path, s3_uri):
    import urllib.request

    live = tmp_path / "live"
    assert live_input(staged, live).wait(timeout=120) == 0
    a = standby(live, tmp_path / "qa", s3_uri, "--metrics-port", "0")
    b = None
    try:
        port = int(a.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        a.wait_line("active now, lease generation 1")
        b = standby(live, tmp_path / "qb", s3_uri, "--metrics-port", "0")
        port_b = int(b.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        b.wait_line(WAITING)

        def metrics(port: int, pattern: str) -> str:
            deadline = time.monotonic() + 60
            while True:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
                if re.search(pattern, text, re.M):
                    return text
                assert time.monotonic() < deadline, text
                time.sleep(0.1)

        text = metrics(port_b, r"^olr_buffer_standby 1\.0$")
        assert re.search(rf'^olr_buffer_role_info\{{.*holder_pid="{a.proc.pid}".*role="standby"', text, re.M), text
        ends = float(re.search(r"^olr_buffer_lease_ends_timestamp_seconds (\S+)$", text, re.M).group(1))
        assert ends > time.time() - 60
        assert re.search(r"^olr_buffer_lease_generation 1\.0$", text, re.M), text
        text = metrics(port, r"^olr_buffer_standby 0\.0$")
        assert re.search(r'^olr_buffer_role_info\{.*role="active"', text, re.M), text
        assert re.search(r"^olr_buffer_lease_generation 1\.0$", text, re.M), text
        health = urllib.request.urlopen(f"http://127.0.0.1:{port_b}/health", timeout=5)
        assert health.status == 200
        # a clean stop releases the lease: the standby takes over at once
        assert a.stop() == 0, "\n".join(a.lines[-30:])
        b.wait_line(TAKEN_OVER)
        text = metrics(port_b, r"^olr_buffer_standby 0\.0$")
        assert re.search(r"^olr_buffer_takeovers_total 1\.0$", text, re.M), text
        wait_published(s3_uri, expected_changefeed(live).committed)
        assert b.stop() == 0
    finally:
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)
    assert_exact(s3_uri, expected_changefeed(live), delta=False)


def test_a_standby_stopped_while_it_waits_leaves_no_queue_and_says_who_writes(staged, tmp_path, s3_uri):
    """A standby stopped while it waits: exit 0, its new queue removed, and one closing
    line that is true: it read and published nothing, and who writes the changefeed
    (which holds every transaction, published by the active one), not that nothing was
    published."""
    live = tmp_path / "live"
    assert live_input(staged, live).wait(timeout=120) == 0
    a = standby(live, tmp_path / "qa", s3_uri)
    try:
        a.wait_line("active now")
        wait_published(s3_uri, expected_changefeed(live).committed)
        b = standby(live, tmp_path / "qb", s3_uri)
        b.wait_line(WAITING)
        assert b.stop() == 0, "\n".join(b.lines[-30:])
        closing = [line for line in b.lines if re.search(r"olr_buffer: stopped", line)]
        assert len(closing) == 1, b.lines
        assert re.search(
            r" INFO olr_buffer: stopped cleanly while standing by: this standby read and published nothing; "
            rf"the changefeed {re.escape(s3_uri)} is written by writer \w+ on \S+ "
            rf"\(pid {a.proc.pid}, lease generation 1\)$",
            closing[0],
        ), closing[0]
        assert not [line for line in b.lines if "nothing published yet" in line], b.lines
        assert not (tmp_path / "qb").exists()
    finally:
        assert a.stop() == 0


def test_a_standby_whose_store_stops_answering_says_so_and_stops_cleanly(staged, tmp_path, s3_env, monkeypatch):
    """The changefeed's store stops answering (its own moto server SIGSTOPped: connections
    accepted, nothing answered) while a standby waits: within --store-timeout (2 s), not
    after boto3's own time-outs (about 90 s), a WARNING says that the store does not
    answer, which changefeed's lease it waits for and how often it looks, and its metrics
    show the outage; a SIGTERM then
    stops it with one line, exit 0, no error: a standby's closing line (not one of a
    start-up), with the writer it last saw and the look it gave up."""
    (tmp_path / "moto").mkdir()
    server = start_moto(tmp_path / "moto")
    cf = f"s3://{server.new_bucket()}/changefeed"
    monkeypatch.setenv("AWS_ENDPOINT_URL", server.endpoint)
    live = tmp_path / "live"
    assert live_input(staged, live).wait(timeout=120) == 0
    a = b = None
    try:
        a = standby(live, tmp_path / "qa", cf)
        a.wait_line("active now")
        b = standby(live, tmp_path / "qb", cf, "--store-timeout", "2", "--metrics-port", "0")
        port = int(b.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        seen = len(b.lines)
        b.wait_line(WAITING)
        assert metric(port, "store_outages_total") == 0 and metric(port, "standby") == 1
        os.kill(server.process.pid, signal.SIGSTOP)
        b.wait_line(
            r" WARNING olr_buffer\.store\.retry: the changefeed's store cannot be reached \(no answer to look at the "
            rf"changefeed's lease at {re.escape(cf)} for [\d.]+ s\); retrying to look at the changefeed's lease at "
            rf"{re.escape(cf)}, every 0\.1 s$",
            since=seen,
        )
        # the standby's metrics show the outage while its look waits
        assert metric(port, "store_outages_total") == 1 and metric(port, "store_outage_seconds") > 0
        assert metric(port, "standby") == 1
        b.proc.send_signal(signal.SIGTERM)
        code = b.wait_stopped(60)
        lines = "\n".join(b.lines)
        assert code == 0, lines
        closing = [line for line in b.lines if re.search(r"olr_buffer: stopped", line)]
        assert len(closing) == 1, lines
        assert re.search(
            r" WARNING olr_buffer: stopped cleanly while standing by: this standby read and published nothing; the "
            rf"changefeed {re.escape(cf)} is written by writer \w+ on \S+ \(pid {a.proc.pid}, lease generation 1\) "
            r"as last seen; its store does not answer \(no answer to look at the changefeed's lease at "
            rf"{re.escape(cf)} for [\d.]+ s\)$",
            closing[0],
        ), closing[0]
        assert not any("Traceback" in line or " ERROR " in line or "error:" in line for line in b.lines), lines
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)
        server.stop()


def test_a_standby_whose_store_cannot_be_reached_says_so_and_starts_once_it_answers(
    staged, tmp_path, s3_env, monkeypatch
):
    """A standby started while the changefeed's store refuses connections (a proxy in front
    of moto, down): one WARNING names the outage and the changefeed's lease it looks at,
    and no line says that another writer holds the changefeed (nothing is known of one);
    once the store answers, an INFO says so and, nobody holding the lease, it starts."""
    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    live = tmp_path / "live"
    assert live_input(staged, live).wait(timeout=120) == 0
    cf = f"s3://{s3_env.new_bucket()}/changefeed"
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    proxy.down()
    a = None
    try:
        a = standby(live, tmp_path / "qa", cf)
        a.wait_line(
            r" WARNING olr_buffer\.store\.retry: the changefeed's store cannot be reached \(.*\); retrying to look at "
            rf"the changefeed's lease at {re.escape(cf)}, every 0\.1 s$"
        )
        proxy.up()
        a.wait_line(r" INFO olr_buffer\.store\.retry: the changefeed's store answers again after ")
        a.wait_line(rf"standby: nobody writes the changefeed {re.escape(cf)}: starting at once")
        a.wait_line("active now, lease generation 1")
        wait_published(cf, expected_changefeed(live).committed)
        assert a.stop() == 0, "\n".join(a.lines[-30:])
        lines = "\n".join(a.lines)
        assert sum("cannot be reached" in line for line in a.lines) == 1, lines
        assert not [line for line in a.lines if "is written by" in line or "has ended" in line], lines
        assert_exact(cf, expected_changefeed(live), delta=False)
    finally:
        if a is not None and a.proc.poll() is None:
            a.stop(signal.SIGKILL)
        proxy.down()


def test_a_standby_stopped_while_its_store_cannot_be_reached_says_so(staged, tmp_path, s3_env, monkeypatch):
    """A standby stopped between two looks at the lease while its store refuses
    connections: exit 0, one closing line, true: it read and published nothing, and who
    writes the changefeed is not known (not "nothing published yet", not a writer)."""
    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    live = tmp_path / "live"
    live.mkdir()
    cf = f"s3://{s3_env.new_bucket()}/changefeed"
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    proxy.down()
    a = standby(live, tmp_path / "qa", cf, "--threads", "1,2", "--standby-poll-interval", "600")
    try:
        a.wait_line(r"the changefeed's store cannot be reached \(.*\); retrying to look at the changefeed's lease")
        assert a.stop() == 0, "\n".join(a.lines[-30:])
    finally:
        if a.proc.poll() is None:
            a.stop(signal.SIGKILL)
        proxy.down()
    closing = [line for line in a.lines if re.search(r"olr_buffer: stopped", line)]
    assert len(closing) == 1, a.lines
    assert re.search(
        r" INFO olr_buffer: stopped cleanly while standing by: this standby read and published nothing; who writes "
        rf"the changefeed {re.escape(cf)} is not known: its store cannot be reached$",
        closing[0],
    ), closing[0]
    assert not any("Traceback" in line or " ERROR " in line or "error:" in line for line in a.lines), a.lines
    assert not (tmp_path / "qa").exists()


def stopped(service: Service, timeout: float = 120) -> None:
    """Wait until the service's process is stopped (SIGSTOP: state T)."""
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{service.proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "T":
        assert service.proc.poll() is None, "the service ended:\n" + "\n".join(service.lines[-30:])
        assert time.monotonic() < deadline, "the service did not stop itself at the fault point"
        time.sleep(0.02)


def fenced(service: Service) -> str:
    """The one line a writer that was taken over stops with (exit 1)."""
    assert service.proc.wait(timeout=120) == 1, "\n".join(service.lines[-30:])
    service._reader.join(timeout=10)
    errors = [line for line in service.lines if line.startswith("olr-buffer: error: ")]
    assert len(errors) == 1 and "taken over" in errors[0], "\n".join(service.lines[-30:])
    assert not [line for line in service.lines if "Traceback" in line]
    return errors[0]


@pytest.mark.parametrize(
    "table_format, fault",
    [
        ("parquet", "after_tmp_written:3:stop"),  # a file complete, about to be made visible
        ("delta", "before_delta_commit:3:stop"),  # a file visible, about to be committed
    ],
)
def test_a_service_stopped_past_its_lease_publishes_nothing_once_it_wakes(
    staged, tmp_path, s3_uri, table_format, fault
):
    """SIGSTOP in the middle of a publication (a fault point of the fencing), past the
    lease: the standby takes over and publishes; the old one, woken, stops with one line
    and publishes nothing: the changefeed is still one replay of the input."""
    live = tmp_path / "live"
    live.mkdir()
    cf = s3_uri
    writer = live_input(staged, live, rate=500)
    a = standby(live, tmp_path / "qa", cf, "--table-format", table_format, "--threads", "1,2", fault=fault)
    b = None
    try:
        a.wait_line("active now, lease generation 1")
        b = standby(live, tmp_path / "qb", cf, "--threads", "1,2")
        stopped(a)  # (it stopped itself at the fault point)
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2
        wait_more(cf, manifest_next(cf))  # the standby publishes
        a.proc.send_signal(signal.SIGCONT)
        fenced(a)
        a = standby(live, tmp_path / "qa", cf, "--threads", "1,2")
        assert int(a.wait_line(WAITING).group(2)) == b.proc.pid
        finish(writer, live, cf, a, b)
    finally:
        writer.kill()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.stop(signal.SIGKILL)
    assert_exact(cf, expected_changefeed(live), delta=table_format == "delta")


@pytest.mark.parametrize("published", [True, False], ids=["all-published", "no-input"])
def test_an_idle_service_woken_past_its_lease_stops_as_fenced_without_new_input(staged, tmp_path, s3_uri, published):
    """The input all published (or none at all: a changefeed it made, still empty), the
    active one SIGSTOPped past its lease, the standby takes over; the old one, woken with
    nothing new to publish, finds the lease taken at its next renewal and stops as a
    fenced publication does: one line naming the new holder, exit 1, its queue kept
    (restarted on it, it stands by), the new holder's lease and manifest left alone."""
    live = tmp_path / "live"
    if published:
        assert live_input(staged, live).wait(timeout=120) == 0
    else:
        live.mkdir()
    model = expected_changefeed(live)
    cf = s3_uri
    a = standby(live, tmp_path / "qa", cf, "--threads", "1,2")
    b = None
    try:
        a.wait_line("active now, lease generation 1")
        wait_published(cf, model.committed)
        b = standby(live, tmp_path / "qb", cf, "--threads", "1,2")
        assert int(b.wait_line(WAITING).group(2)) == a.proc.pid
        a.proc.send_signal(signal.SIGSTOP)
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2
        a.proc.send_signal(signal.SIGCONT)
        line = fenced(a)
        assert f"changefeed taken over by writer {lease(cf)['writer']} " in line, line
        assert f"(pid {b.proc.pid}, lease generation 2): this writer (lease generation 1) stops" in line, line
        assert manifest_next(cf) == model.committed  # nothing published twice (none: the manifest is there)
        assert lease(cf)["generation"] == 2 and lease(cf)["pid"] == b.proc.pid
        a = standby(live, tmp_path / "qa", cf, "--threads", "1,2")
        assert int(a.wait_line(WAITING).group(2)) == b.proc.pid
        assert a.stop() == 0 and b.stop() == 0
    finally:
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.stop(signal.SIGKILL)
    assert_exact(cf, model, delta=False)


@pytest.fixture(scope="module")
def staged_long(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("standby-long-input") / "input"
    simulate(out, threads=2, transactions=600, seed=43, records_per_file=400, compress_archived=False)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("table_format", ["parquet", "delta"])
def test_ten_take_overs_back_and_forth_keep_the_changefeed_one_replay(staged_long, tmp_path, s3_uri, table_format):
    """Two services take the changefeed from each other ten times while the input is
    written: the active one SIGKILLed, or SIGSTOPped past its lease and woken (it stops
    with one line), or stopped with SIGTERM (it hands the lease over); each one restarted
    as the standby."""
    live = tmp_path / "live"
    live.mkdir()
    cf = s3_uri
    queues = {"a": tmp_path / "qa", "b": tmp_path / "qb"}
    # the writer writes STEP more records of the ~7,000 at each wait for a publication
    # (13 of them): however slowly the services go on a loaded machine, ten turns never
    # reach the input's end
    allow = tmp_path / "allow"
    allow.write_text("0")
    allowed = 0
    writer = live_input(staged_long, live, rate=100, allow_file=allow)
    services = {"a": standby(live, queues["a"], cf, "--table-format", table_format, "--threads", "1,2")}
    generation = 1
    try:
        services["a"].wait_line("active now, lease generation 1")
        services["b"] = standby(live, queues["b"], cf, "--threads", "1,2")
        services["b"].wait_line(WAITING)
        active, waiting = "a", "b"
        for turn in range(10):
            assert writer.poll() is None, f"the input was written to its end after {turn} take-overs"
            allowed = let_write(allow, cf, allowed)  # the active one publishes
            old = services[active]
            how = ("kill", "stop", "term")[turn % 3]
            # the input is written while a service runs, paused while none does (the
            # take-over's wait): how much of it a turn takes does not depend on the load
            writer.send_signal(signal.SIGSTOP)
            # (counted before the stop: the standby may take over while stop() waits for
            # the old one's end, a killed holder being seen gone at its next poll)
            since = len(services[waiting].lines)
            if how == "kill":
                old.stop(signal.SIGKILL)
            elif how == "term":
                assert old.stop() == 0, "\n".join(old.lines[-30:])
            else:
                old.proc.send_signal(signal.SIGSTOP)
            m = services[waiting].wait_line(TAKEN_OVER, timeout=120, since=since)
            writer.send_signal(signal.SIGCONT)
            generation += 1
            assert int(m.group(1)) == generation, (turn, how)
            if how == "stop":
                allowed = let_write(allow, cf, allowed)
                old.proc.send_signal(signal.SIGCONT)
                fenced(old)
            writer.send_signal(signal.SIGSTOP)  # (and while the old one starts again)
            services[active] = standby(live, queues[active], cf, "--threads", "1,2")
            services[active].wait_line(WAITING)
            writer.send_signal(signal.SIGCONT)
            active, waiting = waiting, active
        assert writer.poll() is None, "the input was written to its end before the tenth take-over"
        allow.write_text(str(10**9))
        finish(writer, live, cf, services[waiting], services[active])
    finally:
        writer.send_signal(signal.SIGCONT)
        writer.kill()
        for s in services.values():
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.stop(signal.SIGKILL)
    assert_exact(cf, expected_changefeed(live), delta=table_format == "delta")


def test_the_lease_settings_come_from_the_config_file_too(staged, tmp_path, s3_uri):
    live = tmp_path / "live"
    assert live_input(staged, live).wait(timeout=120) == 0
    config = tmp_path / "run.toml"
    config.write_text(
        f'input = "{live}"\nqueue = "{tmp_path / "q"}"\nchangefeed = "{s3_uri}"\n'
        "standby = true\nlease_seconds = 7.5\nlease_renew_interval = 2\nlease_clock_skew = 1\n"
        "standby_poll_interval = 0.2\n"
    )
    service = Service("--config", config)
    try:
        service.wait_line("standby: nobody writes the changefeed .*: starting at once")
        service.wait_line("active now, lease generation 1")
        doc = lease(s3_uri)
        assert doc["ttl"] == 7.5 and doc["expires"] - doc["renewed"] == 7.5
    finally:
        assert service.stop() == 0, "\n".join(service.lines[-30:])


def test_a_renewal_interval_not_below_half_the_lease_is_a_usage_error(tmp_path):
    result = cli(
        "run",
        tmp_path,
        "--queue",
        tmp_path / "q",
        "--changefeed",
        tmp_path / "cf",
        "--lease-seconds",
        "4",
        "--lease-renew-interval",
        "2",
    )
    assert result.returncode == 2, result.describe()
    assert "--lease-renew-interval" in result.stderr and "must be renewed more often than every 2 s" in result.stderr
    assert not (tmp_path / "q").exists()


def test_a_standby_on_a_shared_directory_takes_over_a_service_that_hangs(staged, tmp_path):
    """A changefeed in a directory both services reach: with --standby it is written
    under the lease (a lock is never let go by a process that hangs); the one stopped in
    a publication stops with one line when it wakes."""
    live = tmp_path / "live"
    live.mkdir()
    cf = str(tmp_path / "shared" / "cf")
    writer = live_input(staged, live, rate=500)
    a = standby(live, tmp_path / "qa", cf, "--threads", "1,2", fault="after_tmp_written:3:stop")
    b = None
    try:
        a.wait_line("active now, lease generation 1")
        b = standby(live, tmp_path / "qb", cf, "--threads", "1,2")
        stopped(a)
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2
        wait_more(cf, manifest_next(cf))
        a.proc.send_signal(signal.SIGCONT)
        fenced(a)
        finish(writer, live, cf, b)
    finally:
        writer.kill()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.stop(signal.SIGKILL)
    assert_exact(cf, expected_changefeed(live), delta=False)


def test_a_standby_with_a_new_queue_reads_from_the_files_the_changefeed_records(staged, tmp_path, s3_uri):
    """The active one killed; the files before those the changefeed records (run_from)
    moved away; a standby with a new queue takes over, reads each thread from the recorded
    file, and the changefeed is one replay of the whole input."""
    live, moved = tmp_path / "live", tmp_path / "moved"
    live.mkdir()
    moved.mkdir()
    cf = s3_uri
    writer = live_input(staged, live, rate=300)
    a = standby(live, tmp_path / "qa", cf, "--threads", "1,2")
    b = None
    try:
        a.wait_line("active now, lease generation 1")
        deadline = time.monotonic() + 120
        while not any(
            s > 2 for s in json.loads(open_store(cf).read("_olr_buffer/manifest.json")).get("run_from", {}).values()
        ):
            assert time.monotonic() < deadline and writer.poll() is None, "run_from never moved past sequence 2"
            time.sleep(0.05)
        a.stop(signal.SIGKILL)
        run_from = json.loads(open_store(cf).read("_olr_buffer/manifest.json"))["run_from"]
        for path in live.glob("redo_*_*.jsonl*"):
            thread, seq = (int(x) for x in path.name.split(".")[0].split("_")[1:])
            if seq < run_from.get(str(thread), 1):
                path.rename(moved / path.name)
        assert list(moved.iterdir())
        b = standby(live, tmp_path / "qb", cf, "--threads", "1,2")
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2  # (the holder seen gone: at once)
        b.wait_line("reading from where the changefeed needs it")
        assert writer.wait(timeout=180) == 0
        whole = tmp_path / "whole"
        shutil.copytree(live, whole)
        for path in moved.iterdir():
            shutil.copy(path, whole / path.name)
        model = expected_changefeed(whole)
        wait_published(cf, model.committed, timeout=180)
        assert b.stop() == 0, "\n".join(b.lines[-30:])
    finally:
        writer.kill()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)
    assert_exact(cf, model, delta=False)


@pytest.mark.parametrize("ended", ["killed", "stopped"])
def test_a_standby_that_finds_another_services_lease_ended_takes_over_and_counts_it(staged, tmp_path, ended):
    """The active service killed (its holder provably gone) or stopped (its lease
    released) before the standby starts: the standby does not wait, and takes the
    changefeed over all the same: it says so and counts the take-over (status, metrics).
    Then the standby, stopped and started again on its queue, finds the lease it left
    itself: that is no take-over."""
    import urllib.request

    live = tmp_path / "live"
    assert live_input(staged, live).wait(timeout=120) == 0
    cf = str(tmp_path / "shared" / "cf")
    a = standby(live, tmp_path / "qa", cf)
    b = None
    try:
        a.wait_line(r"standby: writes the changefeed .*: active now, lease generation 1")
        if ended == "killed":
            a.stop(signal.SIGKILL)
        else:
            assert a.stop() == 0, "\n".join(a.lines[-30:])
        b = standby(live, tmp_path / "qb", cf, "--metrics-port", "0")
        port = int(b.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)/metrics").group(1))
        m = b.wait_line(r"standby: the lease of writer \w+ on \S+ \(pid (\d+).* has ended: taking the changefeed")
        assert int(m.group(1)) == a.proc.pid
        assert int(b.wait_line(TAKEN_OVER).group(1)) == 2
        assert not [line for line in b.lines if "nobody writes" in line or "standby: writes" in line], b.lines
        assert status(tmp_path / "qb")["role"]["takeovers"] == 1
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert re.search(r"^olr_buffer_takeovers_total 1\.0$", text, re.M), text
        wait_published(cf, expected_changefeed(live).committed)
        assert b.stop() == 0, "\n".join(b.lines[-30:])
        b = standby(live, tmp_path / "qb", cf)  # (its own queue's lease is not another service's)
        assert int(b.wait_line(r"standby: (?:took over|writes) the changefeed .*generation (\d+)").group(1)) == 3
        assert not [line for line in b.lines if "took over" in line or "has ended" in line], b.lines
        assert b.stop() == 0, "\n".join(b.lines[-30:])
    finally:
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.stop(signal.SIGKILL)
    assert_exact(cf, expected_changefeed(live), delta=False)
