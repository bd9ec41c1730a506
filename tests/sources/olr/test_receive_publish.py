"""Whatever the OpenLogReplicator receiver accepts, the changefeed publishes.

A message the receiver takes goes to the queue at once; if the writer then cannot write
it, every restart stops at the same transaction: a poisoned queue. So each message is
either refused when it arrives (one line, nothing of it queued) or its rows are published.
Random streams of OpenLogReplicator's messages, with every field at the edges of what the
protocol and the changefeed's types allow (no owner, no schema, obj and xidn beyond
int64, times at and beyond the int64 nanoseconds, strings with lone surrogates, objects
with any JSON in them, positions that go back), go through the real receiver into a real
queue, then through the dispatcher into a real changefeed writer: whatever the receiver
did not refuse is published, row for row."""

from __future__ import annotations

import json
import socket
import tempfile

import pyarrow.parquet as pq
from hypothesis import event, given
from hypothesis import strategies as st

from olr_buffer.changes import COMMIT, ROW_CODES
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.sinks.parquet.writer import ChangefeedWriter
from olr_buffer.sources.olr import OlrReceiver, OlrStreamError, parse_location
from olr_buffer.testing import MemoryQueue
from tests.sources.olr.test_receiver import records

I63 = (1 << 63) - 1
NORMAL = {
    "int": st.integers(1, 10**6),
    "name": st.sampled_from(["HR", "EMP", "OBJ_87705", "T", "Zażółć", 'o"q']),
    "text": st.text(max_size=8),
    # in row images any JSON number goes (an Oracle NUMBER has up to 38 digits)
    "number": st.one_of(st.integers(-(10**38), 10**38), st.floats(allow_nan=False, allow_infinity=False)),
    "time": st.integers(0, I63).map(str),
    "op": st.sampled_from(["c", "u", "d", "ddl"]),
}
EDGE = {
    "int": st.sampled_from([0, -1, I63, I63 + 1, -(1 << 63), -(1 << 63) - 1, 1 << 64, (1 << 64) - 1]),
    "name": st.one_of(st.text(max_size=8), st.sampled_from(["", "\ud800", "\x00"])),
    "text": st.sampled_from(["", "\ud800", "a\udfffb", "\x00"]),
    "number": st.sampled_from([I63 + 1, -(1 << 64), 1e308]),
    "time": st.sampled_from(
        [
            "2022-05-01T06:00:00.123Z",
            "2262-04-11T23:47:16.854775807Z",
            "2262-04-12T00:00:00Z",
            "1677-09-21T00:12:43.145224192Z",
            "1677-09-21T00:00:00Z",
            "9999-12-31 23:59:59",
            "0001-01-01T00:00:00Z",
            str(-(1 << 63)),
        ]
    ),
    "op": st.sampled_from(["chkpt", "lob", "begin", ""]),
}
COLUMNS = [
    {"name": "ID", "type": "number", "precision": 10, "scale": 0, "nullable": False},
    {"name": "NAME", "type": "varchar2", "length": 40, "nullable": True},
]


class Values:
    """The values of one stream: a clean stream (half of them, so that most publish
    something) has none at the edges; the others have one in five."""

    def __init__(self, draw, clean: bool) -> None:
        self.draw = draw
        self.clean = clean

    def __call__(self, kind: str):
        if self.clean:
            return self.draw(NORMAL[kind])
        return self.draw(st.one_of(*[NORMAL[kind]] * 4, EDGE[kind]))

    def maybe(self, kind: str):
        return None if self.draw(st.integers(0, 9)) == 0 else self(kind)

    def json(self, depth: int = 0):
        kind = self.draw(
            st.sampled_from(
                ["null", "bool", "number", "text", "list", "object"]
                if depth < 2
                else ["null", "bool", "number", "text"]
            )
        )
        if kind == "null":
            return None
        if kind == "bool":
            return self.draw(st.booleans())
        if kind in ("number", "text"):
            return self(kind)
        n = self.draw(st.integers(0, 3))
        if kind == "list":
            return [self.json(depth + 1) for _ in range(n)]
        return {self("name"): self.json(depth + 1) for _ in range(n)}


def schema(v: Values) -> dict | None:
    """A row's ``schema``, as OpenLogReplicator sends it or not quite: owner and obj may be
    absent (schemaless mode, an object it cannot name), even the table, or all of it."""
    if not v.clean and v.draw(st.integers(0, 9)) == 0:
        return None
    doc = {}
    for key, kind in (("owner", "name"), ("table", "name"), ("obj", "int")):
        if key == "table" and v.clean:
            doc[key] = v(kind)  # OpenLogReplicator names every row's table
        elif v.draw(st.integers(0, 5)):
            doc[key] = v.maybe(kind)
    if v.draw(st.integers(0, 4)) == 0:
        doc["columns"] = COLUMNS if v.clean else v.draw(st.sampled_from([COLUMNS, [], [{"name": "X"}], None]))
    return doc


def entry(v: Values) -> dict:
    e: dict = {"op": v("op")}
    s = schema(v)
    if s is not None:
        e["schema"] = s
    if v.draw(st.booleans()):
        e["rid"] = v.maybe("text")
    for key in ("before", "after"):
        wanted = (key == "before") == (e["op"] in ("u", "d")) and e["op"] != "ddl"  # what the op has
        if v.clean and wanted or v.draw(st.integers(0, 2)) == 0:
            e[key] = (
                {v("name"): v.json() for _ in range(v.draw(st.integers(0, 4)))}
                if v.clean or v.draw(st.integers(0, 4))
                else v.json()
            )
    if e["op"] == "ddl" or v.draw(st.integers(0, 5)) == 0:
        e["sql"] = v("text") if v.clean else v.maybe("text")
    if v.draw(st.integers(0, 5)) == 0:
        e["num"] = v("int")
    return e


@st.composite
def streams(draw):
    """Transactions (begin, rows, commit; or one message each), with the header fields of
    OpenLogReplicator's format options in every form, positions mostly increasing."""
    v = Values(draw, draw(st.booleans()))
    out: list[bytes] = []
    c_scn, idx = 100, 0
    used: set = set()
    ascii_only = draw(st.booleans())  # \u escapes, or UTF-8 as it is (a lone surrogate: bytes that are not UTF-8)

    def encode(doc: dict) -> bytes:
        return json.dumps(doc, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass")

    for n in range(draw(st.integers(1, 5))):
        whole = draw(st.booleans())
        c_scn += draw(st.sampled_from([1, 7] if v.clean else [1, 7, 1, 7, 0, -3]))
        if c_scn <= 0 or (not v.clean and draw(st.integers(0, 9)) == 0):
            c_scn = v("int")
        xid_form = draw(st.sampled_from(["xid", "xidn"] if v.clean else ["xid", "xidn", "xid", "xidn", "none"]))
        # each transaction its own XID, as Oracle's are (one XID is one transaction: contract section 1)
        xid = (
            {"xid": f"0x0007.01a.{n:08x}" if v.clean else f"{v('text')}{n}"}
            if xid_form == "xid"
            else {"xidn": v("int")}
            if xid_form == "xidn"
            else {}
        )
        while "xidn" in xid and str(xid["xidn"]) in used:
            xid["xidn"] = n + 10**7 + len(used)
        while "xid" in xid and xid["xid"] in used:
            xid["xid"] += "'"
        used.add(xid["xid"] if "xid" in xid else str(xid.get("xidn")))
        scn = draw(st.integers(1, c_scn)) if 0 < c_scn <= I63 and (v.clean or draw(st.booleans())) else v("int")

        def header(first: bool, *, scn: int = scn, c_scn: int = c_scn, xid: dict = xid) -> dict:
            nonlocal idx
            h: dict = {}
            if first or draw(st.booleans()):
                h.update(draw(st.sampled_from([{"scn": scn}, {"scns": f"0x{scn % (1 << 64):x}"}, {}])))
                h.update(draw(st.sampled_from([{"tm": v("int")}, {"tms": v("time")}, {}])))
            h["c_scn"], h["c_idx"] = c_scn, idx
            idx += 1
            h.update(xid)
            if draw(st.integers(0, 3)) == 0:
                h["rth"] = draw(st.integers(1, 4)) if v.clean else v("int")
            return h

        rows = [entry(v) for _ in range(draw(st.integers(0, 4)))]
        if whole:
            out.append(encode({**header(True), "payload": rows}))
        else:
            out.append(encode({**header(True), "payload": [{"op": "begin"}]}))
            for r in rows:
                out.append(encode({**header(False), "payload": [r]}))
            out.append(encode({**header(False), "payload": [{"op": "commit"}]}))
    return out


@given(streams())
def test_whatever_the_receiver_accepts_is_published(stream):
    queue = MemoryQueue()
    receiver = OlrReceiver(queue, parse_location("olr://127.0.0.1:9/ORCL"))
    receiver._skip_through = (0, -1)  # as the handshake of a new queue leaves it
    ours, theirs = socket.socketpair()  # where a checkpoint's CONFIRM goes
    refused = None
    try:
        for data in stream:
            try:
                receiver._message(data, ours)
            except OlrStreamError as exc:  # refused, in one line: the run stops there
                refused = str(exc)
                assert "\n" not in refused
                break
    finally:
        receiver._use(1)
        receiver._append()  # what the builder holds is appended when a run stops, as a session does
        ours.close()
        theirs.close()
    event(f"transactions published: {min(receiver.transactions, 3)}{'+' if receiver.transactions >= 3 else ''}")
    event("refused: " + (refused.split(": ", 2)[-1][:40] if refused else "nothing"))
    pending: dict = {}
    rows = 0  # rows of the transactions whose commit is in the queue: each must be published
    for _, xid, rec in records(queue):
        if rec[0] in ROW_CODES:
            pending[xid] = pending.get(xid, 0) + 1
        elif rec[0] == COMMIT:
            rows += pending.pop(xid, 0)
    with tempfile.TemporaryDirectory() as cf:
        writer = ChangefeedWriter(cf, durable=False)
        Dispatcher(queue, writer, [1]).poll(max_blocks=10_000)
        writer.flush()
        writer.close()
        table = pq.read_table(cf) if writer.next_tx_seq else None
    assert writer.next_tx_seq == receiver.transactions, refused
    assert (table.num_rows if table is not None else 0) == rows
    if table is not None:
        for column in ("owner", "table", "xid", "op", "scn", "c_scn"):
            assert table.column(column).null_count == 0
