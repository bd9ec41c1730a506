"""Helpers for the end-to-end tests of the ``olr-buffer`` command: run it for real, as a
subprocess, on real directories, and look at its exit code, its output and its files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zstandard

from tests.contract_model import changefeed_files

#: How long one command may take before the test fails instead of hanging.
TIMEOUT = 120

_PUBLISHED = re.compile(r"^published ([0-9,]+) transactions \(([0-9,]+) rows\)", re.MULTILINE)


@dataclass
class Result:
    """What one run of ``olr-buffer`` did."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str

    @property
    def stderr_lines(self) -> list[str]:
        """The lines of stderr, empty ones left out."""
        return [line for line in self.stderr.splitlines() if line.strip()]

    def describe(self) -> str:
        return (
            f"olr-buffer {' '.join(self.args)}\nexit {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )

    def json(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.stdout)
        except ValueError as exc:
            raise AssertionError(f"stdout is not JSON ({exc}):\n{self.describe()}") from None
        return data

    def published(self) -> tuple[int, int]:
        """``(transactions, rows)`` from the ``published N transactions (M rows)`` line."""
        m = _PUBLISHED.search(self.stdout)
        assert m, f"no 'published N transactions (M rows)' line:\n{self.describe()}"
        return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def olr_buffer(
    *args: Any,
    cwd: str | os.PathLike[str] | None = None,
    fault: str | None = None,
    env: dict[str, str] | None = None,
    umask: int | None = None,
    timeout: float = TIMEOUT,
) -> Result:
    """Run ``python -m olr_buffer.cli ARGS`` with stdin closed and stdout/stderr piped
    (so not a terminal: no progress line unless asked), in this environment without
    ``PYTHONWARNINGS`` and ``OLR_BUFFER_FAULT``, plus ``env``; ``fault``: the fault point
    that kills it (``OLR_BUFFER_FAULT``); ``umask``: its umask."""
    argv = [os.fspath(a) for a in args]
    environ = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "OLR_BUFFER_FAULT")}
    environ.update(env or {})
    if fault:
        environ["OLR_BUFFER_FAULT"] = fault
    proc = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=environ,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


def status_json(queue: str | os.PathLike[str]) -> dict[str, Any]:
    """``olr-buffer status --queue QUEUE --json`` (run from the repository), exit 0, as a dict."""
    from tests.paths import ROOT

    return ok(olr_buffer("status", "--queue", queue, "--json", cwd=ROOT)).json()


def ok(result: Result) -> Result:
    """``result``, after checking that the command exited 0."""
    assert result.returncode == 0, result.describe()
    return result


def console_script() -> Path:
    """The ``olr-buffer`` console script installed next to the interpreter."""
    return Path(sys.executable).parent / "olr-buffer"


def part_files(changefeed_dir: str | os.PathLike[str]) -> dict[str, bytes]:
    """Name -> content of every file of the changefeed (``part-*.parquet``)."""
    if not Path(changefeed_dir).is_dir():
        return {}
    return {path.name: path.read_bytes() for path in changefeed_files(changefeed_dir)}


# ---------------------------------------------------------------------------------------
# Reading and rewriting log files, compressed or not


def read_log(path: Path) -> bytes:
    raw = path.read_bytes()
    if path.name.endswith(".zst"):
        return zstandard.ZstdDecompressor().decompress(raw)
    return raw


def write_log(path: Path, content: bytes) -> None:
    if path.name.endswith(".zst"):
        content = zstandard.ZstdCompressor(level=3).compress(content)
    path.write_bytes(content)


def log_lines(path: Path) -> list[bytes]:
    """The lines of a log file, each with its ``\\n``."""
    return read_log(path).splitlines(keepends=True)


def log_path(input_dir: Path, thread: int, sequence: int) -> Path:
    """The file of ``thread``/``sequence`` in ``input_dir``, compressed or not."""
    for name in (f"redo_{thread}_{sequence}.jsonl", f"redo_{thread}_{sequence}.jsonl.zst"):
        if (input_dir / name).is_file():
            return input_dir / name
    raise FileNotFoundError(f"{input_dir}: no file for thread {thread} sequence {sequence}")


def sequences(input_dir: Path, thread: int) -> list[int]:
    """The sequences of ``thread`` present in ``input_dir``, ascending."""
    pattern = re.compile(rf"^redo_{thread}_([0-9]+)\.jsonl(\.zst)?$")
    return sorted(int(m.group(1)) for p in input_dir.iterdir() if (m := pattern.match(p.name)))
