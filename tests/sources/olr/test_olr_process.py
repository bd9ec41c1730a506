"""``olr-buffer run olr://...`` as a process: its errors (one line, the exit code), its
status, and SIGKILLs of it and of the sender at random points: every transaction exactly
once, in order, with the columns contract section 7 says."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time

import pytest

from tests.contract_model import assert_changefeed_equal, check_changefeed_layout
from tests.paths import CLI, ROOT
from tests.sources.olr.processes import (
    SenderProcess,
    error_line,
    free_port,
    run_once,
    service_log,
    start_run,
    stop,
)
from tests.sources.olr.service import changefeed, status, transactions, wait_for
from tests.sources.olr.standin import StandIn, position_of
from tests.sources.olr.streams import FORMS, expected_rows, messages, workload, write_stream

pytestmark = pytest.mark.e2e


def test_a_uri_that_is_not_olr_host_port_database_is_a_usage_error(tmp_path):
    for uri, words in (
        ("olr://dbhost/ORCL", "has no port"),
        ("olr://dbhost:9000/", "names no database"),
        ("olr://dbhost:x/ORCL", "olr://HOST:PORT/DATABASE"),
    ):
        proc = run_once(uri, tmp_path)
        assert proc.returncode == 2, proc.stderr
        assert words in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "q").exists() and not (tmp_path / "cf").exists()
    proc = subprocess.run(
        [
            *CLI,
            "replay",
            "olr://dbhost:9000/ORCL",
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 2 and "use olr-buffer run" in proc.stderr, proc.stderr


def test_another_database_name_stops_with_one_line(tmp_path):
    with StandIn(messages(workload(random.Random(1), 3), FORMS["per-row"])) as sender:
        proc = run_once(f"olr://127.0.0.1:{sender.port}/OTHER", tmp_path)
    assert proc.returncode == 1
    error_line(proc, "INVALID_DATABASE", "'OTHER'", "the start of the stream")


def test_a_message_that_is_not_json_stops_the_run_and_a_fixed_sender_resumes_it(tmp_path):
    txs = workload(random.Random(2), 30)
    form = FORMS["per-row"]
    msgs = messages(txs, form)
    cut = next(i for i, m in enumerate(msgs) if b'"op":"commit"' in m and i > len(msgs) // 2) + 1
    before_bad = position_of(msgs[cut - 1])
    with StandIn([*msgs[:cut], b'{"c_scn":1,"c_idx":{oops'] + msgs[cut:]) as sender:
        proc = run_once(sender.uri, tmp_path)
    assert proc.returncode == 3, proc.stderr
    error_line(proc, "not valid JSON", f"the message after c_scn {before_bad[0]} c_idx {before_bad[1]}")
    published = transactions(tmp_path / "cf")
    assert published <= sum(1 for m in msgs[:cut] if b'"op":"commit"' in m)
    # the sender fixed (here: another one, with the stream as it should be): the same command resumes
    with StandIn(msgs) as sender:
        svc = start_run(sender.uri, tmp_path)
        try:
            wait_for(lambda: transactions(tmp_path / "cf") == len(txs) or svc.poll() is not None, 60, "everything")
        finally:
            assert stop(svc) == 0, service_log(tmp_path)
    assert_changefeed_equal(changefeed(tmp_path / "cf"), expected_rows(txs, form))
    check_changefeed_layout(tmp_path / "cf")


def test_status_and_metrics_show_the_sender_the_confirmed_position_and_the_lag(tmp_path):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    txs = workload(random.Random(3), 20)
    msgs = messages(txs, FORMS["per-row-all"])
    last_commit = [position_of(m) for m in msgs if b'"op":"commit"' in m][-1]
    with StandIn(msgs) as sender:
        svc = start_run(sender.uri, tmp_path, "--metrics-port", "0", "--log-format", "json")
        try:
            wait_for(lambda: sender.confirmed is not None and sender.confirmed >= last_commit, 60, "the last confirm")

            def confirmed():
                doc = status(tmp_path / "q").get("olr")
                return doc is not None and doc["confirmed"] == {"c_scn": last_commit[0], "c_idx": last_commit[1]}

            wait_for(confirmed, 30, "status showing the confirmed position")
            doc = status(tmp_path / "q")["olr"]
            logs = [json.loads(ln) for ln in service_log(tmp_path).splitlines() if ln.startswith("{")]
            port = next(d["metrics_port"] for d in logs if "metrics_port" in d)
            time.sleep(1.2)  # (rendered at most once a second)
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        finally:
            assert stop(svc) == 0, service_log(tmp_path)
    samples = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert samples["olr_buffer_olr_confirmed_c_scn"] == last_commit[0]
    assert samples["olr_buffer_olr_confirmed_c_idx"] == last_commit[1]
    assert samples["olr_buffer_olr_transactions_total"] == len(txs)
    assert {
        "olr_buffer_olr_lag_scn",
        "olr_buffer_olr_reconnects_total",
        "olr_buffer_olr_checkpoint_messages_total",
        "olr_buffer_olr_messages_total",
        "olr_buffer_olr_received_c_scn",
    } <= set(samples)
    assert doc["sender"] == f"olr://127.0.0.1:{sender.port}/ORCL" and doc["database"] == "ORCL"
    assert doc["lag_scn"] == doc["received"]["c_scn"] - last_commit[0] and doc["lag_seconds"] is not None
    assert doc["transactions"] == len(txs) and doc["open_transaction"] is None
    assert doc["checkpoint_messages"] == sum(b"chkpt" in m for m in msgs) and doc["tables_with_columns"] == 3
    text = subprocess.run(
        [*CLI, "status", "--queue", str(tmp_path / "q")], capture_output=True, text=True, timeout=60, cwd=ROOT
    ).stdout
    assert f"olr sender olr://127.0.0.1:{sender.port}/ORCL: confirmed c_scn {last_commit[0]}" in text, text


@pytest.mark.slow
def test_sigkills_of_run_and_of_the_sender_publish_every_transaction_once(tmp_path):
    """The sender streams (at a pace, so that the kills land anywhere: in a transaction of
    thousands of rows too) while `run` and the sender are killed with SIGKILL, each at
    random moments, and started again; then the changefeed is compared with the stream."""
    rng = random.Random(35)
    txs = workload(rng, 300, rac=True, large=6000)
    form = FORMS["hex-iso-xidn"]
    msgs = messages(txs, form)
    write_stream(tmp_path / "stream.jsonl", msgs)
    port = free_port()
    uri = f"olr://127.0.0.1:{port}/ORCL"
    state = tmp_path / "sender-state.json"
    rate = len(msgs) / 15  # about 15 s of stream, most of it the large transaction
    sender = SenderProcess(tmp_path / "stream.jsonl", port, state, rate)
    svc = start_run(uri, tmp_path)
    kills = {"run": 0, "sender": 0}
    streams = 0
    try:
        for _ in range(8):
            streams += 1  # each kill when the service streams, not while it starts
            wait_for(
                lambda streams=streams, svc=svc: (
                    service_log(tmp_path).count("streaming ") >= streams or svc.poll() is not None
                ),
                60,
                "the service streaming",
            )
            assert svc.poll() is None, service_log(tmp_path)
            time.sleep(rng.uniform(0.2, 1.5))
            if rng.random() < 0.6:
                svc.kill()  # SIGKILL
                assert svc.wait(30) == -signal.SIGKILL
                kills["run"] += 1
                svc = start_run(uri, tmp_path)
            else:
                sender.kill()
                kills["sender"] += 1
                time.sleep(rng.uniform(0, 1.5))  # the receiver finds no sender for a while
                sender = SenderProcess(tmp_path / "stream.jsonl", port, state, rate)
        wait_for(lambda: transactions(tmp_path / "cf") >= len(txs) or svc.poll() is not None, 120, "everything")
        assert svc.poll() is None, service_log(tmp_path)
        wait_for(
            lambda: (
                state.exists()
                and tuple(json.loads(state.read_text())) >= position_of([m for m in msgs if b'"op":"commit"' in m][-1])
            ),
            30,
            "the last commit confirmed to the sender",
        )
    finally:
        code = stop(svc) if svc.poll() is None else svc.returncode
        sender.kill()
    assert code == 0, service_log(tmp_path)
    assert kills["run"] and kills["sender"], kills
    assert_changefeed_equal(changefeed(tmp_path / "cf"), expected_rows(txs, form))
    check_changefeed_layout(tmp_path / "cf")
    log = service_log(tmp_path)
    assert "connecting again in" in log
    assert "discarded the" in log, "no kill landed in a transaction"


def test_start_scn_now_asks_the_sender_to_start_from_now(tmp_path):
    """OpenLogReplicator's START takes 2^64-1 (its Scn::none()) as "now" and any other value,
    0 too, as an SCN (WriterStream::processStart): `--start-scn now` sends 2^64-1."""
    msgs = messages(workload(random.Random(7), 3), FORMS["per-row"])
    with StandIn(msgs) as sender:
        proc = start_run(sender.uri, tmp_path, "--start-scn", "now")
        try:
            wait_for(lambda: any(r["code"] == 1 for r in sender.requests), what="a START", timeout=60)
            wait_for(lambda: "streaming" in service_log(tmp_path), what="the streaming line", timeout=60)
        finally:
            assert stop(proc) == 0, service_log(tmp_path)
    starts = [r for r in sender.requests if r["code"] == 1]
    assert starts[0]["scn"] == (1 << 64) - 1
    assert "from now on" in service_log(tmp_path)


def test_start_scn_takes_an_scn_or_now_and_nothing_else(tmp_path):
    for bad, words in (("soon", "neither an SCN nor 'now'"), (str(1 << 64), "outside 0 to")):
        proc = run_once("olr://127.0.0.1:9/ORCL", tmp_path, "--start-scn", bad)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "q").exists()
