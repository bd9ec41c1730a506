"""``olr-buffer run olr://...`` and the stand-in as processes, for the tests that kill
them."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.paths import ROOT
from tests.processes import start_stream_run, stream_run_args


def run_cmd(uri: str, tmp: Path, *extra: str) -> list[str]:
    return stream_run_args(uri, tmp, *extra)


def start_run(uri: str, tmp: Path, *extra: str) -> subprocess.Popen:
    return start_stream_run(uri, tmp, *extra)


def run_once(uri: str, tmp: Path, *extra: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(run_cmd(uri, tmp, *extra), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def service_log(tmp: Path) -> str:
    return (tmp / "service.log").read_text(errors="replace")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> int:
    proc.send_signal(sig)
    return proc.wait(60)


def error_line(proc: subprocess.CompletedProcess, *words: str) -> str:
    """The one error line of a run that failed, with each of ``words``."""
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    errors = [line for line in proc.stderr.splitlines() if line.startswith("olr-buffer: error:")]
    assert len(errors) == 1 and "Traceback" not in out, out
    for w in words:
        assert w in errors[0], errors[0]
    return errors[0]


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class SenderProcess:
    """``python -m tests.sources.olr.standin`` on ``port``, its confirmed position kept in
    ``state`` (so that a SIGKILL of it is a restart of OpenLogReplicator)."""

    def __init__(self, stream: Path, port: int, state: Path, rate: float | None = None) -> None:
        cmd = [
            sys.executable,
            "-m",
            "tests.sources.olr.standin",
            str(stream),
            "--port",
            str(port),
            "--state",
            str(state),
        ]
        if rate is not None:
            cmd += ["--rate", str(rate)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
        ready = threading.Event()
        lines: list[str] = []

        def read():
            for line in self.proc.stdout:
                lines.append(line)
                if line.startswith("listening"):
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        while not ready.wait(0.1):
            assert time.monotonic() < deadline, "the stand-in did not start"
        assert self.proc.poll() is None, "the stand-in stopped:\n" + "".join(lines)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
