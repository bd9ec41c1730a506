"""The single-writer lease (olr_buffer/store/lease.py), on both stores: in one process with
clocks the test moves, and with two real writer processes (SIGKILL, SIGSTOP)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from olr_buffer.store import LeaseHeldError, LeaseLostError, StoreError, open_store
from olr_buffer.store.lease import LEASE, Lease

ROOT = Path(__file__).resolve().parents[2]


class Clocks:
    """A wall clock and a monotonic clock that move only when told."""

    def __init__(self, wall: float = 1_700_000_000.0) -> None:
        self.wall = wall
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds

    def lease(self, store, **kw) -> Lease:
        return Lease(store, clock=lambda: self.wall, monotonic=lambda: self.mono, **kw)


def lease_doc(store) -> dict:
    return orjson.loads(store.read(LEASE))


def test_acquire_writes_the_lease_document(store):
    clocks = Clocks()
    lease = clocks.lease(store, ttl=60, owner="queue-1", info={"source": "redo"})
    lease.acquire()
    doc = lease_doc(store)
    assert doc["writer"] == lease.writer_id and doc["owner"] == "queue-1" and doc["pid"] == os.getpid()
    assert doc["generation"] == 1 and doc["expires"] == clocks.wall + 60 and doc["source"] == "redo"
    assert lease.held and lease.remaining() == 60


def test_a_live_lease_is_refused_naming_its_holder(store):
    clocks = Clocks()
    a = clocks.lease(store, ttl=60)
    a.acquire()
    b = clocks.lease(store, ttl=60)
    clocks.advance(60)  # expired, but within the allowed clock skew
    with pytest.raises(LeaseHeldError) as caught:
        b.acquire()
    text = str(caught.value)
    assert f"changefeed is written by writer {a.writer_id}" in text and f"(pid {os.getpid()})" in text
    assert "\n" not in text
    assert lease_doc(store)["writer"] == a.writer_id


def test_an_expired_lease_is_taken_over_and_its_holder_stops(store):
    clocks = Clocks()
    a = clocks.lease(store, ttl=60, skew=5)
    a.acquire()
    clocks.advance(66)
    b = clocks.lease(store, ttl=60, skew=5)
    b.acquire()
    assert b.generation == 2 and lease_doc(store)["writer"] == b.writer_id
    with pytest.raises(LeaseLostError, match="taken over by another writer"):
        a.ensure()  # its time ran out: it renews, and the renewal finds the lease changed
    assert not a.held
    with pytest.raises(LeaseLostError):
        a.renew()
    b.ensure()  # the new holder goes on
    assert lease_doc(store)["writer"] == b.writer_id


def test_ensure_renews_once_half_the_time_is_gone(store):
    clocks = Clocks()
    lease = clocks.lease(store, ttl=60)
    lease.acquire()
    clocks.advance(20)
    lease.ensure()
    assert lease_doc(store)["renewed"] == clocks.wall - 20  # not yet
    clocks.advance(15)
    lease.ensure()
    doc = lease_doc(store)
    assert doc["renewed"] == clocks.wall and doc["expires"] == clocks.wall + 60 and doc["generation"] == 1
    assert lease.remaining() == 60


def test_release_lets_the_next_writer_in_at_once(store):
    clocks = Clocks()
    a = clocks.lease(store, ttl=60)
    a.acquire()
    a.release()
    assert lease_doc(store)["released"] is True
    b = clocks.lease(store, ttl=60)
    b.acquire()
    assert b.generation == 2
    with pytest.raises(LeaseLostError, match="released"):
        a.ensure()


def test_a_lease_of_the_same_queue_on_this_host_is_taken_over_at_once(store):
    """The queue's lock makes its owner exclusive on a host: a lease it left behind
    belongs to a process that is gone (a restart after a kill does not wait a ttl)."""
    clocks = Clocks()
    clocks.lease(store, ttl=60, owner="queue-1").acquire()
    with pytest.raises(LeaseHeldError):
        clocks.lease(store, ttl=60, owner="queue-2").acquire()
    again = clocks.lease(store, ttl=60, owner="queue-1")
    again.acquire()
    assert again.generation == 2


def test_racing_takeovers_have_one_winner(store):
    clocks = Clocks()
    clocks.lease(store, ttl=10, skew=0).acquire()
    clocks.advance(11)
    contenders = [clocks.lease(store, ttl=10, skew=0) for _ in range(6)]
    results: list[str] = []

    def take(lease: Lease) -> None:
        try:
            lease.acquire()
            results.append("held")
        except LeaseHeldError:
            results.append("refused")

    threads = [threading.Thread(target=take, args=(c,)) for c in contenders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["held"] + ["refused"] * 5
    [winner] = [c for c in contenders if c.held]
    assert lease_doc(store)["writer"] == winner.writer_id and winner.generation == 2


def test_keepalive_renews_an_idle_writer(store):
    lease = Lease(store, ttl=0.6, skew=0)
    lease.acquire()
    first = lease_doc(store)["renewed"]
    lease.start_keepalive()
    deadline = time.monotonic() + 20
    while lease_doc(store)["renewed"] == first:
        assert time.monotonic() < deadline, "the lease was not renewed"
        time.sleep(0.05)
    lease.release()
    assert lease_doc(store)["released"] is True


def test_a_document_that_is_not_a_lease(store):
    store.create(LEASE, b"garbage")
    with pytest.raises(StoreError, match="not a lease document") as caught:
        Lease(store).acquire()
    assert "remove it" in str(caught.value)


# -- two real processes ------------------------------------------------------------------


class Worker:
    def __init__(self, uri: str, ttl: float, skew: float, owner: str | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.store.lease_worker", uri, str(ttl), str(skew), *([owner] if owner else [])],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready, self.writer_id = self.read().split()
        assert ready == "ready"

    def read(self) -> str:
        line = self.proc.stdout.readline()
        assert line, f"the worker exited ({self.proc.poll()})"
        return line.strip()

    def ask(self, command: str) -> str:
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def acquire_until_held(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            answer = self.ask("acquire")
            if answer.startswith("held") or time.monotonic() > deadline:
                return answer
            time.sleep(0.1)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()


@pytest.fixture
def workers(store_uri):
    started: list[Worker] = []

    def start(ttl: float = 1.5, skew: float = 0.2, owner: str | None = None) -> Worker:
        w = Worker(store_uri, ttl, skew, owner)
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


def published(store_uri: str) -> list[str]:
    """The writers of the published objects (sorted)."""
    return sorted(o.name.split("-", 1)[1] for o in open_store(store_uri).list("published/"))


def test_two_processes_one_writer_and_a_takeover_after_a_kill(store_uri, workers):
    a, b = workers(), workers()
    assert a.ask("acquire") == "held 1"
    refused = b.ask("acquire")
    assert refused.startswith("refused") and f"pid {a.proc.pid}" in refused
    assert a.ask("publish").startswith("published")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    assert b.acquire_until_held(timeout=30) == "held 2"
    assert b.ask("publish").startswith("published")
    assert published(store_uri) == sorted([a.writer_id, b.writer_id])


def test_a_stopped_writer_publishes_nothing_after_the_takeover(store_uri, workers):
    a, b = workers(), workers()
    assert a.ask("acquire") == "held 1"
    assert a.ask("publish").startswith("published")
    os.kill(a.proc.pid, signal.SIGSTOP)
    try:
        assert b.acquire_until_held(timeout=30) == "held 2"
        assert b.ask("publish").startswith("published")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    lost = a.ask("publish")
    assert lost.startswith("lost") and "taken over by another writer" in lost
    assert b.ask("publish").startswith("published")
    assert published(store_uri) == sorted([a.writer_id, b.writer_id, b.writer_id])


def test_a_released_lease_passes_between_processes_at_once(store_uri, workers):
    a, b = workers(ttl=600), workers(ttl=600)
    assert a.ask("acquire") == "held 1"
    assert b.ask("acquire").startswith("refused")
    assert a.ask("release") == "released"
    assert b.ask("acquire") == "held 2"
    assert a.ask("publish").startswith("lost")


def test_the_lease_of_a_killed_holder_on_this_host_is_taken_over_at_once(store_uri, workers):
    """A holder on this host whose process is gone (SIGKILL) is provably dead: its lease
    is taken on the first try, long before it would expire; a stopped (SIGSTOP) one is
    alive, and keeps it."""
    a, b, c = workers(ttl=600), workers(ttl=600), workers(ttl=600)
    assert a.ask("acquire") == "held 1"
    os.kill(a.proc.pid, signal.SIGSTOP)  # alive: never taken for dead
    try:
        assert b.ask("acquire").startswith("refused")
    finally:
        os.kill(a.proc.pid, signal.SIGCONT)
    assert a.ask("publish").startswith("published")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    assert b.ask("acquire") == "held 2"  # at once: the lease had ten minutes to run
    assert c.ask("acquire").startswith("refused")  # and b is alive
    assert b.ask("publish").startswith("published")


def test_a_zombie_holder_is_dead_too(store_uri, workers):
    a, b = workers(ttl=600), workers(ttl=600)
    assert a.ask("acquire") == "held 1"
    a.proc.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 30
    while Path(f"/proc/{a.proc.pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
        assert time.monotonic() < deadline, "the killed worker did not become a zombie"
        time.sleep(0.02)
    assert b.ask("acquire") == "held 2"  # (not reaped yet: its pid still shows, as a zombie)


def test_a_live_writer_of_the_same_queue_on_this_host_keeps_its_lease(store_uri, workers):
    """Two processes of the same queue id (a copied queue directory): the second is
    refused while the first lives, and takes over once it is killed."""
    a, b = workers(ttl=600, owner="queue-1"), workers(ttl=600, owner="queue-1")
    assert a.ask("acquire") == "held 1"
    assert b.ask("acquire").startswith("refused")
    a.proc.send_signal(signal.SIGKILL)
    a.proc.wait()
    assert b.ask("acquire") == "held 2"


def _holder(store, **changes) -> None:
    """Rewrite the lease document there with ``changes`` (another process's, as if)."""
    doc = {**lease_doc(store), **changes}
    current = store.read_versioned(LEASE)
    store.replace_if(LEASE, orjson.dumps(doc), current.etag)


def test_a_holder_that_cannot_be_checked_is_waited_for(store):
    """Only a holder of this host, boot and PID namespace can be found dead; one of
    another host, another boot, another container (PID namespace), or a document
    without the facts waits for its lease to expire, whatever its pid."""
    clocks = Clocks()
    a = clocks.lease(store, ttl=60)
    a.acquire()
    gone = 2**22 + 12345  # above any pid_max: no such process
    mine = lease_doc(store)["process"]
    for changes in (
        {"pid": gone, "host": "elsewhere"},
        {"pid": gone, "process": {**mine, "boot": "another-boot"}},
        {"pid": gone, "process": {**mine, "pid_namespace": "pid:[1]"}},
        {"pid": gone, "process": None},
    ):
        _holder(store, **changes)
        with pytest.raises(LeaseHeldError):
            clocks.lease(store, ttl=60).acquire()
    _holder(store, pid=gone, process=mine, host=a.host)
    taken = clocks.lease(store, ttl=60)
    taken.acquire()
    assert taken.generation == 2


def test_a_pid_reused_by_another_process_is_a_dead_holder(store):
    """The holder's pid now names another process (another start time): dead."""
    clocks = Clocks()
    clocks.lease(store, ttl=60).acquire()
    mine = lease_doc(store)["process"]
    _holder(store, process={**mine, "start": mine["start"] - 1})  # this pid, started at another time
    taken = clocks.lease(store, ttl=60)
    taken.acquire()
    assert taken.generation == 2


def test_a_renewal_that_went_in_unanswered_is_not_a_lost_lease(store):
    """The store stops answering while a renewal goes in: the caller (run, after the
    outage) renews again, is refused (the lease has the new version), and finds it is
    its own: still held, counted from when that renewal was written."""
    from olr_buffer.store import StoreUnreachableError

    clocks = Clocks()
    lease = clocks.lease(store, ttl=60)
    lease.acquire()
    real = store.replace_if

    def applied_unanswered(name, data, etag):
        real(name, data, etag)
        raise StoreUnreachableError("the store did not answer")

    store.replace_if = applied_unanswered
    clocks.advance(40)
    with pytest.raises(StoreUnreachableError):
        lease.renew()
    store.replace_if = real
    clocks.advance(10)
    lease.renew()  # refused (another version), recognised as its own
    assert lease.held and lease.remaining() == pytest.approx(50)  # from the unanswered renewal at 40 s
    lease.ensure()
    assert lease.held and lease_doc(store)["writer"] == lease.writer_id


# -- what a standby sees ----------------------------------------------------------------


def test_live_holder_names_the_holder_until_its_lease_may_be_taken(store):
    clocks = Clocks()
    looker = clocks.lease(store, ttl=60, skew=5)
    assert looker.live_holder() is None  # no lease yet
    a = clocks.lease(store, ttl=60, skew=5, owner="queue-a")
    a.acquire()
    holder = looker.live_holder()
    assert holder is not None and holder["writer"] == a.writer_id and holder["generation"] == 1
    assert holder["expires"] == clocks.wall + 60
    clocks.advance(65)  # expired, within the clock skew
    assert looker.live_holder()["writer"] == a.writer_id
    clocks.advance(1)
    assert looker.live_holder() is None  # may be taken: acquire agrees
    assert not store.read(LEASE).count(looker.writer_id.encode())  # looking takes nothing
    looker.acquire()
    assert looker.generation == 2 and looker.live_holder() is None  # its own


def test_live_holder_is_none_for_a_released_lease(store):
    clocks = Clocks()
    a = clocks.lease(store, ttl=60)
    a.acquire()
    a.release()
    assert clocks.lease(store, ttl=60).live_holder() is None


def test_the_keepalive_renews_at_the_interval_given(store):
    lease = Lease(store, ttl=600, renew_seconds=0.05)  # (without it: every 150 s)
    lease.acquire()
    first = lease_doc(store)["renewed"]
    lease.start_keepalive()
    try:
        deadline = time.monotonic() + 60
        while lease_doc(store)["renewed"] == first:
            assert time.monotonic() < deadline, "the keepalive did not renew"
            time.sleep(0.02)
    finally:
        lease.release()


def test_the_keepalive_of_an_idle_writer_finds_its_lease_taken_over(store):
    """No publication, no ensure(): the keepalive's renewal finds another writer's lease
    and says so in ``taken_over`` (the writer stops on it); a release then leaves the new
    holder's lease alone."""
    a = Lease(store, ttl=600, renew_seconds=0.05)
    a.acquire()
    a.start_keepalive()
    try:
        assert not a.taken_over
        b = Clocks(wall=time.time() + 1000).lease(store, ttl=60, skew=5)  # (a's lease expired, for b)
        b.acquire()
        assert b.generation == 2
        deadline = time.monotonic() + 60
        while not a.taken_over:
            assert time.monotonic() < deadline, "the keepalive did not find the lease taken over"
            time.sleep(0.02)
        assert not a.held
        with pytest.raises(LeaseLostError, match="taken over by another writer"):
            a.ensure()
    finally:
        a.release()
    doc = lease_doc(store)
    assert doc["writer"] == b.writer_id and not doc["released"]


def test_a_released_lease_is_not_taken_over(store):
    lease = Lease(store, ttl=60)
    lease.acquire()
    lease.release()
    assert not lease.taken_over


def test_a_renewal_interval_not_below_the_lease_is_refused(store):
    with pytest.raises(ValueError, match="renew_seconds"):
        Lease(store, ttl=10, renew_seconds=10)


def test_lease_timing_makes_leases_of_its_times(store):
    from olr_buffer.store import LeaseTiming

    lease = LeaseTiming(ttl=3, renew=1, skew=0.5).lease(store, owner="q")
    lease.acquire()
    doc = lease_doc(store)
    assert doc["ttl"] == 3 and doc["expires"] - doc["renewed"] == 3 and doc["owner"] == "q"
    assert (lease.renew_seconds, lease.skew) == (1, 0.5)
    lease.release()


def test_a_keepalive_renewal_the_store_does_not_answer_is_an_outage(s3_uri, s3_env, monkeypatch):
    """``run``'s lease, given its OutageRetry's watch: the keepalive's renewal to a store
    that stops answering (a TCP black hole in front of moto) is an outage once the
    store timeout has passed, while nothing else calls the store; the renewal that gets
    through once the store answers again ends it."""
    from olr_buffer.store import OutageRetry
    from tests.s3_server import TcpProxy

    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    stop = threading.Event()
    retry = OutageRetry(stop, timeout=0.5)
    lease = Lease(open_store(s3_uri), ttl=600, renew_seconds=0.1, watch=retry.watched)
    try:
        lease.acquire()
        lease.start_keepalive()
        proxy.hang()
        deadline = time.monotonic() + 60
        while retry.outages == 0:
            assert time.monotonic() < deadline, "a renewal that waits for an answer is no outage"
            time.sleep(0.02)
        assert retry.outage_seconds() > 0
        proxy.resume()  # (the connections that hung are closed: botocore tries again)
        while retry.outage_seconds() > 0:
            assert time.monotonic() < deadline + 60, "the outage does not end once the store answers"
            time.sleep(0.02)
        assert retry.outages == 1 and lease.held
    finally:
        stop.set()
        proxy.resume()
        lease.release()
        proxy.down()


def test_a_refused_renewal_under_a_watch_is_said_once_with_the_keepalives_interval(s3_uri, s3_env, monkeypatch, caplog):
    """``run``'s keepalive, given its OutageRetry's watch, meets a store that refuses
    connections: one WARNING (the watch's outage line), which says that the renewal is
    tried again at the keepalive's interval (not the retry's cap), not a second one of
    the keepalive's own; the renewal that gets through ends the outage."""
    from olr_buffer.store import OutageRetry
    from tests.s3_server import TcpProxy

    caplog.set_level(logging.DEBUG, "olr_buffer.store")
    proxy = TcpProxy(int(s3_env.endpoint.rsplit(":", 1)[1]))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    stop = threading.Event()
    retry = OutageRetry(stop, timeout=30)
    lease = Lease(open_store(s3_uri), ttl=600, renew_seconds=0.1, watch=retry.watched)
    try:
        lease.acquire()
        lease.start_keepalive()
        proxy.down()
        deadline = time.monotonic() + 60
        while retry.retries < 3:
            assert time.monotonic() < deadline, "the keepalive's refused renewals are not counted"
            time.sleep(0.02)
        proxy.up()
        while retry.outage_seconds() > 0:
            assert time.monotonic() < deadline + 60, "the outage does not end once the store answers"
            time.sleep(0.02)
    finally:
        stop.set()
        lease.release()
        proxy.down()
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith("the changefeed's store cannot be reached (") and warnings[0].endswith(
        "retrying to renew the changefeed's lease, every 0.1 s"
    ), warnings[0]
