"""`olr-buffer serve` as a process: killed with SIGKILL and restarted, the receiver resumes
after its last confirm; SIGTERM/SIGINT stop it cleanly; what it refuses at start; and a
changefeed that a real `olr-buffer run` keeps writing."""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from tests.contract_model import expected_changefeed, load_changefeed
from tests.live_writer import start_live_writer
from tests.olr_wire import ALREADY_STARTED, CONTINUE, REPLICATE, START
from tests.paths import CLI, ROOT
from tests.serve.changefeeds import Feed, random_transactions
from tests.serve.model import after, expected_messages, position, transactions
from tests.serve.serve_process import ServeProcess, run_cli

pytestmark = pytest.mark.e2e


@pytest.fixture
def changefeed(tmp_path: Path) -> tuple[Path, list[dict]]:
    feed = Feed(tmp_path / "cf")
    txs = random_transactions(random.Random(21), 60, share=0.3)
    for part in (txs[:20], txs[20:45], txs[45:]):
        feed.publish(part)
    rows = feed.rows()
    feed.close()
    return tmp_path / "cf", expected_messages(rows, "ORCL")


def test_sigkill_then_restart_resumes_after_the_last_confirm(changefeed):
    cf, everything = changefeed
    serve = ServeProcess(cf)
    try:
        with serve.receiver() as r:
            r.debezium_handshake()
            got = r.messages(70)
            confirmed = position(got[57])
            r.confirm(*confirmed)
            assert r.confirmed() == confirmed  # taken: stored before the reply
        with serve.receiver() as r:  # streaming on, unconfirmed, when serve is killed
            r.debezium_handshake()
            r.messages(100)
            serve.proc.kill()
            assert serve.proc.wait(30) == -signal.SIGKILL
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
    status = run_cli("status", "--changefeed", str(cf), "--json")
    (receiver,) = json.loads(status.stdout)["receivers"]
    assert not receiver["serving"] and (receiver["confirmed"]["c_scn"], receiver["confirmed"]["c_idx"]) == confirmed
    serve = ServeProcess(cf)
    try:
        with serve.receiver() as r:  # SynchDB: START, ALREADY_STARTED, CONTINUE with c_scn 0
            r.send(START, scn=0)
            reply = r.response()
            assert (reply["code"], reply["c_scn"], reply["c_idx"]) == (ALREADY_STARTED, *confirmed)
            r.send(CONTINUE, c_scn=0)
            assert r.response()["code"] == REPLICATE
            rest = after(everything, confirmed)
            assert r.messages(len(rest)) == rest
        assert serve.stop() == 0
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_serve_cleanly(changefeed, sig):
    cf, everything = changefeed
    serve = ServeProcess(cf)
    with serve.receiver() as r:
        r.synchdb_handshake()
        r.messages(5)
        assert serve.stop(sig) == 0, serve.log
        while r.read_frame(timeout=10) is not None:  # what was on its way, then the end
            pass
    assert '"stopped cleanly"' in serve.log and "Traceback" not in serve.log
    again = ServeProcess(cf)  # the lock went with it
    assert again.stop() == 0


def test_what_serve_refuses_at_start(changefeed, tmp_path: Path):
    cf, _ = changefeed
    first = ServeProcess(cf)
    try:
        second = run_cli("serve", str(cf), "--listen", "127.0.0.1:0", "--database", "ORCL")
        assert second.returncode == 1
        assert "database 'ORCL' is served by another process (pid" in second.stderr
        taken = run_cli("serve", str(cf), "--listen", f"127.0.0.1:{first.port}", "--database", "OTHER")
        assert (
            taken.returncode == 1 and f"cannot listen on 127.0.0.1:{first.port}: Address already in use" in taken.stderr
        )
    finally:
        assert first.stop() == 0
    missing = run_cli("serve", str(tmp_path / "nope"), "--listen", "127.0.0.1:0", "--database", "ORCL")
    assert missing.returncode == 1 and "no such changefeed directory" in missing.stderr
    assert not (tmp_path / "nope").exists()
    for args, message in (
        (["s3://bucket/cf", "--listen", "127.0.0.1:0", "--database", "X"], "local changefeed"),
        ([str(cf), "--listen", "9000", "--database", "X"], "is not HOST:PORT"),
        ([str(cf), "--listen", "127.0.0.1:0"], "Missing option '--database'"),
    ):
        bad = run_cli("serve", *args)
        assert bad.returncode == 2 and message in bad.stderr, bad.stderr
    (cf / "_olr_buffer" / "serve" / "ORCL.json").write_text("{")
    damaged = run_cli("serve", str(cf), "--listen", "127.0.0.1:0", "--database", "ORCL")
    assert damaged.returncode == 1 and "cannot read the receiver's confirmed position" in damaged.stderr


def test_a_position_that_cannot_be_stored_stops_serve(changefeed, tmp_path: Path):
    """A confirm is a promise to the receiver: when it cannot be kept, serve stops (exit 1)
    rather than go on with a position that a restart would not know."""
    cf, everything = changefeed
    serve = ServeProcess(cf, "--state", str(tmp_path / "state"))
    with serve.receiver() as r:
        r.debezium_handshake()
        got = r.messages(5)
        shutil.rmtree(tmp_path / "state")
        (tmp_path / "state").write_text("not a directory")
        r.confirm(*position(got[-1]))
        assert serve.proc.wait(30) == 1
    assert "cannot store the receiver's position" in serve.log and "Traceback" not in serve.log


def test_a_state_directory_of_its_own(changefeed, tmp_path: Path):
    cf, everything = changefeed
    (tmp_path / "serve.toml").write_text(f'state = "{tmp_path / "state"}"\n')  # --state, from a --config file
    serve = ServeProcess(cf, "--config", str(tmp_path / "serve.toml"))
    commit = next(i for i, m in enumerate(everything) if m["payload"][0]["op"] == "commit")
    with serve.receiver() as r:
        r.debezium_handshake()
        r.confirm(*position(r.messages(commit + 1)[-1]))  # the first transaction, whole
        assert r.confirmed() == position(everything[commit])
    assert serve.stop() == 0
    assert (tmp_path / "state" / "ORCL.json").exists() and not (cf / "_olr_buffer" / "serve").exists()
    status = run_cli("status", "--changefeed", str(cf), "--serve-state", str(tmp_path / "state"))
    assert "receiver of database 'ORCL' (serve not running)" in status.stdout
    c_scn, c_idx = position(everything[commit])
    assert f"confirmed c_scn {c_scn} c_idx {c_idx} (tx_seq 0) at " in status.stdout
    assert ": 59 transactions, " in status.stdout


@pytest.mark.slow
def test_a_receiver_of_a_changefeed_that_run_keeps_writing(tmp_path: Path):
    """`run` follows logs that a writer plays in; `serve` follows the changefeed; the
    receiver confirms as it goes, reconnects every few hundred messages, and serve is
    killed (SIGKILL) and restarted midway. What the receiver confirmed, in order, is the
    changefeed's stream (read with pyarrow), every transaction once."""
    simulate(tmp_path / "stage", threads=2, transactions=400, seed=5, records_per_file=500, compress_archived=False)
    expected = expected_changefeed(tmp_path / "stage")  # the complete input's changefeed
    (tmp_path / "live").mkdir()
    cf, q = tmp_path / "cf", tmp_path / "q"
    service = subprocess.Popen(
        [
            *CLI,
            "run",
            str(tmp_path / "live"),
            "--queue",
            str(q),
            "--changefeed",
            str(cf),
            "--threads",
            "1,2",
            "--flush-interval",
            "0.2",
            "--poll-interval",
            "0.02",
            "--checkpoint-interval",
            "0.5",
            "--log-level",
            "warning",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    writer = start_live_writer(tmp_path / "stage", tmp_path / "live", 800, seed=2)
    serve = None
    try:
        deadline = time.monotonic() + 60
        while not (cf / "_olr_buffer").is_dir():
            assert service.poll() is None and time.monotonic() < deadline, "run did not start"
            time.sleep(0.05)
        serve = ServeProcess(cf)
        applied: list[dict] = []
        rng = random.Random(1)
        killed = False
        deadline = time.monotonic() + 300
        while len(transactions(applied)) < expected.committed:
            assert time.monotonic() < deadline, f"{len(transactions(applied))} transactions applied after 300s"
            with serve.receiver() as r:
                (r.debezium_handshake if rng.random() < 0.5 else r.synchdb_handshake)()
                got: list[dict] = []
                want = rng.randint(50, 400)
                try:
                    while len(got) < want:
                        got += r.messages(1, timeout=1)
                except TimeoutError:
                    pass  # caught up with what run has published
                if got:
                    assert position(got[0]) > (position(applied[-1]) if applied else (-1, -1))
                    r.confirm(*position(got[-1]))
                    assert r.confirmed() == position(got[-1])
                    applied += got
            if not killed and len(applied) > 300:
                serve.proc.kill()
                assert serve.proc.wait(30) == -signal.SIGKILL
                serve = ServeProcess(cf)
                killed = True
        assert killed and writer.wait(60) == 0
        assert applied == expected_messages(load_changefeed(cf), "ORCL")
        assert len(transactions(applied)) == expected.committed
        status = run_cli("status", "--queue", str(q), "--json")
        (receiver,) = json.loads(status.stdout)["receivers"]
        assert receiver["serving"] and receiver["transactions_behind"] == 0, receiver
        assert serve.stop() == 0
        service.send_signal(signal.SIGTERM)
        assert service.wait(60) == 0, service.communicate()[1]
    finally:
        for p in (writer, service, serve.proc if serve else None):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
