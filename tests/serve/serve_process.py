"""``olr-buffer serve`` as a child process, for the tests that start, stop and kill it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
from pathlib import Path

from tests.paths import CLI, ROOT
from tests.serve.receiver import Receiver


class ServeProcess:
    """``olr-buffer serve`` in a child process, its JSON log collected by a thread."""

    def __init__(self, cf: Path | str, *extra: str, database: str = "ORCL", env: dict | None = None) -> None:
        self.proc = subprocess.Popen(
            [
                *CLI,
                "serve",
                str(cf),
                "--listen",
                "127.0.0.1:0",
                "--database",
                database,
                "--log-format",
                "json",
                "--poll-interval",
                "0.05",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={**os.environ, **env} if env else None,
        )
        self.lines: list[str] = []
        self._ready = threading.Event()
        self.port: int | None = None
        self.collector = threading.Thread(target=self._collect, daemon=True)  # (ends with stderr)
        self.collector.start()
        if not self._ready.wait(60):
            self.proc.kill()
            raise AssertionError("serve did not start listening:\n" + "".join(self.lines))
        assert self.port is not None, "serve stopped before listening:\n" + "".join(self.lines)

    def _collect(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line)
            if self.port is None:
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if "listen" in doc:
                    self.port = int(doc["listen"].rpartition(":")[2])
                    self._ready.set()
        self._ready.set()

    def receiver(self) -> Receiver:
        return Receiver("127.0.0.1", self.port)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        return self.proc.wait(30)

    @property
    def log(self) -> str:
        return "".join(self.lines)


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
