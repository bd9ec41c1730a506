"""Bad input, injected for real: integers out of range, lines beyond the limit, invalid
UTF-8 and lone surrogates inside values, dead letters. Each stops with a one-line error
naming file and line (or is quarantined); fixed, the same command finishes the job.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from olr_buffer.changes import INSERT, ROW_FIELDS, decode_record
from olr_buffer.dead_letters import DeadLetters
from olr_buffer.errors import EXIT_BAD_INPUT
from olr_buffer.sources.redo.errors import InputError
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.position import load_positions
from olr_buffer.sources.redo.thread_reader import MAX_LINE_BYTES, ThreadReader
from olr_buffer.testing import MemoryQueue
from olr_buffer.txbuffer import LmdbQueue
from tests.cli.conftest import log_lines, ok, sequences, write_log
from tests.contract_model import expected_changefeed, load_changefeed
from tests.fault_helpers import (
    dumps,
    exact,
    fail_then_fix,
    is_dml,
    not_lwn,
    one_line_error,
    replace_line,
    replay,
    small_base,  # noqa: F401 (a fixture work uses)
    work,  # noqa: F401 (a fixture the tests request by name)
)

pytestmark = pytest.mark.e2e  # a process or a server: in `make test`, not in `make test-fast`


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


@pytest.mark.parametrize(
    "field, value",
    [
        ("scn", (1 << 63) - 1),
        ("sub", (1 << 63) - 1),
        ("tm", -(1 << 63)),
        ("obj", (1 << 63) - 1),
        ("obj", -(1 << 63)),
        ("tm", None),
        ("sub", None),
    ],
)
def test_integer_at_the_bounds_is_accepted(tmp_path: Path, field: str, value: int | None) -> None:
    rec = {
        "op": "insert",
        "scn": 5,
        "xid": "x",
        "owner": "O",
        "table": "T",
        "rid": "R",
        "after": {"A": 1},
        field: value,
    }
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
        dumps(
            {
                "op": "insert",
                "scn": start + i,
                "xid": "X",
                "owner": "O",
                "table": "T",
                "rid": f"r{i}",
                "after": {"i": i},
            }
        )
        for i in range(1, n)
    ]


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
    ThreadReader(
        q, str(path.parent), 1, scan(str(path.parent))[1], None, max_line_bytes=1000, dead_letters=dead
    ).read_to_end()
    dead.close()
    letters = [json.loads(x) for x in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert [(d["file"], d["line"], d["reason"]) for d in letters] == [
        (str(path), 5, "line longer than 1000 bytes"),
        (str(path), 6, "line longer than 1000 bytes"),
    ]
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
    fail_then_fix(
        work, lambda: write_log(path, original), f"{path}:{lineno}: ", f"line longer than {MAX_LINE_BYTES} bytes"
    )
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


@pytest.mark.parametrize(
    "bad, big",
    [
        (b"\xff", False),
        (b"\xc3", False),
        (b"\xed\xa0\x80", False),
        (b"\xff", True),
        (b"\xc3\x28", True),
        (b"\xed\xa0\x80", True),
    ],
    ids=[
        "ff",
        "truncated-2-byte",
        "encoded-surrogate",
        "ff-stdlib",
        "bad-continuation-stdlib",
        "encoded-surrogate-stdlib",
    ],
)
def test_invalid_utf8_inside_a_value_cli_fail_then_fix(work: Path, bad: bytes, big: bool) -> None:
    path, lineno, original, _ = replace_line(work / "input", 2, 2, _in_after(bad, big), _has_after)
    fail_then_fix(work, lambda: write_log(path, original), f"{path}:{lineno}: ", "invalid UTF-8")


def test_valid_multibyte_and_escapes_inside_values_are_kept(work: Path) -> None:
    """Control: non-ASCII text, a valid surrogate pair escape and a 27-digit integer in the
    same value are accepted and reach the changefeed unchanged."""
    path, lineno, _, bad = replace_line(
        work / "input", 2, 2, _in_after("é€😀\\ud83d\\ude00".encode(), True), _has_after
    )
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


def test_dead_letter_quarantines_bad_lines_of_two_threads(work: Path) -> None:
    inp = work / "input"
    pristine = work / "pristine"
    shutil.copytree(inp, pristine)
    bad: list[tuple[Path, int, bytes, str]] = []

    def damage(
        thread: int,
        seq: int,
        make: Callable[[dict, bytes], bytes],
        reason: str,
        wanted: Callable[[dict], bool] = lambda r: True,
        near: float = 0.5,
    ) -> None:
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


# The dead-letter file on a full disk (issue 29.5)


def _many_bad_lines(inp: Path, every: int = 9) -> list[tuple[str, int]]:
    """Make every ``every``-th record line of thread 1 malformed and about 1 KB long;
    returns their (file, line), and leaves the input without them beside it (``clean``)."""
    clean = inp.parent / "clean"
    shutil.copytree(inp, clean)
    bad = []
    for seq in sequences(inp, 1):
        path = inp / next(p.name for p in inp.iterdir() if p.name.startswith(f"redo_1_{seq}.jsonl"))
        lines = log_lines(path)
        kept = []
        for i, raw in enumerate(lines):
            if i % every == every // 2 and b'"lwn"' not in raw:
                lines[i] = raw.rstrip(b"\n")[:-1] + b" " + b"x" * 900 + b"\n"  # malformed JSON
                bad.append((str(path), i + 1))
            else:
                kept.append(raw)
        write_log(path, b"".join(lines))
        write_log(clean / path.name, b"".join(kept))
    return bad


def _letters(dl: Path) -> list[dict]:
    data = dl.read_bytes()
    assert not data or data.endswith(b"\n"), f"a torn last line: {data[-80:]!r}"
    return [json.loads(x) for x in data.splitlines()]  # every line is JSON


@pytest.mark.parametrize("processes", [True, False], ids=["reader-processes", "reader-threads"])
def test_dead_letter_file_on_a_full_disk_is_an_environment_error_and_loses_no_record(
    work: Path, processes: bool
) -> None:
    """A dead-letter file that cannot take a bad record stops the run with exit 1 (not 3:
    the input is fine) naming the dead-letter file; no part of the record stays in it, and
    once there is space the same command quarantines every bad record (some maybe twice,
    none lost) and publishes exactly the input without them."""
    from olr_buffer.dead_letters import DeadLetterError
    from olr_buffer.errors import EXIT_ERROR
    from olr_buffer.runtime import PipelineOptions
    from olr_buffer.runtime import replay as run_replay
    from tests.fault_helpers import grow, tmpfs

    inp = work / "input"
    bad = _many_bad_lines(inp)
    model = expected_changefeed(work / "clean")
    dl_dir = work / "dead"
    dl = dl_dir / "letters.jsonl"
    opts = PipelineOptions(reader_processes=processes, dead_letter=str(dl))
    with tmpfs(dl_dir, "16k"):
        assert len(bad) * 1000 > 2 * 16384
        with pytest.raises(DeadLetterError) as caught:
            run_replay(str(inp), str(work / "q"), str(work / "cf"), opts)
        assert caught.value.exit_code == EXIT_ERROR
        assert str(caught.value).startswith(f"{dl}: cannot write the bad record of {inp}/redo_1_"), caught.value
        assert "no space left on device" in str(caught.value), caught.value
        letters = _letters(dl)
        assert 0 < len(letters) < len(bad)
        # the CLI: one line, exit 1
        failed = replay(inp, work / "q", work / "cf", "--dead-letter", dl)
        line = one_line_error(failed, f"{dl}: cannot write the bad record of ", "no space left on device", code=1)
        assert "read failed" not in line, line
        _letters(dl)
        grow(dl_dir)
        done = ok(replay(inp, work / "q", work / "cf", "--dead-letter", dl, "--json")).json()
        letters = _letters(dl)
    assert {(d["file"], d["line"]) for d in letters} == set(bad)
    assert {(b["file"], b["line"]) for b in done["quarantined_lines"]} <= set(bad)
    exact(work / "cf", model)


def test_a_torn_last_line_of_the_dead_letter_file_is_cut_off_before_appending(work: Path) -> None:
    """A line cut short (a kill, or a full disk before this was handled) is cut off before
    the next line is appended, which would otherwise continue it: both would be lost to a
    reader of JSON lines. The summary names this run's bad lines."""
    inp = work / "input"
    bad = _many_bad_lines(inp, every=40)
    dl = work / "letters.jsonl"
    earlier = b'{"file":"x","line":1,"reason":"r","raw":"y"}\n'
    dl.write_bytes(earlier + b'{"file":"' + b"z" * 900)
    dead = DeadLetters(str(dl))
    dead.put("f", 7, "reason", b"raw\n")
    dead.close()
    assert [d["line"] for d in _letters(dl)] == [1, 7]
    dl.write_bytes(earlier + b'{"file":"' + b"z" * 900)
    done = ok(replay(inp, work / "q", work / "cf", "--dead-letter", dl, "--json"))
    letters = _letters(dl)
    assert letters[0]["file"] == "x" and {(d["file"], d["line"]) for d in letters[1:]} == set(bad)
    assert sorted((b["file"], b["line"]) for b in done.json()["quarantined_lines"]) == sorted(bad)
    assert "cut off a last line of 909 bytes" in done.stderr, done.stderr
    exact(work / "cf", expected_changefeed(work / "clean"))
