"""Helpers and fixtures of the fault tests: each failure is injected for real, then fixed,
and the same command must finish the job (the changefeed exactly the reference model's).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from olr_buffer.errors import EXIT_BAD_INPUT
from olr_buffer.simulate import simulate
from tests.cli.conftest import Result, log_path, ok, olr_buffer, read_log, write_log
from tests.contract_model import (
    ModelResult,
    assert_changefeed_equal,
    changefeed_files,
    check_changefeed_layout,
    expected_changefeed,
    load_changefeed,
)

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------------------------------
# Helpers


def cli(*args: Any, umask: int | None = None) -> Result:
    """Run ``python -m olr_buffer.cli ARGS``; stdout and stderr piped (no progress line)."""
    return olr_buffer(*args, cwd=ROOT, umask=umask)


def replay(input_dir: Path, queue: Path, cf: Path, *extra: Any, umask: int | None = None) -> Result:
    return cli("replay", input_dir, "--queue", queue, "--changefeed", cf, *extra, umask=umask)


def one_line_error(result: Result, *parts: str, code: int | None = None) -> str:
    """Non-zero exit (``code`` if given), exactly one non-empty line on stderr, holding
    every part, and no traceback."""
    assert result.returncode != 0, result.describe()
    if code is not None:
        assert result.returncode == code, result.describe()
    lines = result.stderr_lines
    assert len(lines) == 1, result.describe()
    assert lines[0].startswith("olr-buffer: error: "), result.describe()
    for part in parts:
        assert part in lines[0], f"{part!r} not in the error line:\n{result.describe()}"
    return lines[0]


def tmp_files(cf: Path) -> list[str]:
    """olr-buffer's temporary files in the changefeed: in ``_olr_buffer/tmp/``, and any
    at the top level (where versions before it wrote them)."""
    if not cf.is_dir():
        return []
    tmp = cf / "_olr_buffer" / "tmp"
    inside = sorted(f"_olr_buffer/tmp/{n}" for n in os.listdir(tmp)) if tmp.is_dir() else []
    return inside + sorted(n for n in os.listdir(cf) if n.startswith(".tmp-"))


def top_level_parquet(cf: Path) -> list[str]:
    """The names ``CF/*.parquet`` matches in DuckDB and Polars, whose globs (unlike the
    shell's) match names starting with a dot too."""
    return sorted(n for n in os.listdir(cf) if fnmatch.fnmatch(n, "*.parquet")) if cf.is_dir() else []


def part_names(cf: Path) -> list[str]:
    return sorted(p.name for p in changefeed_files(cf)) if cf.is_dir() else []


def flip_a_data_byte(path: Path, column: str = "after") -> None:
    """Flip one bit in the middle of ``column``'s first column chunk: inside a data page,
    past its header; the footer stays as it was."""
    meta = pq.read_metadata(path)
    chunk = meta.row_group(0).column(meta.schema.names.index(column))
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    at = start + chunk.total_compressed_size * 2 // 3
    data = bytearray(path.read_bytes())
    data[at] ^= 0x10
    path.write_bytes(bytes(data))
    assert pq.read_metadata(path).num_rows == meta.num_rows  # the footer still reads


def no_tmp_files(cf: Path) -> None:
    left = tmp_files(cf)
    assert not left, f"temporary files left in the changefeed: {left}"


def published_prefix(cf: Path, model: ModelResult) -> int:
    """The changefeed is a gapless prefix of the model's, in whole transactions; returns
    the number of transactions in it."""
    if not cf.is_dir():
        return 0
    check_changefeed_layout(cf)
    rows = load_changefeed(cf)
    assert_changefeed_equal(rows, model.rows[: len(rows)])
    if len(rows) < len(model.rows):
        assert model.rows[len(rows)]["op_seq"] == 0, "a transaction is cut short"
    return rows[-1]["tx_seq"] + 1 if rows else 0


def exact(cf: Path, model: ModelResult) -> None:
    check_changefeed_layout(cf)
    assert_changefeed_equal(load_changefeed(cf), model.rows)
    no_tmp_files(cf)


def part_bytes(cf: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in changefeed_files(cf)} if cf.is_dir() else {}


def dumps(rec: dict[str, Any]) -> bytes:
    return json.dumps(rec, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def replace_line(
    input_dir: Path,
    thread: int,
    seq: int,
    make_bad: Callable[[dict, bytes], bytes],
    wanted: Callable[[dict], bool] = lambda r: True,
    near: float = 0.5,
) -> tuple[Path, int, bytes, bytes]:
    """Replace the line of ``thread``/``seq`` nearest ``near`` (a fraction of the file)
    that ``wanted`` accepts by ``make_bad(record, raw)``. Returns (path, line number,
    the file's original content, the bad line)."""
    path = log_path(input_dir, thread, seq)
    original = read_log(path)
    lines = original.splitlines(keepends=True)
    mid = int(len(lines) * near)
    index = next(i for i in sorted(range(len(lines)), key=lambda i: abs(i - mid)) if wanted(json.loads(lines[i])))
    bad = make_bad(json.loads(lines[index]), lines[index])
    assert bad.endswith(b"\n") and bad != lines[index]
    write_log(path, b"".join(lines[:index] + [bad] + lines[index + 1 :]))
    return path, index + 1, original, bad


def not_lwn(rec: dict) -> bool:
    return rec["op"] != "lwn"


def is_dml(rec: dict) -> bool:
    return rec["op"] in ("insert", "update", "delete") and not rec.get("rollback")


def fail_then_fix(
    root: Path, fix: Callable[[], None], *parts: str, code: int = EXIT_BAD_INPUT, extra: tuple[str, ...] = ()
) -> str:
    """Replay: one-line error; what was published is the model's start; fix; replay
    again: exactly the model, the files of the failed run untouched."""
    inp, q, cf = root / "input", root / "queue", root / "changefeed"
    line = one_line_error(replay(inp, q, cf, *extra), *parts, code=code)
    no_tmp_files(cf)
    fix()
    model = expected_changefeed(inp)
    published = published_prefix(cf, model)
    assert published < model.committed
    before = part_bytes(cf)
    fixed = ok(replay(inp, q, cf, *extra, "--json")).json()
    exact(cf, model)
    after = part_bytes(cf)
    assert {n: after.get(n) for n in before} == before, "a published file changed or went away"
    assert fixed["transactions_published"] + fixed["already_published"] >= model.committed - published
    assert fixed["next_tx_seq"] == model.committed
    return line


@pytest.fixture(scope="module")
def small_base(tmp_path_factory) -> Path:
    """2 threads, archived (.zst) sequences and a last plain one per thread."""
    out = tmp_path_factory.mktemp("faults-small") / "input"
    simulate(out, threads=2, transactions=200, seed=7, records_per_file=100)
    return out


@pytest.fixture
def work(small_base: Path, tmp_path: Path) -> Path:
    shutil.copytree(small_base, tmp_path / "input")
    return tmp_path


# ---------------------------------------------------------------------------------------
# Disk full, for real: small tmpfs mounts


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs on {path}: {mounted.stderr.strip()}")
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True)


def grow(path: Path, size: str = "200m") -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def big_base(tmp_path_factory) -> Path:
    """A workload whose changefeed (about 760 KB) and queue (about 900 KB) do not fit in 400 KB."""
    out = tmp_path_factory.mktemp("faults-big") / "input"
    simulate(out, threads=2, transactions=1500, seed=9, records_per_file=400)
    return out


@pytest.fixture(scope="module")
def big_model(big_base: Path) -> ModelResult:
    return expected_changefeed(big_base)


FULL_ARGS = ("--file-rows", "3000", "--segment-size", "128KiB")
