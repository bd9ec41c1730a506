"""Bad input, faults and safety (issue 7): each failure injected for real.

Every test runs the real ``olr-buffer`` command (or a reader on real files), checks the
exit code and the one-line message, then fixes the cause and checks that the same
command finishes the job: the changefeed is exactly the reference model's
(``tests/contract_model.py``), nothing lost, nothing twice.

The disk-full tests mount small tmpfs file systems (root only; skipped otherwise).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import lmdb
import pytest

from olr_buffer.changes import INSERT, ROW_FIELDS, decode_record, read_summary
from olr_buffer.errors import EXIT_BAD_INPUT
from olr_buffer.reader.errors import InputError
from olr_buffer.reader.files import scan
from olr_buffer.reader.dead_letters import DeadLetters
from olr_buffer.reader.position import load_positions
from olr_buffer.reader.thread_reader import MAX_LINE_BYTES, ThreadReader
from olr_buffer.simulate import simulate
from olr_buffer.txbuffer import LmdbQueue, MemoryQueue
from olr_buffer.txbuffer.block import HEADER_SIZE, key_index, thread_codec
from tests.cli.conftest import Result, log_lines, log_path, ok, read_log, sequences, write_log
from tests.contract_model import (
    ModelResult,
    assert_changefeed_equal,
    changefeed_files,
    check_changefeed_layout,
    expected_changefeed,
    load_changefeed,
)

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT = 120


# ---------------------------------------------------------------------------------------
# Helpers


def cli(*args: Any, umask: int | None = None) -> Result:
    """Run ``python -m olr_buffer.cli ARGS``; stdout and stderr piped (no progress line)."""
    argv = [os.fspath(a) for a in args]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS", "OLR_BUFFER_FAULT")}
    proc = subprocess.run(
        [sys.executable, "-m", "olr_buffer.cli", *argv], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=TIMEOUT, cwd=ROOT, env=env, preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
    )
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


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


def no_tmp_files(cf: Path) -> None:
    if cf.is_dir():
        left = [n for n in os.listdir(cf) if n.startswith(".tmp-")]
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


def replace_line(input_dir: Path, thread: int, seq: int, make_bad: Callable[[dict, bytes], bytes],
                 wanted: Callable[[dict], bool] = lambda r: True, near: float = 0.5) -> tuple[Path, int, bytes, bytes]:
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
    write_log(path, b"".join(lines[:index] + [bad] + lines[index + 1:]))
    return path, index + 1, original, bad


def not_lwn(rec: dict) -> bool:
    return rec["op"] != "lwn"


def is_dml(rec: dict) -> bool:
    return rec["op"] in ("insert", "update", "delete") and not rec.get("rollback")


def fail_then_fix(root: Path, fix: Callable[[], None], *parts: str, code: int = EXIT_BAD_INPUT,
                  extra: tuple[str, ...] = ()) -> str:
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
# Integers out of range


OUT_OF_RANGE = [
    pytest.param("scn", 1 << 63, not_lwn, id="scn-2^63"),
    pytest.param("scn", -1, lambda r: True, id="scn-negative"),
    pytest.param("scn", 10**30, lambda r: True, id="scn-30-digits"),
    pytest.param("sub", -1, lambda r: True, id="sub-negative"),
    pytest.param("sub", 1 << 63, lambda r: True, id="sub-2^63"),
    pytest.param("tm", 1 << 63, not_lwn, id="tm-2^63"),
    pytest.param("tm", -(1 << 63) - 1, not_lwn, id="tm-below-int64"),
    pytest.param("obj", 1 << 63, is_dml, id="obj-2^63"),
    pytest.param("obj", -(10**25), is_dml, id="obj-25-digits"),
]


@pytest.mark.parametrize("field, value, wanted", OUT_OF_RANGE)
def test_integer_out_of_range_stops_the_reader_at_its_line(work: Path, field: str, value: int, wanted) -> None:
    """A reader on real files: ``FILE:LINE: field 'F' out of range: V (allowed lo..hi)``,
    every line before it queued, the position pointing at it."""
    inp = work / "input"
    path, lineno, original, _ = replace_line(inp, 1, 2, lambda r, raw: dumps({**r, field: value}), wanted)
    with LmdbQueue(work / "q") as q:
        with pytest.raises(InputError) as info:
            ThreadReader(q, str(inp), 1, scan(str(inp))[1], None, block_records=7).read_to_end()
        text = str(info.value)
        assert text.startswith(f"{path}:{lineno}: field {field!r} out of range: {value} (allowed "), text
        pos = load_positions(q.meta_items())[1]
        assert (pos.sequence, pos.line, pos.finished) == (2, lineno - 1, False)
    write_log(path, original)
    with LmdbQueue(work / "q") as q:
        ThreadReader(q, str(inp), 1, scan(str(inp))[1], load_positions(q.meta_items())[1]).read_to_end()
        assert load_positions(q.meta_items())[1].finished


def test_negative_integers_beyond_64_bits_stay_exact(work: Path) -> None:
    # 19 digits each, no run of 20 anywhere on the line: the orjson path
    values = {"N1": -(1 << 63) - 1, "N2": -9999999999999999999, "P": (1 << 63), "P2": 9999999999999999999}

    def make(rec: dict, raw: bytes) -> bytes:
        line = dumps({**rec, "after": {**rec["after"], **values}})
        assert not re.search(rb"[0-9]{20}", line), line
        return line

    replace_line(work / "input", 1, 2, make, _has_after)
    ok(replay(work / "input", work / "queue", work / "changefeed"))
    exact(work / "changefeed", expected_changefeed(work / "input"))
    rows = [r for r in load_changefeed(work / "changefeed") if r["after"] and "N1" in r["after"]]
    assert len(rows) == 1 and {k: rows[0]["after"][k] for k in values} == values, rows


@pytest.mark.parametrize("field, value", [("scn", (1 << 63) - 1), ("sub", (1 << 63) - 1), ("tm", -(1 << 63)),
                                          ("obj", (1 << 63) - 1), ("obj", -(1 << 63)), ("tm", None), ("sub", None)])
def test_integer_at_the_bounds_is_accepted(tmp_path: Path, field: str, value: int | None) -> None:
    rec = {"op": "insert", "scn": 5, "xid": "x", "owner": "O", "table": "T", "rid": "R", "after": {"A": 1}, field: value}
    (tmp_path / "redo_1_1.jsonl").write_bytes(dumps(rec))
    q = MemoryQueue()
    ThreadReader(q, str(tmp_path), 1, scan(str(tmp_path))[1], None).read_to_end()
    (stored,) = [decode_record(r) for r in list(q.read_block(0))[1:]]
    got = dict(zip(ROW_FIELDS, stored))
    assert got[field] == (value if value is not None else {"tm": None, "sub": 0}[field])
    assert (got["code"], got["owner"], got["table"], got["rid"], got["after"]) == (INSERT, "O", "T", "R", '{"A":1}')


@pytest.mark.parametrize("field, value", [("scn", 1 << 63), ("tm", 10**25)], ids=["scn-2^63", "tm-25-digits"])
def test_integer_out_of_range_cli_fail_then_fix(work: Path, field: str, value: int) -> None:
    path, lineno, original, _ = replace_line(work / "input", 1, 2, lambda r, raw: dumps({**r, field: value}), not_lwn)
    fail_then_fix(work, lambda: write_log(path, original), f"{path}:{lineno}: ", f"field {field!r} out of range")


# ---------------------------------------------------------------------------------------
# Lines longer than the limit


def _lines(n: int, start: int = 100) -> list[bytes]:
    return [dumps({"op": "begin", "scn": start, "xid": "X"})] + [
        dumps({"op": "insert", "scn": start + i, "xid": "X", "owner": "O", "table": "T", "rid": f"r{i}", "after": {"i": i}})
        for i in range(1, n)]


def _queued(q) -> list[tuple[int, int]]:
    out, index = [], q.first_index
    while index < q.next_index:
        block = q.read_block(index)
        out.extend(tuple(decode_record(block.record(i))[3:5]) for i in range(1, block.count))
        index = block.end
    return out


@pytest.mark.parametrize("newline", [True, False], ids=["with-newline", "last-line-without-newline"])
def test_line_longer_than_the_limit_is_an_input_error(tmp_path: Path, newline: bool) -> None:
    good = _lines(6)
    long_line = b'{"op":"lwn","scn":103,"pad":"' + b"x" * 5000 + b'"}' + (b"\n" if newline else b"")
    path = tmp_path / "redo_1_1.jsonl"
    path.write_bytes(b"".join(good[:4]) + long_line + (b"".join(good[4:]) if newline else b""))
    q = MemoryQueue()
    with pytest.raises(InputError) as info:
        ThreadReader(q, str(tmp_path), 1, scan(str(tmp_path))[1], None, max_line_bytes=1000).read_to_end()
    assert info.value.message == f"{path}:5: line longer than 1000 bytes"
    assert info.value.hint.startswith("a quick scan of the rest of this file found no other bad line")
    assert _queued(q) == [(1, n) for n in range(1, 5)]
    # a line just under the limit is fine
    short = b'{"op":"lwn","scn":103,"pad":"' + b"x" * 900 + b'"}\n'
    path.write_bytes(b"".join(good[:4]) + short + b"".join(good[4:]))
    q2 = MemoryQueue()
    ThreadReader(q2, str(tmp_path), 1, scan(str(tmp_path))[1], None, max_line_bytes=1000).read_to_end()
    assert _queued(q2) == [(1, n) for n in (1, 2, 3, 4, 6, 7)]  # line 5 is an lwn


def test_line_longer_than_the_limit_goes_to_the_dead_letters_whole(tmp_path: Path) -> None:
    good = _lines(6)
    long_line = b'{"op":"lwn","scn":103,"pad":"' + b"x" * 5000 + b'"}\n'
    path = tmp_path / "in" / "redo_1_1.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join(good[:4]) + long_line + long_line + b"".join(good[4:]))
    dead = DeadLetters(str(tmp_path / "dead.jsonl"))
    q = MemoryQueue()
    ThreadReader(q, str(path.parent), 1, scan(str(path.parent))[1], None, max_line_bytes=1000,
                 dead_letters=dead).read_to_end()
    dead.close()
    letters = [json.loads(x) for x in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["file"], d["line"], d["reason"]) for d in letters] == [
        (str(path), 5, "line longer than 1000 bytes"), (str(path), 6, "line longer than 1000 bytes")]
    assert all(d["raw"] == long_line.decode() for d in letters)
    assert _queued(q) == [(1, n) for n in (1, 2, 3, 4, 7, 8)]


def test_line_longer_than_64_mib_cli_fail_then_fix(work: Path) -> None:
    """The real limit (64 MiB), through the command line: a 65 MiB line in the middle of
    thread 1's last (plain) log."""
    inp = work / "input"
    last = sequences(inp, 1)[-1]
    pad = MAX_LINE_BYTES + (1 << 20)

    def huge(rec: dict, raw: bytes) -> bytes:
        return raw.rstrip(b"\n")[:-1] + b',"pad":"' + b"x" * pad + b'"}\n'

    path, lineno, original, _ = replace_line(inp, 1, last, huge, not_lwn)
    assert path.name.endswith(".jsonl")
    t0 = time.monotonic()
    fail_then_fix(work, lambda: write_log(path, original), f"{path}:{lineno}: ",
                  f"line longer than {MAX_LINE_BYTES} bytes")
    assert time.monotonic() - t0 < 30


# ---------------------------------------------------------------------------------------
# Invalid UTF-8 and unpaired surrogates inside string values


BIG = b"123456789012345678901234567"  # more than 64 bits: the line goes through Python's json


def _in_after(raw_value: bytes, big: bool) -> Callable[[dict, bytes], bytes]:
    def make(rec: dict, raw: bytes) -> bytes:
        obj = {k: v for k, v in rec.items() if k != "after"}
        head = json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()[:-1]
        after = b'{"TXT":"ab' + raw_value + b'cd"' + (b',"BIG":' + BIG if big else b"") + b"}"
        return head + b',"after":' + after + b"}\n"
    return make


def _has_after(rec: dict) -> bool:
    return rec["op"] in ("insert", "update") and not rec.get("rollback")


@pytest.mark.parametrize("bad, big", [
    (b"\xff", False), (b"\xc3", False), (b"\xed\xa0\x80", False),
    (b"\xff", True), (b"\xc3\x28", True), (b"\xed\xa0\x80", True),
], ids=["ff", "truncated-2-byte", "encoded-surrogate", "ff-stdlib", "bad-continuation-stdlib",
        "encoded-surrogate-stdlib"])
def test_invalid_utf8_inside_a_value_cli_fail_then_fix(work: Path, bad: bytes, big: bool) -> None:
    path, lineno, original, _ = replace_line(work / "input", 2, 2, _in_after(bad, big), _has_after)
    fail_then_fix(work, lambda: write_log(path, original), f"{path}:{lineno}: ", "invalid UTF-8")


def test_valid_multibyte_and_escapes_inside_values_are_kept(work: Path) -> None:
    """Control: non-ASCII text, a valid surrogate pair escape and a 27-digit integer in the
    same value are accepted and reach the changefeed unchanged."""
    path, lineno, _, bad = replace_line(work / "input", 2, 2, _in_after("é€😀\\ud83d\\ude00".encode(), True), _has_after)
    ok(replay(work / "input", work / "queue", work / "changefeed"))
    model = expected_changefeed(work / "input")
    exact(work / "changefeed", model)
    assert any(r["after"] == {"TXT": "abé€😀😀cd", "BIG": int(BIG)} for r in load_changefeed(work / "changefeed"))


def test_lone_surrogate_escape_inside_a_value_cli_fail_then_fix(work: Path) -> None:
    """On the stdlib-json path (the line holds 20+ digits) too: exit 3, FILE:LINE, no traceback."""
    path, lineno, original, _ = replace_line(work / "input", 2, 2, _in_after(b"\\ud800", True), _has_after)
    fail_then_fix(work, lambda: write_log(path, original), f"{path}:{lineno}: ", "surrogate")


def test_lone_surrogate_escape_on_the_orjson_path_cli_fail_then_fix(work: Path) -> None:
    path, lineno, original, _ = replace_line(work / "input", 2, 2, _in_after(b"\\ud800", False), _has_after)
    fail_then_fix(work, lambda: write_log(path, original), f"{path}:{lineno}: ", "malformed JSON")


# ---------------------------------------------------------------------------------------
# Disk full, for real: small tmpfs mounts


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                             capture_output=True, text=True)
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


def test_changefeed_disk_full_stops_cleanly_and_resumes(big_base: Path, big_model: ModelResult, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(cf, "400k"):
        failed = replay(big_base, q, cf, *FULL_ARGS)
        line = one_line_error(failed, "no space left on device", "hint:")
        assert str(cf) in line, line
        no_tmp_files(cf)
        published = published_prefix(cf, big_model)
        assert 0 < published < big_model.committed, published
        before = part_bytes(cf)
        grow(cf)
        done = ok(replay(big_base, q, cf, *FULL_ARGS, "--json")).json()
        exact(cf, big_model)
        after = part_bytes(cf)
        assert {n: after.get(n) for n in before} == before, "a published file changed"
        assert done["next_tx_seq"] == big_model.committed
        # and once more: nothing to do
        again = ok(replay(big_base, q, cf, *FULL_ARGS, "--json")).json()
        assert again["transactions_published"] == 0
        exact(cf, big_model)


def test_queue_disk_full_stops_cleanly_and_resumes(big_base: Path, big_model: ModelResult, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(q, "500k"):
        failed = replay(big_base, q, cf, *FULL_ARGS)
        line = one_line_error(failed)
        assert str(q) in line, line
        no_tmp_files(cf)
        published_prefix(cf, big_model)
        before = part_bytes(cf)
        grow(q)
        ok(replay(big_base, q, cf, *FULL_ARGS))
        exact(cf, big_model)
        after = part_bytes(cf)
        assert {n: after.get(n) for n in before} == before, "a published file changed"


def test_queue_disk_full_message_says_no_space(big_base: Path, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(q, "500k"):
        one_line_error(replay(big_base, q, cf, *FULL_ARGS), "no space left on device", "hint:")


# ---------------------------------------------------------------------------------------
# A damaged queue block


def _pad(rng: random.Random) -> str:
    return rng.randbytes(120).hex()  # does not compress away


def _corruption_input(inp: Path) -> None:
    """Thread 1, sequence 1: 40 committed transactions, then X: a begin and 600 rows that
    span several queue segments, no commit. Sequence 2 (added later) commits X, then Z."""
    rng = random.Random(3)
    inp.mkdir()
    out, scn = [], 1000
    for i in range(40):
        xid = f"F{i:03d}"
        out.append(dumps({"op": "begin", "scn": scn, "xid": xid}))
        out.append(dumps({"op": "insert", "scn": scn + 1, "xid": xid, "owner": "APP", "table": "T", "rid": f"f{i}",
                          "after": {"PAD": _pad(rng)}}))
        out.append(dumps({"op": "commit", "scn": scn + 2, "xid": xid, "tm": scn}))
        scn += 3
    out.append(dumps({"op": "begin", "scn": scn, "xid": "X"}))
    for i in range(600):
        scn += 1
        out.append(dumps({"op": "insert", "scn": scn, "xid": "X", "owner": "APP", "table": "T", "rid": f"x{i}",
                          "after": {"PAD": _pad(rng)}}))
    out.append(dumps({"op": "lwn", "scn": scn + 5}))
    (inp / "redo_1_1.jsonl").write_bytes(b"".join(out))


def _add_commit(inp: Path) -> None:
    (inp / "redo_1_2.jsonl").write_bytes(
        dumps({"op": "commit", "scn": 10_000, "xid": "X", "tm": 1})
        + dumps({"op": "begin", "scn": 10_001, "xid": "Z"})
        + dumps({"op": "insert", "scn": 10_002, "xid": "Z", "owner": "APP", "table": "T", "rid": "z", "after": {"A": 1}})
        + dumps({"op": "commit", "scn": 10_003, "xid": "Z", "tm": 2}))


def _blocks_of(seg: Path, xid: str) -> list[tuple[int, bytes]]:
    """(first index, stored value) of the blocks of segment ``seg`` holding records of ``xid``."""
    env = lmdb.open(str(seg), subdir=False, readonly=True, lock=False, max_dbs=2)
    try:
        db = env.open_db(b"blocks", create=False)
        out = []
        with env.begin(db=db) as txn:
            for key, value in txn.cursor():
                first = key_index(key)
                block = thread_codec().decode(first, value)
                if any(g[0] == xid for g in read_summary(block.record(0)).groups):
                    out.append((first, bytes(value)))
        return out
    finally:
        env.close()


@pytest.mark.parametrize("where", ["payload", "header"])
def test_damaged_queue_block_stops_the_run_without_wrong_rows(tmp_path: Path, where: str) -> None:
    inp, q, cf = tmp_path / "input", tmp_path / "queue", tmp_path / "cf"
    _corruption_input(inp)
    args = ("--segment-size", "64KiB", "--block-records", "50")
    first = ok(replay(inp, q, cf, *args, "--json")).json()
    assert first["open_transactions"] == 1 and first["transactions_published"] == 40, first
    segs = sorted((q / "segments").glob("seg-*.mdb"))
    assert len(segs) >= 3, segs  # X's segments are kept
    # a block of X in a segment that is not the newest one
    candidates = [(seg, first_index, value) for seg in segs[:-1] for first_index, value in _blocks_of(seg, "X")]
    assert len(candidates) >= 2, candidates
    seg, index, value = candidates[len(candidates) // 2]
    backup = seg.read_bytes()
    at = backup.find(value)
    assert at > 0 and backup.find(value, at + 1) < 0
    damaged = bytearray(backup)
    if where == "payload":
        off = at + HEADER_SIZE + (len(value) - HEADER_SIZE) // 2
        damaged[off] ^= 0x5A
        reason = "checksum mismatch"
    else:
        damaged[at] ^= 0x07  # the format version byte
        reason = "unknown format version"
    seg.write_bytes(bytes(damaged))
    before = part_bytes(cf)
    _add_commit(inp)
    model = expected_changefeed(inp)
    assert [r["xid"] for r in model.rows[-601:]] == ["X"] * 600 + ["Z"]

    failed = replay(inp, q, cf, *args)
    line = one_line_error(failed, f"queue block {index} ", str(seg), reason)
    assert part_bytes(cf) == before, "rows were published past the damaged block"
    no_tmp_files(cf)
    assert published_prefix(cf, model) == 40
    # the same command again: the same error, still nothing published
    one_line_error(replay(inp, q, cf, *args), f"queue block {index} ", reason)
    assert part_bytes(cf) == before
    # the segment restored from a backup: the run completes, exactly
    seg.write_bytes(backup)
    ok(replay(inp, q, cf, *args))
    exact(cf, model)
    assert line


# ---------------------------------------------------------------------------------------
# Semantic oddities: counted, not fatal


def _sem(op: str, scn: int, xid: str | None = None, **fields: Any) -> bytes:
    rec: dict[str, Any] = {"op": op, "scn": scn}
    if xid is not None:
        rec["xid"] = xid
    rec.update(fields)
    return dumps(rec)


def _row(op: str, scn: int, xid: str, rid: str, **fields: Any) -> bytes:
    images = {"insert": {"after": {"ID": rid}}, "update": {"before": {"ID": rid}, "after": {"ID": rid}},
              "delete": {"before": {"ID": rid}}}[op]
    return _sem(op, scn, xid, owner="APP", table="T", rid=rid, **images, **fields)


ODDITIES = (
    _row("insert", 10, "A", "a1") + _sem("commit", 11, "A")                                  # no begin
    + _sem("begin", 12, "B") + _row("insert", 13, "B", "b1") + _sem("commit", 14, "B")
    + _row("insert", 15, "B", "b2")                                                          # late record
    + _sem("begin", 20, "C") + _row("insert", 21, "C", "c1")
    + _row("delete", 22, "C", "zz", rollback=True) + _sem("commit", 23, "C")                 # matches nothing
    + _sem("begin", 30, "D") + _row("insert", 31, "D", "d1") + _sem("commit", 32, "D")
    + _sem("rollback", 33, "D")                                                              # commit wins
    + _sem("begin", 40, "E") + _row("insert", 41, "E", "e1") + _sem("rollback", 42, "E")
    + _sem("commit", 43, "E")                                                                # rollback wins
    + _sem("begin", 50, "F") + _row("insert", 51, "F", "f1") + _row("update", 52, "F", "f1", rollback=True)
    + _sem("commit", 53, "F")                                                                # empty
    + _sem("begin", 60, "G") + _row("insert", 61, "G", "g1") + _row("delete", 62, "G", "g1")
    + _row("delete", 63, "G", "g1", rollback=True) + _sem("commit", 64, "G")                 # cancels the delete
    + _sem("lwn", 100)
)


@pytest.mark.parametrize("block_records", ["4096", "1", "3"])
def test_semantic_oddities_are_counted_not_fatal(tmp_path: Path, block_records: str) -> None:
    inp = tmp_path / "input"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_bytes(ODDITIES)
    summary = ok(replay(inp, tmp_path / "q", tmp_path / "cf", "--json", "--block-records", block_records)).json()
    model = expected_changefeed(inp)
    exact(tmp_path / "cf", model)
    assert [(r["xid"], r["rid"], r["op"]) for r in model.rows] == [
        ("B", "b1", "c"), ("C", "c1", "c"), ("D", "d1", "c"), ("G", "g1", "c")]
    got = {k: summary[k] for k in ("transactions_published", "rows_published", "no_begin", "late_records",
                                   "unmatched_compensations", "extra_end_records", "rolled_back", "empty",
                                   "open_transactions")}
    assert got == {"transactions_published": 4, "rows_published": 4, "no_begin": 1, "late_records": 1,
                   "unmatched_compensations": 1, "extra_end_records": 2, "rolled_back": 1, "empty": 1,
                   "open_transactions": 0}


# Cross-thread ends: which end wins is decided by (scn, thread, sequence, line), whatever
# the order in which the threads' blocks reach the queue. The queue is filled by the
# readers one thread after the other (a legal interleaving), then `olr-buffer replay`
# dispatches it.
CROSS_T1 = (
    _sem("begin", 10, "X") + _row("insert", 11, "X", "x1")                  # X commits in thread 2
    + _sem("begin", 20, "H") + _row("insert", 21, "H", "h1") + _sem("rollback", 25, "H")  # H: commit (23, t2) wins
    + _sem("begin", 30, "G") + _row("insert", 31, "G", "g1") + _sem("commit", 33, "G")    # G: rollback (34, t2) is extra
    + _sem("begin", 40, "E") + _row("insert", 41, "E", "e1") + _sem("rollback", 43, "E")  # same SCN: thread 1 wins
    + _sem("lwn", 50)
)
CROSS_T2 = (
    _sem("commit", 13, "X") + _sem("commit", 23, "H") + _sem("rollback", 34, "G") + _sem("commit", 43, "E")
    + _sem("lwn", 50)
)


@pytest.mark.parametrize("order", [
    pytest.param((1, 2), id="thread-1-first"),
    pytest.param((2, 1), id="thread-2-first"),
])
def test_cross_thread_ends_do_not_depend_on_queue_order(tmp_path: Path, order: tuple[int, int]) -> None:
    inp, q, cf = tmp_path / "input", tmp_path / "q", tmp_path / "cf"
    inp.mkdir()
    (inp / "redo_1_1.jsonl").write_bytes(CROSS_T1)
    (inp / "redo_2_1.jsonl").write_bytes(CROSS_T2)
    model = expected_changefeed(inp)
    assert [r["xid"] for r in model.rows] == ["X", "H", "G"]
    with LmdbQueue(q) as queue:
        found = scan(str(inp))
        for t in order:
            ThreadReader(queue, str(inp), t, found[t], None).read_to_end()
    summary = ok(replay(inp, q, cf, "--json")).json()
    exact(cf, model)
    got = {k: summary[k] for k in ("transactions_published", "no_begin", "rolled_back", "extra_end_records",
                                   "open_transactions")}
    assert got == {"transactions_published": 3, "no_begin": 0, "rolled_back": 1, "extra_end_records": 3,
                   "open_transactions": 0}


# ---------------------------------------------------------------------------------------
# --dead-letter


def test_dead_letter_quarantines_bad_lines_of_two_threads(work: Path) -> None:
    inp = work / "input"
    pristine = work / "pristine"
    shutil.copytree(inp, pristine)
    bad: list[tuple[Path, int, bytes, str]] = []

    def damage(thread: int, seq: int, make: Callable[[dict, bytes], bytes], reason: str,
               wanted: Callable[[dict], bool] = lambda r: True, near: float = 0.5) -> None:
        path, lineno, _, line = replace_line(inp, thread, seq, make, wanted, near)
        bad.append((path, lineno, line, reason))

    last2 = sequences(inp, 2)[-1]
    damage(1, 2, lambda r, raw: raw.rstrip(b"\n")[:-1] + b"\n", "malformed JSON")
    damage(1, 2, lambda r, raw: dumps({**r, "scn": str(r["scn"])}), "'scn' must be an integer", near=0.8)
    damage(1, 3, lambda r, raw: dumps({**r, "op": "upsert"}), "unknown op", near=0.3)
    damage(2, 2, lambda r, raw: raw.replace(b'"xid":"', b'"xid":"\xff', 1), "invalid UTF-8", lambda r: "xid" in r)
    damage(2, last2, lambda r, raw: dumps({**r, "scn": 1}), "SCN goes back", near=0.6)
    damage(2, last2, lambda r, raw: dumps({**r, "scn": 1 << 63}), "out of range", not_lwn, near=0.9)

    # the model: the input without the bad lines
    clean = work / "clean"
    shutil.copytree(inp, clean)
    for path, lineno, _, _ in sorted(bad, key=lambda b: -b[1]):  # bottom up: line numbers stay valid
        p = clean / path.name
        lines = log_lines(p)
        write_log(p, b"".join(lines[: lineno - 1] + lines[lineno:]))
    model = expected_changefeed(clean)
    assert model.rows != expected_changefeed(pristine).rows  # the bad lines mattered

    dl = work / "dead" / "letters.jsonl"
    summary = ok(replay(inp, work / "q", work / "cf", "--dead-letter", dl, "--json")).json()
    assert summary["quarantined"] == len(bad), summary
    exact(work / "cf", model)
    letters = [json.loads(x) for x in dl.read_text(encoding="utf-8").splitlines()]
    assert sorted((d["file"], d["line"]) for d in letters) == sorted((str(p), n) for p, n, _, _ in bad)
    by_place = {(d["file"], d["line"]): d for d in letters}
    for path, lineno, line, reason in bad:
        d = by_place[(str(path), lineno)]
        assert set(d) >= {"file", "line", "reason", "raw"}, d
        assert reason in d["reason"], (reason, d)
        assert d["raw"].rstrip("\n") == line.rstrip(b"\n").decode("utf-8", "backslashreplace"), d
    # run again: nothing new, nothing twice
    again = ok(replay(inp, work / "q", work / "cf", "--dead-letter", dl, "--json")).json()
    assert again["transactions_published"] == 0 and again["quarantined"] == 0, again
    assert len(dl.read_text(encoding="utf-8").splitlines()) == len(bad)
    exact(work / "cf", model)

    # without the option, the first bad line of a thread stops the run
    failed = replay(inp, work / "q2", work / "cf2")
    line = one_line_error(failed, code=EXIT_BAD_INPUT)
    firsts = [bad[0], bad[3]]  # the first bad line of thread 1 and of thread 2
    assert any(line.startswith(f"olr-buffer: error: {p}:{n}: ") and r in line for p, n, _, r in firsts), line


# ---------------------------------------------------------------------------------------
# Safety: owner-only directories, no network unless asked


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_queue_and_metadata_directories_are_owner_only(work: Path, umask: int) -> None:
    q, cf = work / "deep" / "queue", work / "cf"
    ok(replay(work / "input", q, cf, umask=umask))
    for d in (q, q / "segments", cf / "_olr_buffer"):
        mode = d.stat().st_mode & 0o777
        assert mode == 0o700, f"{d}: mode {oct(mode)}"
    for f in [q / "LOCK", *(q / "segments").iterdir()]:
        mode = f.stat().st_mode & 0o777
        assert mode & 0o077 == 0, f"{f}: mode {oct(mode)}"


def _socket_inodes(pid: int) -> set[str]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.fullmatch(r"socket:\[(\d+)\]", target)
        if m:
            out.add(m.group(1))
    return out


def _inet_sockets(pid: int) -> list[tuple[str, str, str]]:
    """(protocol, local address, state) of the process's internet sockets."""
    inodes = _socket_inodes(pid)
    out = []
    for proto in ("tcp", "tcp6", "udp", "udp6"):
        try:
            with open(f"/proc/{pid}/net/{proto}") as fh:
                rows = fh.read().splitlines()[1:]
        except FileNotFoundError:
            continue
        for row in rows:
            cols = row.split()
            if cols[9] in inodes:
                out.append((proto, cols[1], cols[3]))
    return out


def _start_service(work: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "olr_buffer.cli", "run", str(work / "input"), "--queue", str(work / "q"),
         "--changefeed", str(work / "cf"), "--poll-interval", "0.02", "--flush-interval", "0.1",
         "--log-level", "info", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def _wait_published(cf: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        if cf.is_dir() and changefeed_files(cf):
            return
        time.sleep(0.05)
    raise AssertionError("the service published nothing")


def _stop(proc: subprocess.Popen) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_service_without_metrics_port_opens_no_socket(work: Path) -> None:
    proc = _start_service(work)
    try:
        _wait_published(work / "cf", proc)
        socks = _inet_sockets(proc.pid)
    finally:
        _stop(proc)
    assert socks == [], socks


def test_service_metrics_listen_on_loopback_only(work: Path) -> None:
    proc = _start_service(work, "--metrics-port", "0")
    try:
        _wait_published(work / "cf", proc)
        socks = _inet_sockets(proc.pid)
    finally:
        _stop(proc)
    listening = [s for s in socks if s[0].startswith("tcp") and s[2] == "0A"]
    assert len(listening) == 1 and listening[0][0] == "tcp", socks
    assert listening[0][1].startswith("0100007F:"), socks  # 127.0.0.1
    assert not [s for s in socks if s[0].startswith("udp")], socks
