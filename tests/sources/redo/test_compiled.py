"""The compiled reader loop (``linescan``, built from ``linescan.pyx`` at install) equals
the pure-Python loop it stands for, on any input.

* one line: ``linescan.decode`` either declines a line (the line path decides) or gives
  exactly what the reference gives it (``decode_line``), its queue record byte for byte;
  and it takes the lines that a database writes (it is not declining everything);
* a file: the chunked reader with the compiled loop, with the pure-Python one, and the
  line-by-line reader write the same blocks, positions, dead letters and errors (each
  ``FILE:LINE: reason``), on valid lines and bad ones (malformed JSON, wrong types,
  out-of-range numbers, escapes and lone surrogates, invalid UTF-8, deep nesting, huge
  and empty lines, CRLF, no final newline);
* ``OLR_BUFFER_PURE_PYTHON=1`` runs the pure-Python loop, and the reader says once, at
  DEBUG, which loop runs.

The compiled module must be built where these tests run (``pip install -e .`` builds it
with the machine's C compiler): a tree where it is not fails here, which says so.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tempfile

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olr_buffer.changes import OP_CODES, RecordError, encode_record, record
from olr_buffer.sources.redo import thread_reader
from olr_buffer.sources.redo.compiled import PURE_PYTHON_ENV
from olr_buffer.sources.redo.records import decode_line

from .test_chunked import _run, line_files, plain_records
from .test_fuzz import damaged_lines, dumps, valid_records

linescan = importlib.import_module("olr_buffer.sources.redo.linescan")

SETTINGS = settings(
    max_examples=max(150, 3 * settings.default.max_examples),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ---------------------------------------------------------------------------------------
# One line


def check_same_as_reference(raw: bytes, seq: int = 3, line: int = 7) -> tuple | None:
    """``linescan.decode(raw)`` declines, or equals ``decode_line(raw)`` (its record
    encoded as the block builder encodes it)."""
    got = linescan.decode(raw, seq, line)
    if got is None:
        return None
    try:
        code, scn, sub, xid, payload = decode_line(raw)
    except RecordError as exc:
        pytest.fail(f"the compiled loop takes a line the reference refuses ({exc}): {raw!r}")
    expected = (
        code,
        scn,
        sub,
        xid,
        None if payload is None else encode_record(record(code, scn, sub, seq, line, payload)),
    )
    assert got == expected, raw
    return got


@st.composite
def edge_lines(draw) -> bytes:
    """A valid record written with what the compiled scanner's boundaries are made of."""
    rec = draw(valid_records())
    raw = dumps(rec, ascii_only=draw(st.booleans()))
    kind = draw(
        st.sampled_from(
            [
                "tabs",
                "crlf",
                "leading-space",
                "escaped-key",
                "escaped-field",
                "lone-surrogate-image",
                "surrogate-pair-image",
                "duplicate",
                "digits",
                "float-int",
                "minus-zero",
                "deep",
                "non-object-image",
                "unknown",
                "utf8",
            ]
        )
    )
    body = raw[1:-1]
    if kind == "tabs":
        return b"{\t" + body.replace(b", ", b",\t").replace(b": ", b" :\t") + b" }"
    if kind == "crlf":
        return raw + b"\r"
    if kind == "leading-space":
        return b" " + raw
    if kind == "escaped-key":
        return raw.replace(b'"op"', b'"o\\u0070"').replace(b'"xid"', b'"x\\u0069d"', 1)
    if kind == "escaped-field":
        field = draw(st.sampled_from([b"xid", b"owner", b"table", b"rid", b"op", b"sql"]))
        return raw.replace(b'"' + field + b'": "', b'"' + field + b'": "\\u0061\\n', 1)
    if kind in ("lone-surrogate-image", "surrogate-pair-image"):
        esc = b"\\ud800" if kind == "lone-surrogate-image" else b"\\ud83d\\ude00"
        return raw[:-1] + b', "after": {"s": "' + esc + b'"}, "before": {"t": "x' + esc + b'"}}'
    if kind == "duplicate":
        field = draw(st.sampled_from(["op", "scn", "sub", "xid", "tm", "rid", "before", "rollback", "zzz"]))
        value = draw(st.sampled_from(['"lwn"', "5", "null", '"a"', "{}", "true"]))
        return raw[:-1] + f', "{field}": {value}}}'.encode()
    if kind == "digits":
        field = draw(st.sampled_from(["scn", "sub", "tm", "obj"]))
        value = draw(
            st.sampled_from(
                [
                    999999999999999999,
                    1000000000000000000,
                    (1 << 63) - 1,
                    1 << 63,
                    -(1 << 63),
                    -(1 << 63) - 1,
                    -999999999999999999,
                    -1,
                    0,
                    10**30,
                ]
            )
        )
        return (
            raw[:-1] + f', "{field}": {value}}}'.encode()
            if field not in rec
            else raw.replace(f'"{field}": {json.dumps(rec[field])}'.encode(), f'"{field}": {value}'.encode(), 1)
        )
    if kind == "float-int":
        field = draw(st.sampled_from(["scn", "sub", "tm", "obj"]))
        value = draw(st.sampled_from(["5.0", "5e0", "5E+1", "0.5", "-0.0", "1e999", "01", "-", "5."]))
        return raw[:-1] + f', "{field}": {value}}}'.encode()
    if kind == "minus-zero":
        return raw[:-1] + b', "tm": -0}'
    if kind == "deep":
        depth = draw(st.sampled_from([1, 62, 63, 64, 65, 100]))
        opener, closer = draw(st.sampled_from([(b"[", b"]"), (b'{"a":', b"}")]))
        field = draw(st.sampled_from([b"before", b"after", b"zzz", b"columns"]))
        return raw[:-1] + b', "' + field + b'": {"d": ' + opener * depth + b"0" + closer * depth + b"}}"
    if kind == "non-object-image":
        field = draw(st.sampled_from(["before", "after"]))
        value = draw(st.sampled_from(["[]", '"x"', "1", "true", "false", "null", "[{}]"]))
        return raw[:-1] + f', "{field}": {value}}}'.encode()
    if kind == "unknown":
        value = draw(
            st.sampled_from(
                [
                    b"[1, -2.5e-3, true, false, null, {}, []]",
                    b'"\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9"',
                    b'"\\x"',
                    b'"\\u12"',
                    b"tru",
                    b"nul",
                    b"[1,]",
                    b"{,}",
                    b'{"a" 1}',
                    b"1.e5",
                    b"-01",
                    b'"\x01"',
                    b"123456789012345678901234567890.5e-99",
                ]
            )
        )
        return raw[:-1] + b', "zzz": ' + value + b"}"
    bad = draw(
        st.sampled_from(
            [
                "é".encode(),
                "漢".encode(),
                "😀".encode(),
                b"\xc0\xaf",
                b"\xed\xa0\x80",
                b"\xf4\x90\x80\x80",
                b"\xe0\x80\x80",
                b"\xf0\x80\x80\x80",
                b"\xc3",
                b"\xff",
            ]
        )
    )
    field = draw(st.sampled_from([b"xid", b"owner", b"rid", b"after", b"zzz"]))
    if field in (b"after", b"zzz"):
        return raw[:-1] + b', "' + field + b'": {"s": "' + bad + b'"}}'
    return raw.replace(b'"' + field + b'": "', b'"' + field + b'": "' + bad, 1)


@given(valid_records() | damaged_lines() | edge_lines(), st.integers(1, (1 << 31)), st.integers(1, 10**12))
@SETTINGS
def test_a_line_is_declined_or_read_as_the_reference_reads_it(item, seq, line) -> None:
    raw = dumps(item) if isinstance(item, dict) else item
    check_same_as_reference(raw, seq, line)


@given(st.integers(0, 10**12).flatmap(plain_records), st.booleans())
@SETTINGS
def test_lines_as_a_database_writes_them_are_taken(rec, ascii_only) -> None:
    """Not a decline of everything: what the pure-Python loop takes without the line path
    (all but ddl, and rows without the images their op needs), the compiled loop takes too,
    unless it holds a surrogate pair's escapes (``ascii_only`` with a character beyond the BMP)."""
    raw = dumps(rec, ascii_only)
    got = check_same_as_reference(raw)
    op = rec["op"]
    needs = {"insert": ["after"], "update": ["before", "after"], "delete": ["before"]}.get(op, [])
    taken = (
        op != "ddl"
        and (rec.get("rollback") is True or all(rec.get(k) is not None for k in needs))
        and not re.search(rb"\\u[dD][89a-fA-F]", raw)
    )
    assert (got is not None) == taken, raw


@pytest.mark.parametrize("op", sorted(OP_CODES))
def test_the_op_codes_are_the_change_format_s(op) -> None:
    fields = {"xid": "x", "owner": "o", "table": "t", "rid": "r", "before": {}, "after": {}}
    raw = dumps({"op": op, "scn": 1, **({} if op in ("lwn", "close") else fields)})
    got = linescan.decode(raw, 1, 1)
    if op == "ddl":
        assert got is None  # the line path reads ddl (its sql, its columns)
    else:
        assert got[0] == OP_CODES[op]
        check_same_as_reference(raw)


@pytest.mark.parametrize(
    "value",
    [0, 127, 128, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, 999999999999999999, -1, -32, -33, -128, -129]
    + [-32768, -32769, -(1 << 31), -(1 << 31) - 1, -999999999999999999]
    # 19 digits: a tm in nanoseconds since 1970 (every one since 2001), and int64's ends
    + [10**18, 1795919435905011365, (1 << 63) - 1, -(10**18), -(1 << 63) + 1],
)
def test_integers_are_encoded_as_msgspec_encodes_them(value) -> None:
    rec = {"op": "commit", "scn": abs(value), "sub": abs(value), "xid": "x", "tm": value}
    got = check_same_as_reference(dumps(rec), seq=abs(value) or 1, line=abs(value) or 1)
    assert got is not None


@pytest.mark.parametrize("value", [1 << 63, -(1 << 63), 10**19 - 1, 10**19, -(10**19)])
def test_integers_beyond_int64_go_to_the_line_path(value) -> None:
    for field in ("scn", "sub", "tm", "obj"):
        rec = {"op": "insert", "scn": 5, "xid": "x", "owner": "o", "table": "t", "rid": "r", "after": {}, field: value}
        assert check_same_as_reference(dumps(rec)) is None, field


@pytest.mark.parametrize("n", [0, 31, 32, 255, 256, 65535, 65536])
def test_strings_are_encoded_as_msgspec_encodes_them(n) -> None:
    rec = {"op": "insert", "scn": 1, "xid": "x", "owner": "o" * n, "table": "t", "rid": "r", "after": {"a": "b" * n}}
    assert check_same_as_reference(dumps(rec)) is not None
    assert msgspec.msgpack.decode(linescan.decode(dumps(rec), 1, 1)[4])[6] == "o" * n


# ---------------------------------------------------------------------------------------
# A file


@given(
    line_files(),
    st.sampled_from([64, 1, 7, 4096, 1 << 20]),
    st.integers(1, 6),
    st.sampled_from([thread_reader.MAX_LINE_BYTES, 2000, 300, 64]),
    st.booleans(),
    st.sampled_from([None, 0, 500]),
    st.booleans(),
    st.lists(edge_lines(), max_size=4),
    st.data(),
)
@SETTINGS
def test_the_compiled_loop_reads_files_as_the_pure_python_loop(
    case, chunk, block_records, max_line_bytes, dead, floor, final, edges, data
) -> None:
    lines, compressed = case
    for raw in edges:  # the scanner's edge cases, at any place
        at = data.draw(st.integers(0, len(lines)))
        lines.insert(at, raw.replace(b"\n", b" ") + b"\n")
    data_bytes = b"".join(lines)
    saved = thread_reader._CHUNK
    thread_reader._CHUNK = chunk
    try:
        with tempfile.TemporaryDirectory() as tmp:
            kw = dict(
                block_records=block_records,
                max_line_bytes=max_line_bytes,
                dead=dead,
                floor=floor,
                final=final or compressed,
            )
            reference = _run(tmp, data_bytes, compressed, chunked=True, linescan=None, **kw)
            compiled = _run(tmp, data_bytes, compressed, chunked=True, linescan=linescan, **kw)
            by_line = _run(tmp, data_bytes, compressed, chunked=False, **kw)
    finally:
        thread_reader._CHUNK = saved
    assert compiled == reference
    assert compiled == by_line


def test_an_error_keeps_its_file_line_and_reason(tmp_path) -> None:
    good = [dumps({"op": "begin", "scn": s, "xid": "a"}) for s in range(1, 6)]
    bad = [b'{"op":"begin","scn":6,"xid":"a"', b'{"op":"begin","scn":"6","xid":"a"}', b'{"op":"begin","scn":-6}']
    for raw in bad:
        data = b"\n".join([*good, raw, *good]) + b"\n"
        got = _run(
            str(tmp_path),
            data,
            False,
            chunked=True,
            linescan=linescan,
            block_records=2,
            max_line_bytes=1 << 20,
            dead=False,
            floor=None,
            final=True,
        )
        ref = _run(
            str(tmp_path),
            data,
            False,
            chunked=True,
            linescan=None,
            block_records=2,
            max_line_bytes=1 << 20,
            dead=False,
            floor=None,
            final=True,
        )
        assert got == ref
        assert got["error"].startswith(os.path.join(str(tmp_path), "redo_1_1.jsonl") + ":6: ")
        assert got["pos"] == ref["pos"]


# ---------------------------------------------------------------------------------------
# Which loop runs


def _reader_loop(env: dict) -> list[str]:
    code = (
        "import logging, sys; logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format='%(message)s')\n"
        "from olr_buffer.sources.redo import ThreadReader\n"
        "from olr_buffer.testing import MemoryQueue\n"
        "for _ in range(2):\n"
        "    r = ThreadReader(MemoryQueue(), '.', 1, {}, None)\n"
        "print('linescan', r.linescan is not None)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return [x for x in out.splitlines() if x.startswith(("redo reader loop", "linescan"))]


def test_the_reader_says_once_which_loop_runs_and_the_variable_forces_pure_python() -> None:
    env = {k: v for k, v in os.environ.items() if k != PURE_PYTHON_ENV}
    assert _reader_loop(env) == ["redo reader loop: compiled", "linescan True"]
    assert _reader_loop({**env, PURE_PYTHON_ENV: "1"}) == [
        f"redo reader loop: pure Python ({PURE_PYTHON_ENV} is set)",
        "linescan False",
    ]


ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("compiler", ["gcc", "missing"])
def test_the_install_builds_the_loop_with_a_compiler_and_goes_on_without(tmp_path, compiler) -> None:
    """``pip wheel .`` (pip's build isolation fetches setuptools and Cython, as ``pip
    install .`` does) compiles the loop with the machine's compiler; with a compiler that
    fails, the wheel is built all the same, without it (the reader then runs pure Python)."""
    import shutil
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md"):
        shutil.copy(os.path.join(ROOT, name), src / name)
    shutil.copytree(
        os.path.join(ROOT, "olr_buffer"),
        src / "olr_buffer",
        ignore=shutil.ignore_patterns("*.so", "*.c", "__pycache__"),
    )
    env = dict(os.environ)
    if compiler == "missing":
        env["CC"] = str(tmp_path / "no-such-cc")
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "wheels"), str(src)]
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = (tmp_path / "wheels").iterdir()
    names = zipfile.ZipFile(wheel).namelist()
    assert "olr_buffer/sources/redo/thread_reader.py" in names
    built = [n for n in names if n.startswith("olr_buffer/sources/redo/linescan") and n.endswith(".so")]
    assert bool(built) == (compiler == "gcc"), names
