"""Validation of single records: every rule of the contract, and the reason given."""

from __future__ import annotations

import json

import pytest

from olr_buffer.changes import CLOSE, COMPENSATION, DDL, INSERT, LWN, UPDATE, RecordError
from olr_buffer.sources.redo.records import decode_line, parse_line, validate

DML = {"op": "insert", "scn": 5, "xid": "x", "owner": "O", "table": "T", "rid": "R", "after": {"A": 1}}


def check(line: dict | bytes):
    raw = line if isinstance(line, bytes) else json.dumps(line, ensure_ascii=False).encode()
    return validate(parse_line(raw))


def test_valid_records_encode_their_fields():
    code, scn, sub, xid, payload = check({**DML, "tm": 9, "obj": 3, "unknown": [1]})
    assert (code, scn, sub, xid) == (INSERT, 5, 0, "x")
    assert payload == [9, "O", "T", 3, "R", None, '{"A":1}', None]
    assert check({"op": "lwn", "scn": 7}) == (LWN, 7, 0, None, None)
    assert check({"op": "close", "scn": 8}) == (CLOSE, 8, 0, None, None)
    assert check({"op": "close", "scn": 8, "xid": "ignored", "tm": 1}) == (CLOSE, 8, 0, None, None)
    code, *_, payload = check(
        {"op": "delete", "scn": 1, "xid": "x", "owner": "O", "table": "T", "rid": "R", "rollback": True}
    )
    assert code == 4 | COMPENSATION and payload == ["R"]
    code, *_, payload = check({"op": "ddl", "scn": 1, "xid": "x", "owner": "O", "table": "T", "sql": "drop table t"})
    assert code == DDL and payload[-1] == "drop table t"


def test_integers_beyond_64_bits_stay_exact():
    big = 123456789012345678901234567890
    payload = check({**DML, "after": {"N": big}})[4]
    assert json.loads(payload[6]) == {"N": big}


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"{not json", "malformed JSON"),
        (b"\xff\xfe{}", "invalid UTF-8"),
        (b"[1,2]", "not a JSON object but an array"),
        (b"", "malformed JSON"),
        ({"scn": 1}, "missing field 'op'"),
        ({**DML, "op": "merge"}, "unknown op 'merge'"),
        ({**DML, "scn": True}, "field 'scn' must be an integer, not a boolean"),
        ({**DML, "scn": 1.5}, "field 'scn' must be an integer, not a number"),
        ({**DML, "scn": "5"}, "field 'scn' must be an integer, not a string"),
        ({**DML, "scn": -1}, "field 'scn' out of range"),
        ({**DML, "scn": 1 << 63}, "field 'scn' out of range"),
        ({**DML, "sub": -2}, "field 'sub' out of range"),
        ({**DML, "xid": ""}, "field 'xid' must be a non-empty string"),
        ({k: v for k, v in DML.items() if k != "xid"}, "missing field 'xid'"),
        ({**DML, "tm": "now"}, "field 'tm' must be an integer"),
        ({k: v for k, v in DML.items() if k != "rid"}, "missing field 'rid'"),
        ({**DML, "owner": 3}, "field 'owner' must be a string, not a number"),
        ({k: v for k, v in DML.items() if k != "after"}, "missing field 'after'"),
        ({**DML, "after": [1]}, "field 'after' must be an object, not an array"),
        ({**DML, "op": "update"}, "missing field 'before'"),
        ({**DML, "rollback": "yes"}, "field 'rollback' must be a boolean"),
        ({**DML, "obj": 1.0}, "field 'obj' must be an integer"),
        ({"op": "ddl", "scn": 1, "xid": "x", "owner": "O", "table": "T"}, "missing field 'sql'"),
        (b'{"op":"lwn","scn":NaN}', "malformed JSON"),
    ],
)
def test_invalid_records_give_the_reason(line, reason):
    with pytest.raises(RecordError, match=None) as info:
        check(line)
    assert reason in str(info.value)
    raw = line if isinstance(line, bytes) else json.dumps(line, ensure_ascii=False).encode()
    with pytest.raises(RecordError) as fast:
        decode_line(raw)  # the reader's path: the same reason
    assert str(fast.value) == str(info.value)


# The reader's fast path (decode_line) keeps before/after as the input's own text.

IMAGE = rb'{"N": 1.50, "B":123456789012345678901234567890,"E":"caf\u00e9 \"x\"","F":1e400,"Z":-0.0}'


def test_images_are_the_input_text_byte_for_byte():
    raw = b'{"op":"update","scn":5,"xid":"x","owner":"O","table":"T","rid":"R","before":{"N":1},"after":' + IMAGE + b"}"
    code, scn, sub, xid, payload = decode_line(raw)
    assert (code, scn, sub, xid) == (UPDATE, 5, 0, "x")
    assert payload == [None, "O", "T", None, "R", '{"N":1}', IMAGE.decode(), None]


def test_images_of_a_record_the_fast_path_does_not_take_are_the_input_text_too():
    # a DDL record with a "rollback" that is not a boolean: the reference path accepts it
    # (it ignores "rollback" on DDL), the typed decoder does not
    raw = b'{"op":"ddl","scn":5,"xid":"x","owner":"O","table":"T","sql":"s","rollback":"no","after":' + IMAGE + b"}"
    assert decode_line(raw)[4] == [None, "O", "T", None, None, None, IMAGE.decode(), "s"]


def test_fast_path_accepts_what_the_reference_accepts():
    for line in [
        {**DML, "sub": None, "tm": None, "obj": None, "rollback": None, "unknown": {"a": [1e300, None]}},
        {**DML, "rollback": False, "before": {"A": 0}},
        {"op": "delete", "scn": 1, "xid": "x", "owner": "O", "table": "T", "rid": "R", "rollback": True, "before": {}},
        {"op": "ddl", "scn": 1, "xid": "x", "owner": "O", "table": "T", "sql": "s", "rid": None, "before": None},
        {"op": "lwn", "scn": 3, "sub": 2, "xid": None, "tm": "not checked on lwn"},
        {"op": "close", "scn": 4, "xid": 7, "tm": "not checked on close"},
        {"op": "commit", "scn": (1 << 63) - 1, "xid": "\u00e9", "tm": -(1 << 63)},
    ]:
        raw = json.dumps(line).encode()
        got, expected = decode_line(raw), validate(parse_line(raw))
        assert got[:4] == expected[:4]
        if got[4] is not None and len(got[4]) == 8:
            got[4][5:7] = [None if t is None else json.loads(t) for t in got[4][5:7]]
            expected[4][5:7] = [None if t is None else json.loads(t) for t in expected[4][5:7]]
        assert got[4] == expected[4]
