"""`olr-buffer run` against live logs: a writer process, kills, restarts, SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olr_buffer.simulate import simulate
from tests.cli.conftest import status_json
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout, expected_changefeed, load_changefeed
from tests.live_writer import start_live_writer
from tests.processes import run_args

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`

ROOT = Path(__file__).resolve().parent.parent


def run_cmd(tmp: Path, *extra: str) -> list[str]:
    return run_args(
        tmp / "live",
        tmp,
        "--flush-interval",
        "0.3",
        "--poll-interval",
        "0.02",
        "--checkpoint-interval",
        "0.5",
        "--segment-size",
        "128KiB",
        "--log-level",
        "warning",
        *extra,
    )


def start(cmd: list[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def published_rows(cf: Path) -> int:
    try:
        return len(load_changefeed(cf))
    except FileNotFoundError:
        return 0


def wait_for_rows(cf: Path, n: int, timeout: float = 60.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if published_rows(cf) >= n:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"changefeed has {published_rows(cf)} rows after {timeout}s, expected {n}")


def wait_started(proc: subprocess.Popen, cf: Path, timeout: float = 60.0) -> None:
    """Until the service has opened its queue and changefeed (it creates ``cf/_olr_buffer``)."""
    deadline = time.monotonic() + timeout
    while not (cf / "_olr_buffer").is_dir():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, f"the service did not start within {timeout}s"
        time.sleep(0.05)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> tuple[int, str]:
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


@pytest.mark.slow
def test_live_writer_kill_and_restart_then_sigterm(tmp_path: Path):
    simulate(tmp_path / "stage", threads=3, transactions=700, seed=11, records_per_file=600, compress_archived=False)
    (tmp_path / "live").mkdir()
    # the service starts before any log exists: threads in play given explicitly
    service = start(run_cmd(tmp_path, "--threads", "1,2,3"))
    writer = start_live_writer(tmp_path / "stage", tmp_path / "live", 4000, seed=3)
    time.sleep(1.5)
    assert service.poll() is None
    os.kill(service.pid, signal.SIGKILL)
    service.wait()
    service = start(run_cmd(tmp_path, "--threads", "1,2,3"))  # resumes from the queue while the writer goes on
    assert writer.wait(timeout=120) == 0
    expected = expected_changefeed(tmp_path / "live")
    drained = wait_for_rows(tmp_path / "cf", len(expected.rows))
    code, err = stop(service)
    assert code == 0, err
    check_changefeed_layout(tmp_path / "cf")
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected.rows)
    assert drained < 30, f"drained {drained:.1f}s after the last write"


def test_thread_writing_only_heartbeats_does_not_hold_back_the_others(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    recs = [
        {"op": "begin", "scn": 10, "xid": "A"},
        {"op": "insert", "scn": 11, "xid": "A", "owner": "O", "table": "T", "rid": "r1", "after": {"x": 1}},
        {"op": "commit", "scn": 12, "xid": "A"},
        {"op": "lwn", "scn": 20},
    ]
    (live / "redo_1_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (live / "redo_2_1.jsonl").write_text(json.dumps({"op": "lwn", "scn": 5}) + "\n")
    service = start(run_cmd(tmp_path))
    try:
        time.sleep(1.5)
        assert published_rows(tmp_path / "cf") == 0  # thread 2 is at scn 5: commit 12 must wait
        with open(live / "redo_2_1.jsonl", "a") as fh:
            fh.write(json.dumps({"op": "lwn", "scn": 15}) + "\n")  # an idle thread's heartbeat
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
    finally:
        code, err = stop(service, signal.SIGINT)
    assert code == 0, err
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == ["A"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_the_whole_process_group_is_a_clean_stop(tmp_path: Path, sig: int):
    """Ctrl-C in a terminal, and systemd's stop (KillMode=control-group), signal every
    process of the service: its reader processes and their fork server too. The service
    stops cleanly (exit 0), not with 'the reader process ... failed/died' (exit 1)."""
    simulate(tmp_path / "live", threads=2, transactions=300, seed=4, records_per_file=400, compress_archived=False)
    service = subprocess.Popen(
        run_cmd(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True
    )
    try:
        expected = expected_changefeed(tmp_path / "live")
        wait_for_rows(tmp_path / "cf", len(expected.rows))
        time.sleep(0.3)  # idle, following
        os.killpg(service.pid, sig)
        _, err = service.communicate(timeout=30)
    finally:
        if service.poll() is None:
            os.killpg(service.pid, signal.SIGKILL)
            service.wait()
    assert service.returncode == 0, err
    assert "Traceback" not in err and "reader process" not in err, err
    assert_changefeed_equal(load_changefeed(tmp_path / "cf"), expected.rows)
    assert status_json(tmp_path / "q")["state"] == "stopped"


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (``SigCgt`` in /proc/PID/status)."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            mask = next(int(ln.split()[1], 16) for ln in fh if ln.startswith("SigCgt:"))
    except (FileNotFoundError, StopIteration):
        return False
    return bool(mask & (1 << (signal.SIGTERM - 1)))


@pytest.mark.parametrize("command", ["run", "replay"])
def test_a_sigterm_while_the_command_starts_is_not_lost(tmp_path: Path, command: str):
    """Issue 29.8: a SIGTERM in the first 0.1-0.2 s (imports) ended `run` with exit 143 and
    no log line. From the moment the process can catch it (its first import), `run` stops
    cleanly (exit 0, logged), `replay` ends as terminated (exit 143, one line)."""
    simulate(tmp_path / "live", threads=2, transactions=50, seed=5, records_per_file=400, compress_archived=False)
    cmd = (
        run_cmd(tmp_path, "--log-level", "info")
        if command == "run"
        else [
            sys.executable,
            "-m",
            "olr_buffer.cli",
            "replay",
            str(tmp_path / "live"),
            "--queue",
            str(tmp_path / "q"),
            "--changefeed",
            str(tmp_path / "cf"),
        ]
    )
    proc = start(cmd)
    deadline = time.monotonic() + 60
    while not _catches_sigterm(proc.pid):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the process never caught SIGTERM"
        time.sleep(0.0005)
    code, err = stop(proc)
    if command == "run":
        assert code == 0, err
        assert "received SIGTERM, stopping" in err and "stopped cleanly" in err, err
    else:
        assert code == 143, err
        assert [ln for ln in err.splitlines() if ln.strip()] == [
            "olr-buffer: terminated (SIGTERM); run the same command again: it resumes"
        ], err


def test_sequences_archived_right_after_their_log_switch(tmp_path: Path):
    """The capture switches to sequence s+1 and at once archives s as .jsonl.zst (temporary
    name, rename, plain file removed), while the service may still hold s: it reads on,
    each transaction once, and does not stop."""
    import zstandard

    live = tmp_path / "live"
    live.mkdir()

    def tx(i: int) -> str:
        scn = 100 * i
        recs = [
            {"op": "begin", "scn": scn, "xid": f"X{i}"},
            {
                "op": "insert",
                "scn": scn + 1,
                "xid": f"X{i}",
                "owner": "O",
                "table": "T",
                "rid": f"r{i}",
                "after": {"i": i},
            },
            {"op": "commit", "scn": scn + 2, "xid": f"X{i}", "tm": scn},
            {"op": "lwn", "scn": scn + 2},
        ]
        return "".join(json.dumps(r) + "\n" for r in recs)

    (live / "redo_1_1.jsonl").write_text(tx(1))
    service = start(run_cmd(tmp_path))
    try:
        wait_for_rows(tmp_path / "cf", 1, timeout=30)
        for seq in range(2, 12):
            (live / f"redo_1_{seq}.jsonl").write_text(tx(seq))
            old = live / f"redo_1_{seq - 1}.jsonl"
            tmp = live / f"redo_1_{seq - 1}.jsonl.zst.tmp"
            tmp.write_bytes(zstandard.ZstdCompressor().compress(old.read_bytes()))
            os.replace(tmp, live / f"redo_1_{seq - 1}.jsonl.zst")
            old.unlink()
            time.sleep(0.01 * (seq % 4))
        deadline = time.monotonic() + 30
        while published_rows(tmp_path / "cf") < 11 and service.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        code, err = stop(service)
    assert code == 0, err
    assert published_rows(tmp_path / "cf") == 11, (sorted(os.listdir(live)), err)
    assert [r["xid"] for r in load_changefeed(tmp_path / "cf")] == [f"X{i}" for i in range(1, 12)]


def test_second_service_on_the_same_queue_is_refused(tmp_path: Path):
    (tmp_path / "live").mkdir()
    (tmp_path / "live" / "redo_1_1.jsonl").write_text(json.dumps({"op": "lwn", "scn": 1}) + "\n")
    first = start(run_cmd(tmp_path))
    try:
        wait_started(first, tmp_path / "cf")
        second = subprocess.run(run_cmd(tmp_path), capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert second.returncode == 1
        lines = [ln for ln in second.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and f"queue is in use by another process (pid {first.pid})" in lines[0], second.stderr
    finally:
        code, err = stop(first)
    assert code == 0, err


def test_config_file_gives_defaults_and_flags_win(tmp_path: Path):
    live = tmp_path / "live"
    live.mkdir()
    (live / "redo_1_1.jsonl").write_text(json.dumps({"op": "lwn", "scn": 1}) + "\n")
    cfg = tmp_path / "olr.toml"
    cfg.write_text(
        f'input = "{live}"\nqueue = "{tmp_path / "q"}"\nchangefeed = "{tmp_path / "wrong"}"\n'
        'threads = [1]\nflush_interval = 0.2\nlog_level = "warning"\n'
    )
    proc = start(
        [sys.executable, "-m", "olr_buffer.cli", "run", "--config", str(cfg), "--changefeed", str(tmp_path / "cf")]
    )
    try:
        wait_started(proc, tmp_path / "cf")
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert (tmp_path / "cf" / "_olr_buffer").is_dir() and not (tmp_path / "wrong").exists()
    bad = tmp_path / "bad.toml"
    bad.write_text('queue = "q"\nflush_intervall = 1\n')
    r = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", "run", "--config", str(bad)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "unknown key(s) flush_intervall" in r.stderr


def test_metrics_on_loopback(tmp_path: Path):
    import urllib.request

    live = tmp_path / "live"
    live.mkdir()
    recs = [
        {"op": "begin", "scn": 10, "xid": "A"},
        {"op": "insert", "scn": 11, "xid": "A", "owner": "O", "table": "T", "rid": "r1", "after": {"x": 1}},
        {"op": "commit", "scn": 12, "xid": "A", "tm": time.time_ns()},
        {"op": "lwn", "scn": 20},
    ]
    (live / "redo_1_1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    proc = start(run_cmd(tmp_path, "--metrics-port", "0", "--log-level", "info"))
    try:
        port = None
        t0 = time.monotonic()
        while port is None and time.monotonic() - t0 < 20:
            line = proc.stderr.readline()
            if "metrics on http://127.0.0.1:" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
        assert port, "no metrics address logged"
        wait_for_rows(tmp_path / "cf", 1, timeout=20)
        time.sleep(1.2)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    finally:
        code, _ = stop(proc)
    assert code == 0
    assert "olr_buffer_transactions_published_total 1" in text
    assert 'olr_buffer_thread_progress_scn{thread="1"} 20' in text
    assert "olr_buffer_publish_latency_seconds_count 1" in text
