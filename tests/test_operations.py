"""What operations users expect of `run` and `status`: live status and state, metrics
through prometheus_client (with /health), OLR_BUFFER_* environment variables, the group's
--log-level, JSON logs with ISO-8601 times and facts as fields, a .zst still being copied in.
Real processes throughout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import zstandard
from prometheus_client.parser import text_string_to_metric_families

from tests.contract_model import load_changefeed
from tests.test_run_service import ROOT, run_cmd, start, stop, wait_for_rows

pytestmark = [__import__("pytest").mark.timeout(120), __import__("pytest").mark.e2e]


def lines(*recs: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in recs)


def tx(xid: str, scn: int, rid: str, tm: int | None = None) -> list[dict]:
    commit = {"op": "commit", "scn": scn + 2, "xid": xid}
    if tm is not None:
        commit["tm"] = tm
    return [
        {"op": "begin", "scn": scn, "xid": xid},
        {"op": "insert", "scn": scn + 1, "xid": xid, "owner": "O", "table": "T", "rid": rid, "after": {"ID": rid}},
        commit,
    ]


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


def status_json(tmp: Path) -> dict:
    r = cli("status", "--queue", str(tmp / "q"), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def metrics_port(proc: subprocess.Popen) -> int:
    t0 = time.monotonic()
    while time.monotonic() - t0 < 20:
        line = proc.stderr.readline()
        if "metrics on http://127.0.0.1:" in line:
            return int(line.rsplit(":", 1)[1].split("/")[0])
    raise AssertionError("no metrics address logged")


def samples(text: str) -> dict[str, float]:
    """Parsed with prometheus_client's own parser: name{labels} -> value."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def test_metrics_health_status_state_while_a_commit_waits(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    now = time.time_ns()
    # A is published; B (commit tm 100 s ago) waits for thread 2, which is silent at scn 20
    (live / "redo_1_1.jsonl").write_text(
        lines(*tx("A", 10, "r1", now), *tx("B", 30, "r2", now - 100 * 10**9), {"op": "lwn", "scn": 50})
    )
    (live / "redo_2_1.jsonl").write_text(lines({"op": "lwn", "scn": 20}))
    proc = start(run_cmd(tmp_path, "--metrics-port", "0", "--log-level", "info", "--threads", "1,2"))
    try:
        port = metrics_port(proc)
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
        time.sleep(1.5)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        health = urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5)
        health_doc = json.loads(health.read())
        running = status_json(tmp_path)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    m = samples(text)
    assert m["olr_buffer_transactions_published_total"] == 1
    assert m["olr_buffer_publish_latency_seconds_count"] == 1
    assert 0 <= m["olr_buffer_publish_latency_seconds_sum"] < 30
    assert m["olr_buffer_seconds_behind_source"] >= 100  # B's commit waits for the watermark
    for name in (
        "late_records_total",
        "dead_letters_total",
        "transactions_rolled_back_total",
        "unmatched_compensations_total",
    ):
        assert m[f"olr_buffer_{name}"] == 0, name
    assert any(k.startswith("olr_buffer_build_info{") and 'version="' in k for k in m)
    assert health.status == 200 and health_doc["status"] == "ok"
    assert running["state"] == "running" and running["failure"] is None
    assert running["changefeed"]["source"] == "manifest" and running["changefeed"]["last_tx_seq"] == 0
    assert running["as_of"].endswith("Z") and "T" in running["as_of"]
    stopped = status_json(tmp_path)
    assert stopped["state"] == "stopped"
    assert stopped["checkpoint"]["written"].endswith("Z")
    text_status = cli("status", "--queue", str(tmp_path / "q")).stdout
    assert ": stopped, as of " in text_status and "Nones" not in text_status


def one_transaction(tmp_path: Path) -> Path:
    """``tmp_path/live`` with thread 1 holding transaction A and a heartbeat after it."""
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "r1"), {"op": "lwn", "scn": 20}))
    return live


def test_status_reads_the_changefeed_position_from_its_manifest(tmp_path: Path):
    """Publications after the last checkpoint show at once (a long checkpoint interval)."""
    live = one_transaction(tmp_path)
    proc = start(run_cmd(tmp_path))
    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
    finally:
        assert stop(proc)[0] == 0
    proc = start(run_cmd(tmp_path) + ["--checkpoint-interval", "3600"])  # no checkpoint before the stop
    try:
        with open(live / "redo_1_1.jsonl", "a") as fh:
            fh.write(lines(*tx("B", 30, "r2"), {"op": "lwn", "scn": 40}))
        wait_for_rows(tmp_path / "cf", 2, timeout=20)
        doc = status_json(tmp_path)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert doc["changefeed"]["last_tx_seq"] == 1 and doc["changefeed"]["files"] == 2
    assert doc["changefeed"]["updated"].endswith("Z")


def test_failed_run_is_failed_in_status_and_json_logs(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "r1"), {"op": "lwn", "scn": 20}) + "{not json\n")
    env = {
        "OLR_BUFFER_RUN_QUEUE": str(tmp_path / "q"),
        "OLR_BUFFER_RUN_CHANGEFEED": str(tmp_path / "cf"),
        "OLR_BUFFER_RUN_LOG_FORMAT": "json",
        "OLR_BUFFER_RUN_POLL_INTERVAL": "0.02",
        "OLR_BUFFER_RUN_FLUSH_INTERVAL": "0.2",
    }
    r = cli("--log-level", "debug", "run", str(live), env=env)
    assert r.returncode == 3, r.stderr
    docs = [json.loads(ln) for ln in r.stderr.splitlines()]  # every line, the fatal error too, is JSON
    assert all(d["ts"].endswith("Z") and "T" in d["ts"] for d in docs)
    published = [d for d in docs if d["msg"].startswith("published ")]
    assert published and published[0]["file"].startswith("part-") and published[0]["rows"] == 1
    assert (published[0]["first_tx_seq"], published[0]["last_tx_seq"]) == (0, 0)
    fatal = docs[-1]
    assert fatal["level"] == "critical" and fatal["exit_code"] == 3 and "redo_1_1.jsonl" in fatal["msg"]
    doc = status_json(tmp_path)
    assert doc["state"] == "failed" and doc["failure"]["exit_code"] == 3
    assert "redo_1_1.jsonl" in doc["failure"]["error"]
    assert "failed at " in cli("status", "--queue", str(tmp_path / "q")).stdout


def test_a_killed_run_is_failed_in_status_until_a_run_stops_cleanly(tmp_path: Path):
    """SIGKILL leaves no word of its own: the record a running service keeps says it, so
    that status does not show a killed service as stopped cleanly."""
    one_transaction(tmp_path)
    proc = start(run_cmd(tmp_path))
    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
        assert status_json(tmp_path)["state"] == "running"
    finally:
        proc.kill()
        proc.communicate()
    doc = status_json(tmp_path)
    assert doc["state"] == "failed" and doc["failure"]["killed"] is True and doc["failure"]["pid"] == proc.pid, doc
    assert doc["failure"]["exit_code"] is None and "did not stop cleanly" in doc["failure"]["error"]
    text = cli("status", "--queue", str(tmp_path / "q")).stdout
    assert ": failed, as of " in text and "ended without a clean stop" in text, text
    proc = start(run_cmd(tmp_path))
    try:
        # the row is there already: wait for this service itself (it holds the queue), not
        # a fixed time, which a loaded machine may spend still starting Python
        deadline = time.monotonic() + 60
        while status_json(tmp_path)["owner"]["pid"] != proc.pid:
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the service did not take its queue within 60s"
            time.sleep(0.05)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    doc = status_json(tmp_path)
    assert doc["state"] == "stopped" and doc["failure"] is None, doc


def test_group_log_level_and_environment(tmp_path: Path):
    live = one_transaction(tmp_path)
    cmd = [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "--log-level",
        "error",
        "run",
        str(live),
        "--queue",
        str(tmp_path / "q"),
        "--changefeed",
        str(tmp_path / "cf"),
        "--flush-interval",
        "0.2",
    ]
    proc = start(cmd)
    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
    finally:
        code, err = stop(proc)
    assert code == 0 and " INFO " not in err and err.strip() == "", err
    # the group's level from the environment; the command's own option wins over it
    r = cli("status", "--queue", str(tmp_path / "nowhere"), env={"OLR_BUFFER_LOG_LEVEL": "verbose"})
    assert r.returncode == 2 and "verbose" in r.stderr
    r = cli("status", env={"OLR_BUFFER_STATUS_QUEUE": str(tmp_path / "q"), "OLR_BUFFER_STATUS_JSON": "1"})
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "stopped"


def test_config_on_status_ignores_other_commands_keys(tmp_path: Path):
    cfg = tmp_path / "olr.toml"
    cfg.write_text(f'queue = "{tmp_path / "nowhere"}"\nthreads = [1, 2]\nflush_interval = 1.0\n')
    r = cli("status", "--config", str(cfg))
    assert r.returncode == 1 and "no queue here" in r.stderr, r.stderr
    # replay takes the same file: run's keys (threads, flush_interval) are ignored
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "redo_1_1.jsonl").write_text(lines(*tx("A", 10, "r1")))
    cfg.write_text(
        f'input = "unused"\nqueue = "{tmp_path / "q"}"\nchangefeed = "{tmp_path / "cf"}"\n'
        "threads = [1]\nflush_interval = 1.0\n"
    )
    r = cli("replay", str(tmp_path / "in"), "--config", str(cfg))
    assert r.returncode == 0 and "published 1 transactions" in r.stdout, r.stderr
    cfg.write_text('queue = "q"\nflush_intervall = 1\n')
    r = cli("status", "--config", str(cfg))
    assert r.returncode == 2 and "unknown key(s) flush_intervall" in r.stderr


def test_newest_zst_arriving_in_two_writes_is_waited_for(tmp_path: Path):
    live = one_transaction(tmp_path)
    data = zstandard.ZstdCompressor().compress(lines(*tx("B", 30, "r2"), *tx("C", 40, "r3")).encode())
    proc = start(run_cmd(tmp_path))
    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
        half = len(data) // 2
        target = live / "redo_1_2.jsonl.zst"
        target.write_bytes(data[:half])  # the copy has begun
        time.sleep(1.0)
        assert proc.poll() is None, proc.stderr.read()
        with open(target, "ab") as fh:
            fh.write(data[half:])
        (live / "redo_1_3.jsonl").write_text(lines({"op": "lwn", "scn": 100}))
        wait_for_rows(tmp_path / "cf", 3, timeout=20)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == ["A", "B", "C"]


def test_a_failure_on_a_full_disk_is_still_recorded_over_the_running_record(tmp_path: Path):
    """run fails most often because the queue's disk is full, when no new file can be made:
    the failure is written in place over the record the running service left (whose
    blocks it holds), not lost, so that status does not say 'killed' (or 'stopped')."""
    from olr_buffer.service.failure import read_failure, record_failure, record_running
    from tests.fault_helpers import tmpfs

    q = tmp_path / "q"
    with tmpfs(q, "64k"):
        record_running(str(q))
        assert read_failure(str(q))["killed"] is True
        with open(q / "filler", "wb", buffering=0) as fh:  # every block taken
            try:
                while True:
                    fh.write(b"\0" * 4096)
            except OSError:
                pass
        record_failure(str(q), RuntimeError("q/segments/seg-1.mdb: no space left on device " + "x" * 5000), 1)
        doc = read_failure(str(q))
        assert doc is not None and doc.get("killed") is None and doc["exit_code"] == 1, doc
        assert doc["error"].startswith("q/segments/seg-1.mdb: no space left on device"), doc
        assert not list(q.glob(".*.tmp")), list(q.iterdir())


def test_publish_latency_is_never_negative_when_the_source_clock_is_ahead(tmp_path: Path):
    """A commit whose tm is later than its publication (the source's clock ahead of this
    machine's, or simulated data whose clock runs ahead) has no latency to tell: it is left
    out of the latency summary and counted apart, never a negative quantile."""
    live = tmp_path / "live"
    live.mkdir()
    now = time.time_ns()
    (live / "redo_1_1.jsonl").write_text(
        lines(*tx("A", 10, "r1", now - 10**9), *tx("B", 30, "r2", now + 3600 * 10**9), {"op": "lwn", "scn": 50})
    )
    proc = start(run_cmd(tmp_path, "--metrics-port", "0", "--log-level", "info"))
    try:
        port = metrics_port(proc)
        wait_for_rows(tmp_path / "cf", 2, timeout=20)
        deadline = time.monotonic() + 30
        while True:  # the figures are renewed at most once a second
            m = samples(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())
            # both in a published file (transactions_published_total counts them when the
            # dispatcher hands them over, a flush before the file is published)
            if (
                m.get("olr_buffer_publish_latency_seconds_count") == 1
                and m.get("olr_buffer_publish_latency_clock_ahead_total") == 1
            ):
                break
            assert time.monotonic() < deadline, m
            time.sleep(0.1)
    finally:
        code, err = stop(proc)
    assert code == 0, err
    quantiles = {k: v for k, v in m.items() if k.startswith("olr_buffer_publish_latency_seconds{")}
    assert quantiles and all(v >= 0 for v in quantiles.values()), quantiles
    assert m["olr_buffer_publish_latency_seconds_count"] == 1 and m["olr_buffer_publish_latency_seconds_sum"] >= 1
    assert m["olr_buffer_publish_latency_clock_ahead_total"] == 1
    assert m["olr_buffer_seconds_behind_source"] >= 0


def test_the_age_of_what_is_handed_over_but_not_yet_visible_is_a_metric(tmp_path: Path):
    """transactions_published_total counts a transaction when the dispatcher hands it to the
    changefeed's writer; changefeed_unpublished_seconds says how long the oldest of those not
    yet in a visible file has waited (0 once all are): a flush that does not come shows."""
    from olr_buffer.changes import INFINITE_SCN
    from olr_buffer.runtime import Pipeline, PipelineOptions
    from olr_buffer.service.metrics import render_metrics

    live = one_transaction(tmp_path)
    opts = PipelineOptions(durable=False, reader_processes=False, flush_seconds=3600)
    p = Pipeline(str(live), str(tmp_path / "q"), str(tmp_path / "cf"), opts)
    try:
        p.source.start(follow=False, poll_interval=0.05)
        p.source.join()
        while p.dispatcher.poll():
            pass
        p.dispatcher.publish_ready(INFINITE_SCN)
        time.sleep(0.01)
        handed = samples(render_metrics(p.run_figures()).decode())
        p.sink.flush()
        flushed = samples(render_metrics(p.run_figures()).decode())
    finally:
        p.close()
    assert handed["olr_buffer_transactions_published_total"] == 1
    assert handed["olr_buffer_changefeed_unpublished_seconds"] > 0
    assert flushed["olr_buffer_changefeed_unpublished_seconds"] == 0


def test_the_metrics_render_the_figures_the_runtime_hands_them():
    """service/metrics renders what the runtime took from its pipeline (RunFigures) and
    never looks into the pipeline: figures made here, without one, render as they say;
    a standby's role, once active, with its lease's generation."""
    from olr_buffer.service.metrics import Metrics, RunFigures, render_metrics
    from olr_buffer.service.role import ServiceRole

    figures = RunFigures(
        records_read=7,
        thread_progress={1: 500, 2: 480},
        thread_states={1: "open", 2: "closed"},
        watermark=480,
        watermark_lag=20,
        transactions_published=3,
        latencies=[0.5, 1.0, 2.0],
        lease_generation=4,
        lease_seconds_left=10.0,
    )
    m = samples(render_metrics(figures).decode())
    assert m["olr_buffer_records_appended_total"] == 7
    assert m['olr_buffer_thread_progress_scn{thread="2"}'] == 480
    assert m['olr_buffer_thread_state{state="closed",thread="2"}'] == 1
    assert m['olr_buffer_thread_state{state="open",thread="2"}'] == 0
    assert (m["olr_buffer_watermark_scn"], m["olr_buffer_watermark_lag_scn"]) == (480, 20)
    assert m["olr_buffer_publish_latency_seconds_count"] == 3
    metrics = Metrics()
    assert metrics.tick() and not metrics.tick()  # (due once a second)
    metrics.update(figures, ServiceRole())
    shown = samples(metrics.text().decode())
    assert shown["olr_buffer_lease_generation"] == 4 and shown["olr_buffer_standby"] == 0
