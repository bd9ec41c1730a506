"""docs/formats.md, "Network protocol", is the protocol as the code speaks it: the framing
example is the framing's bytes, every request and reply field its number, every code its
value (and every code of the code is there), every message field a name the code uses,
and the example transaction what ``serve``'s message builder makes of those rows. The
docs and the user-facing text name no section of a contracts file no reader has."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pyarrow as pa

from olr_buffer.olr_protocol import (
    FrameReader,
    MessageBuilder,
    RedoRequest,
    RedoResponse,
    RequestCode,
    ResponseCode,
    frame,
    frame_header,
    json_messages,
)

ROOT = Path(__file__).resolve().parents[2]


def section() -> str:
    text = (ROOT / "docs" / "formats.md").read_text()
    start = text.index("\n## Network protocol\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def subsection(title: str) -> str:
    text = section()
    start = text.index(f"\n### {title}")
    end = text.find("\n### ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def table(text: str, first_header: str) -> list[list[str]]:
    """The rows of the first table of ``text`` whose header starts with ``first_header``:
    the first cell without its backquotes, the others as they are."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first_header} |"))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows.append([cells[0].strip("`"), *cells[1:]])
    return rows


def test_the_framing_example_is_the_framing():
    text = subsection("Framing")
    example = re.search(r"```\n([0-9a-f ]+)\n```", text).group(1)
    assert bytes.fromhex(example) == frame(b"hello")
    assert "little-endian" in text and "0xFFFFFFFF" in text
    assert frame_header(1 << 32)[:4] == b"\xff\xff\xff\xff" and len(frame_header(1 << 32)) == 12
    assert "at most 1 KiB (`1024` bytes)" in text
    assert FrameReader(1024).feed(frame(b"x" * 1024)) == [b"x" * 1024]


def _key(data: bytes) -> int:
    """The field number of the first field of an encoded message (a one-byte key)."""
    return data[0] >> 3


def test_every_request_field_has_its_number():
    rows = table(subsection("Requests"), "field")
    numbers = {name: int(number) for name, number, *_ in rows}
    assert numbers == {"code": 1, "database_name": 2, "scn": 3, "tms": 4, "tm_rel": 5, "seq": 6, "c_scn": 8, "c_idx": 9}
    for name, number in numbers.items():
        value = "x" if name in ("database_name", "tms") else 1
        encoded = RedoRequest(**{"code": 0, name: value}).encode()
        assert _key(encoded) == number, name
        assert getattr(RedoRequest.decode(encoded), name) == value, name


def test_every_reply_field_has_its_number():
    rows = table(subsection("Replies"), "field")
    numbers = {name: int(number) for name, number, *_ in rows}
    assert numbers == {"code": 1, "scn": 2, "c_scn": 10, "c_idx": 11}
    for name, number in numbers.items():
        encoded = RedoResponse(**{"code": 0, name: 1}).encode()
        assert _key(encoded) == number and getattr(RedoResponse.decode(encoded), name) == 1, name


def test_every_code_has_its_value_and_every_code_is_there():
    requests = {name: int(code) for name, code, *_ in table(subsection("Requests"), "request")}
    assert requests == {c.name: c.value for c in RequestCode}
    replies = {name: int(code) for name, code, *_ in table(subsection("Replies"), "reply")}
    assert replies == {c.name: c.value for c in ResponseCode}


def test_the_message_fields_are_the_code_s():
    text = subsection("Messages")
    message = [row[0] for row in table(text, "field")]
    assert message == [
        json_messages.SCN,
        json_messages.TM,
        json_messages.C_SCN,
        json_messages.C_IDX,
        json_messages.XID,
        json_messages.DB,
        json_messages.PAYLOAD,
    ]
    entry_rows = table(text[text.index("A `payload` entry") :], "field")
    assert [row[0] for row in entry_rows] == [
        json_messages.OP,
        json_messages.SCHEMA,
        json_messages.RID,
        json_messages.BEFORE,
        json_messages.AFTER,
        json_messages.SQL,
    ]
    schema = entry_rows[1][2]
    for name in (json_messages.OWNER, json_messages.TABLE, json_messages.OBJ, json_messages.SCHEMA_COLUMNS):
        assert f"`{name}`" in schema, name
    ops = entry_rows[0][2]
    for op in (json_messages.OP_BEGIN, json_messages.OP_COMMIT, *json_messages.ROW_OPS):
        assert f"`{op}`" in ops, op
    other = [row[0] for row in table(text[text.index("`run olr://` reads these") :], "field")]
    assert other == [
        json_messages.SCNS,
        json_messages.TMS,
        json_messages.XIDN,
        json_messages.RTH,
        json_messages.NUM,
        json_messages.OP_CHECKPOINT,
    ]


def test_the_example_transaction_is_what_serve_sends():
    text = subsection("Messages")
    example = re.search(r"```json\n(.*?)```", text, re.S).group(1).splitlines()
    docs = [json.loads(line) for line in example]
    rows = [d for d in docs if d["payload"][0]["op"] not in ("begin", "commit")]
    c_tm = docs[-1]["tm"]
    batch = pa.RecordBatch.from_pydict(
        {
            "tx_seq": [7] * len(rows),
            "c_scn": [d["c_scn"] for d in rows],
            "c_tm": [c_tm] * len(rows),
            "xid": [d["xid"] for d in rows],
            "op": [d["payload"][0]["op"] for d in rows],
            "scn": [d["scn"] for d in rows],
            "tm": [d["tm"] if d["tm"] != c_tm else None for d in rows],
            "owner": [d["payload"][0]["schema"]["owner"] for d in rows],
            "table": [d["payload"][0]["schema"]["table"] for d in rows],
            "obj": [d["payload"][0]["schema"]["obj"] for d in rows],
            "rid": [d["payload"][0]["rid"] for d in rows],
            "before": [
                json.dumps(d["payload"][0]["before"], separators=(",", ":")) if "before" in d["payload"][0] else None
                for d in rows
            ],
            "after": [json.dumps(d["payload"][0]["after"], separators=(",", ":")) for d in rows],
            "sql": pa.array([None] * len(rows), pa.string()),
        }
    )
    builder = MessageBuilder(docs[0]["db"])
    data, _ = builder.add(batch)
    data += builder.end_of_file()
    assert [f.decode() for f in FrameReader(1 << 20).feed(data)] == example


def test_no_reader_is_sent_to_a_contracts_file():
    """The contracts file is not the users': docs, README and messages say it all themselves."""
    found = subprocess.run(
        [
            "grep",
            "-rniE",
            r"contracts? section|section [0-9]+ of the (external )?contract|contracts\.md",
            "docs",
            "README.md",
            "olr_buffer/cli",
            "olr_buffer/errors.py",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert found.stdout == "", found.stdout
