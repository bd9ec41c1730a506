"""The logical replication stream: CopyData framing and ``pgoutput`` messages (pure, no I/O).

Framing (what the walsender sends inside COPY BOTH, and what we answer):

* ``w`` XLogData: ``data_start``, ``wal_end``, ``send_time`` (Int64 each), then one pgoutput message;
* ``k`` primary keepalive: ``wal_end``, ``send_time``, ``reply`` (Byte1: answer now);
* ``r`` standby status update (ours): write, flush, apply LSNs, ``send_time``, ``reply``.

pgoutput messages, protocol versions 1 and 2 (``streaming``): B, C, O, R, Y, I, U, D, T,
M, and, for streamed in-progress transactions, S, E, c, A. Inside a stream block
(between S and E) R, Y, I, U, D, T and M start with the (sub)transaction's xid.
Tuple data columns are ``n`` (null), ``u`` (unchanged TOASTed value, not sent), ``t``
(text) and ``b`` (binary).

Every malformed input raises :class:`PgoutputError` with a one-line reason.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ...errors import OlrBufferError

PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01 in microseconds since the Unix epoch


class PgoutputError(OlrBufferError):
    """A replication message that cannot be decoded."""


UNCHANGED = object()  # a TOASTed value the server did not send ('u')


# -- framing ---------------------------------------------------------------------------


# XLogData, Insert, Update and Delete are made once per row: plain slotted dataclasses, as a
# frozen one's __init__ sets each field through object.__setattr__; nothing changes them.
@dataclass(slots=True)
class XLogData:
    data_start: int
    wal_end: int
    send_time: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class Keepalive:
    wal_end: int
    send_time: int
    reply: bool


_W = struct.Struct("!QQq")
_K = struct.Struct("!Qq?")
_R = struct.Struct("!cQQQq?")
_I32 = struct.Struct("!i")


def decode_frame(data: bytes) -> XLogData | Keepalive:
    """One CopyData message from the walsender."""
    if not data:
        raise PgoutputError("empty replication message")
    kind = data[0:1]
    if kind == b"w":
        if len(data) < 1 + _W.size:
            raise PgoutputError(f"XLogData message too short ({len(data)} bytes)")
        start, end, t = _W.unpack_from(data, 1)
        return XLogData(start, end, t, bytes(data[1 + _W.size :]))
    if kind == b"k":
        if len(data) < 1 + _K.size:
            raise PgoutputError(f"keepalive message too short ({len(data)} bytes)")
        end, t, reply = _K.unpack_from(data, 1)
        return Keepalive(end, t, bool(reply))
    raise PgoutputError(f"unknown replication message type {kind!r}")


def encode_status(write_lsn: int, flush_lsn: int, apply_lsn: int, send_time_us: int, reply: bool = False) -> bytes:
    """A standby status update (``r``); ``send_time_us`` is microseconds since the Unix epoch."""
    return _R.pack(b"r", write_lsn, flush_lsn, apply_lsn, send_time_us - PG_EPOCH_US, reply)


def lsn_text(lsn: int) -> str:
    return f"{lsn >> 32:X}/{lsn & 0xFFFFFFFF:X}"


def parse_lsn(text: str) -> int:
    hi, _, lo = text.partition("/")
    return (int(hi, 16) << 32) | int(lo, 16)


def pg_time_ns(us: int) -> int:
    """A server timestamp (microseconds since 2000-01-01) as nanoseconds since the Unix epoch."""
    return (us + PG_EPOCH_US) * 1000


# -- pgoutput messages -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Column:
    name: str
    type_oid: int
    key: bool
    type_mod: int = -1  # atttypmod: numeric(p,s), varchar(n), timestamp(p) ...; -1 none


@dataclass(frozen=True, slots=True)
class Begin:
    final_lsn: int
    commit_time: int  # ns since the Unix epoch
    xid: int


@dataclass(frozen=True, slots=True)
class Commit:
    commit_lsn: int
    end_lsn: int
    commit_time: int


@dataclass(frozen=True, slots=True)
class Origin:
    commit_lsn: int
    name: str


@dataclass(frozen=True, slots=True)
class Relation:
    xid: int | None
    oid: int
    schema: str
    name: str
    replica_identity: str
    columns: tuple[Column, ...]


@dataclass(frozen=True, slots=True)
class TypeInfo:
    xid: int | None
    oid: int
    schema: str
    name: str


Tuple = tuple  # of None (null), UNCHANGED, or bytes (text or binary form)


@dataclass(slots=True)
class Insert:
    xid: int | None
    relation: int
    new: Tuple


@dataclass(slots=True)
class Update:
    xid: int | None
    relation: int
    old: Tuple | None
    old_kind: str | None  # 'K' key columns only, 'O' the whole old row, None not sent
    new: Tuple


@dataclass(slots=True)
class Delete:
    xid: int | None
    relation: int
    old: Tuple
    old_kind: str


@dataclass(frozen=True, slots=True)
class Truncate:
    xid: int | None
    relations: tuple[int, ...]
    options: int


@dataclass(frozen=True, slots=True)
class LogicalMessage:
    xid: int | None
    transactional: bool
    lsn: int
    prefix: str
    content: bytes


@dataclass(frozen=True, slots=True)
class StreamStart:
    xid: int
    first_segment: bool


@dataclass(frozen=True, slots=True)
class StreamStop:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommit:
    xid: int
    commit_lsn: int
    end_lsn: int
    commit_time: int


@dataclass(frozen=True, slots=True)
class StreamAbort:
    xid: int
    subxid: int


Message = (
    Begin
    | Commit
    | Origin
    | Relation
    | TypeInfo
    | Insert
    | Update
    | Delete
    | Truncate
    | LogicalMessage
    | StreamStart
    | StreamStop
    | StreamCommit
    | StreamAbort
)


def _tuple_data(data: bytes, pos: int, kind: str) -> tuple[Tuple, int]:
    """The TupleData at ``pos`` and the position after it. The hot path of the decoder:
    one call per row, no method call per column."""
    n = len(data)
    if pos + 2 > n:
        raise PgoutputError(f"message {kind!r} ends inside its tuple column count (at byte {pos} of {n})")
    count = (data[pos] << 8) | data[pos + 1]
    pos += 2
    values: list = []
    append = values.append
    unpack = _I32.unpack_from
    for i in range(count):
        if pos >= n:
            raise PgoutputError(f"message {kind!r} ends inside column {i} (at byte {pos} of {n})")
        k = data[pos]
        pos += 1
        if k == 0x74 or k == 0x62:  # t, b
            if pos + 4 > n:
                raise PgoutputError(f"message {kind!r} ends inside the length of column {i}")
            (length,) = unpack(data, pos)
            pos += 4
            end = pos + length
            if length < 0:
                raise PgoutputError(f"message {kind!r}: column {i} has a negative length {length}")
            if end > n:
                raise PgoutputError(f"message {kind!r} ends inside column {i} (at byte {pos} of {n})")
            append(data[pos:end])
            pos = end
        elif k == 0x6E:  # n
            append(None)
        elif k == 0x75:  # u
            append(UNCHANGED)
        else:
            raise PgoutputError(f"message {kind!r}: column {i} has an unknown kind {bytes([k])!r}")
    return tuple(values), pos


_INSERT_HEAD = struct.Struct("!IB")  # relation OID, tuple tag
_STREAM_INSERT_HEAD = struct.Struct("!IIB")  # xid, relation OID, tuple tag


def _insert(data: bytes, in_stream: bool) -> Insert | None:
    """An Insert decoded without a cursor (the common message), or None if it is not
    well-formed: the general path then raises the precise error."""
    if in_stream:
        if len(data) < 10:
            return None
        xid, rel, tag = _STREAM_INSERT_HEAD.unpack_from(data, 1)
        pos = 10
    else:
        if len(data) < 6:
            return None
        rel, tag = _INSERT_HEAD.unpack_from(data, 1)
        xid, pos = None, 6
    if tag != 0x4E:  # N
        return None
    try:
        new, end = _tuple_data(data, pos, "I")
    except PgoutputError:
        return None
    if end != len(data):
        return None
    return Insert(xid, rel, new)


class _Cursor:
    __slots__ = ("data", "pos", "kind")

    def __init__(self, data: bytes, kind: str) -> None:
        self.data = data
        self.pos = 1
        self.kind = kind

    def _need(self, n: int, what: str) -> None:
        if self.pos + n > len(self.data):
            raise PgoutputError(
                f"message {self.kind!r} ends inside its {what} (at byte {self.pos} of {len(self.data)})"
            )

    def u8(self, what: str) -> int:
        self._need(1, what)
        v = self.data[self.pos]
        self.pos += 1
        return v

    def u16(self, what: str) -> int:
        self._need(2, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 2], "big")
        self.pos += 2
        return v

    def u32(self, what: str) -> int:
        self._need(4, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 4], "big")
        self.pos += 4
        return v

    def i32(self, what: str) -> int:
        self._need(4, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 4], "big", signed=True)
        self.pos += 4
        return v

    def u64(self, what: str) -> int:
        self._need(8, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 8], "big")
        self.pos += 8
        return v

    def i64(self, what: str) -> int:
        self._need(8, what)
        v = int.from_bytes(self.data[self.pos : self.pos + 8], "big", signed=True)
        self.pos += 8
        return v

    def string(self, what: str) -> str:
        end = self.data.find(b"\0", self.pos)
        if end < 0:
            raise PgoutputError(f"message {self.kind!r}: {what} has no terminating zero byte")
        raw = self.data[self.pos : end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise PgoutputError(f"message {self.kind!r}: {what} is not valid UTF-8") from None

    def take(self, n: int, what: str) -> bytes:
        self._need(n, what)
        v = self.data[self.pos : self.pos + n]
        self.pos += n
        return v

    def tuple_data(self) -> Tuple:
        values, self.pos = _tuple_data(self.data, self.pos, self.kind)
        return values

    def tuple_tag(self, allowed: bytes) -> str:
        tag = self.u8("tuple tag")
        if tag not in allowed:
            raise PgoutputError(f"message {self.kind!r}: unexpected tuple tag {bytes([tag])!r}")
        return chr(tag)

    def done(self) -> None:
        if self.pos != len(self.data):
            raise PgoutputError(f"message {self.kind!r} has {len(self.data) - self.pos} unexpected trailing byte(s)")


def decode_message(data: bytes, in_stream: bool = False) -> Message:
    """One pgoutput message; ``in_stream``: between Stream Start and Stream Stop, where
    data and schema messages start with a transaction id."""
    if not data:
        raise PgoutputError("empty pgoutput message")
    if data[0] == 0x49:  # I
        insert = _insert(data, in_stream)
        if insert is not None:
            return insert
    kind = chr(data[0])
    c = _Cursor(data, kind)
    msg: Message
    if kind == "B":
        msg = Begin(c.u64("final LSN"), pg_time_ns(c.i64("commit time")), c.u32("xid"))
    elif kind == "C":
        c.u8("flags")
        msg = Commit(c.u64("commit LSN"), c.u64("end LSN"), pg_time_ns(c.i64("commit time")))
    elif kind == "O":
        msg = Origin(c.u64("commit LSN"), c.string("origin name"))
    elif kind == "S":
        msg = StreamStart(c.u32("xid"), c.u8("first segment flag") == 1)
    elif kind == "E":
        msg = StreamStop()
    elif kind == "c":
        stream_xid = c.u32("xid")
        c.u8("flags")
        msg = StreamCommit(stream_xid, c.u64("commit LSN"), c.u64("end LSN"), pg_time_ns(c.i64("commit time")))
    elif kind == "A":
        msg = StreamAbort(c.u32("xid"), c.u32("subtransaction xid"))
    else:
        xid = c.u32("xid") if in_stream else None
        if kind == "R":
            oid = c.u32("relation OID")
            schema = c.string("schema name")
            name = c.string("relation name")
            ident = chr(c.u8("replica identity"))
            cols = []
            for _ in range(c.u16("column count")):
                flags = c.u8("column flags")
                col_name, type_oid = c.string("column name"), c.u32("column type OID")
                cols.append(Column(col_name, type_oid, bool(flags & 1), c.i32("column type modifier")))
            msg = Relation(xid, oid, schema, name, ident, tuple(cols))
        elif kind == "Y":
            msg = TypeInfo(xid, c.u32("type OID"), c.string("type schema"), c.string("type name"))
        elif kind == "I":
            rel = c.u32("relation OID")
            c.tuple_tag(b"N")
            msg = Insert(xid, rel, c.tuple_data())
        elif kind == "U":
            rel = c.u32("relation OID")
            tag = c.tuple_tag(b"KON")
            old = None
            old_kind = None
            if tag != "N":
                old_kind = tag
                old = c.tuple_data()
                c.tuple_tag(b"N")
            msg = Update(xid, rel, old, old_kind, c.tuple_data())
        elif kind == "D":
            rel = c.u32("relation OID")
            tag = c.tuple_tag(b"KO")
            msg = Delete(xid, rel, c.tuple_data(), tag)
        elif kind == "T":
            n = c.u32("relation count")
            options = c.u8("options")
            if n > len(data):
                raise PgoutputError(f"message 'T' names {n} relations in {len(data)} bytes")
            msg = Truncate(xid, tuple(c.u32("relation OID") for _ in range(n)), options)
        elif kind == "M":
            flags = c.u8("flags")
            lsn = c.u64("LSN")
            prefix = c.string("prefix")
            length = c.u32("content length")
            msg = LogicalMessage(xid, bool(flags & 1), lsn, prefix, bytes(c.take(length, "content")))
        else:
            raise PgoutputError(f"unknown pgoutput message type {kind!r}")
    c.done()
    return msg


class StreamDecoder:
    """Decodes the messages of one replication connection in order: it knows whether a
    stream block is open (S..E), which decides the layout of data messages."""

    def __init__(self) -> None:
        self.in_stream = False

    def decode(self, data: bytes) -> Message:
        msg = decode_message(data, self.in_stream)
        if isinstance(msg, StreamStart):
            if self.in_stream:
                raise PgoutputError("Stream Start inside an open stream block")
            self.in_stream = True
        elif isinstance(msg, StreamStop):
            if not self.in_stream:
                raise PgoutputError("Stream Stop outside a stream block")
            self.in_stream = False
        return msg
