"""The JSON messages a sender streams after ``REPLICATE``, read by a receiver (docs/formats.md,
"Network protocol"): OpenLogReplicator's messages in the forms its format options give them, and
those of ``olr-buffer serve``, which are one of those forms.

What varies with OpenLogReplicator's ``format`` options, and how it is read here:

* the SCN: ``scn`` (a number) or ``scns`` (hex text, ``"0x00000000001a2b3c"``, option
  ``scn`` 1); by default only in a transaction's first message (option ``scn-type`` 1
  puts it in every message): :attr:`Received.scn` is None where it is absent;
* the time: ``tm`` (a number, taken as nanoseconds since the epoch: option
  ``timestamp`` 0, the default) or ``tms`` (text: nanoseconds, option 4, or ISO-8601,
  options 8 to 15, converted to nanoseconds); by default only in the first message;
* the transaction id: ``xid`` as hex (``"0x0007.01a.000004a1"``, the default) or decimal
  (``"7.26.1185"``) text, or other text, kept as it is; ``xidn`` (a number, option
  ``xid`` 2) is kept as its decimal text;
* ``rth``: the redo thread of the transaction (only when asked for);
* the payload: one entry per message (begin, a row, commit), or every row of a
  transaction in one message (option ``message`` 1: no ``begin``/``commit`` entry);
  ``chkpt`` entries are OpenLogReplicator's checkpoints, of no transaction;
* in a row entry: ``num`` (option ``message`` 2), ``schema.obj`` (``schema`` 4) and
  ``schema.columns`` (``schema`` 1, the table's columns, once per table unless
  ``schema`` 2), ``rid`` (``rid`` 1), ``offset`` and other fields, which are ignored.

``before`` and ``after`` are kept as the message's own JSON text of the object, byte for
byte: numbers keep every digit (Oracle ``NUMBER`` has up to 38), strings their escapes.
Unknown fields are ignored. Anything else (bytes that are not JSON, a field of the wrong
type, a time that is not a time) raises :class:`MessageError`, whose message is the
reason.
"""

from __future__ import annotations

import calendar
import re
from typing import Annotated

import msgspec

from ..errors import EXIT_BAD_INPUT
from .errors import ProtocolError
from .json_messages import (
    AFTER,
    BEFORE,
    C_IDX,
    C_SCN,
    DB,
    NUM,
    OBJ,
    OP,
    OWNER,
    PAYLOAD,
    RID,
    RTH,
    SCHEMA,
    SCHEMA_COLUMNS,
    SCN,
    SCNS,
    SQL,
    TABLE,
    TM,
    TMS,
    XID,
    XIDN,
)


class MessageError(ProtocolError):
    """A message of the stream that cannot be read: the sender's bad input."""

    exit_code = EXIT_BAD_INPUT


def _f(name: str):
    return msgspec.field(default=None, name=name)


# SCNs and positions are the protocol's uint64; olr-buffer's columns are int64 (Spark has
# no unsigned integers): a value above is refused, not wrapped
_U63 = Annotated[int, msgspec.Meta(ge=0, le=(1 << 63) - 1)]
_I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class Schema(msgspec.Struct, gc=False):
    """A row entry's ``schema``: the table, and (option ``schema`` 1) its columns as the
    message's JSON text."""

    owner: str | None = _f(OWNER)
    table: str | None = _f(TABLE)
    obj: _I64 | None = _f(OBJ)
    columns: msgspec.Raw = _f(SCHEMA_COLUMNS)


class Entry(msgspec.Struct, gc=False):
    """One entry of a message's payload. ``before``/``after``: the JSON text of the value
    as the message has it (:func:`object_text`), None when absent."""

    op: str = msgspec.field(name=OP)
    schema: Schema | None = _f(SCHEMA)
    rid: str | None = _f(RID)
    num: _I64 | None = _f(NUM)
    before: msgspec.Raw = _f(BEFORE)
    after: msgspec.Raw = _f(AFTER)
    sql: str | None = _f(SQL)


class _Message(msgspec.Struct, gc=False):
    scn: _U63 | None = _f(SCN)
    scns: str | None = _f(SCNS)
    tm: _I64 | None = _f(TM)
    tms: str | None = _f(TMS)
    c_scn: _U63 | None = _f(C_SCN)
    c_idx: _U63 | None = _f(C_IDX)
    xid: str | None = _f(XID)
    xidn: int | None = _f(XIDN)
    rth: _I64 | None = _f(RTH)
    db: str | None = _f(DB)
    payload: list[Entry] | None = _f(PAYLOAD)


_decode = msgspec.json.Decoder(_Message).decode
_any = msgspec.json.Decoder().decode


def _not_json(exc: msgspec.DecodeError) -> MessageError:
    reason = str(exc)
    if "UTF-8" in reason:  # msgspec 0.23 says "Invalid UTF-8 encoded string"; older ones raised UnicodeDecodeError
        return _not_utf8()
    if reason.startswith("JSON is malformed: "):
        reason = reason[len("JSON is malformed: ") :]
    return MessageError(f"not valid JSON ({reason})")


def _not_utf8() -> MessageError:
    return MessageError("not valid JSON (a string in it is not valid UTF-8)")


class Received:
    """A message, its fields in one form whatever the sender's format options: ``scn``
    and ``tm`` integers or None (absent), ``xid`` text or None, ``rth`` or None."""

    __slots__ = ("scn", "tm", "c_scn", "c_idx", "xid", "rth", "db", "payload")

    def __init__(
        self,
        scn: int | None,
        tm: int | None,
        c_scn: int | None,
        c_idx: int | None,
        xid: str | None,
        rth: int | None,
        db: str | None,
        payload: list[Entry],
    ) -> None:
        self.scn = scn
        self.tm = tm
        self.c_scn = c_scn
        self.c_idx = c_idx
        self.xid = xid
        self.rth = rth
        self.db = db
        self.payload = payload

    @property
    def position(self) -> tuple[int, int] | None:
        """``(c_scn, c_idx)``, or None when the message has neither."""
        if self.c_scn is None and self.c_idx is None:
            return None
        return (self.c_scn or 0, self.c_idx or 0)


def read_message(data: bytes) -> Received:
    """The message in ``data`` (one frame), or :class:`MessageError` with the reason."""
    try:
        m = _decode(data)
    except msgspec.ValidationError as exc:
        try:  # the typed decoder stops at the first wrong type, before it looks at the rest
            _any(data)
        except msgspec.DecodeError as syntax:
            raise _not_json(syntax) from None
        except UnicodeDecodeError:
            raise _not_utf8() from None
        raise MessageError(f"a field has the wrong type or is missing: {exc}") from None
    except msgspec.DecodeError as exc:
        raise _not_json(exc) from None
    except UnicodeDecodeError:
        raise _not_utf8() from None
    if m.payload is None:
        raise MessageError(f"no {PAYLOAD!r} field")
    scn = m.scn
    if scn is None and m.scns is not None:
        scn = _hex(m.scns, SCNS)
    tm = m.tm
    if tm is None and m.tms is not None:
        tm = parse_time(m.tms)
    xid = m.xid
    if xid is None and m.xidn is not None:
        xid = str(m.xidn)
    return Received(scn, tm, m.c_scn, m.c_idx, xid, m.rth, m.db, m.payload)


def object_text(raw: msgspec.Raw | None, field: str) -> str | None:
    """``before``/``after``: None when absent or null, else the object's JSON text exactly
    as the message has it; :class:`MessageError` for a value that is not an object."""
    if raw is None:
        return None
    b = bytes(raw)
    if b[:1] != b"{":
        if b == b"null":
            return None
        raise MessageError(f"{field!r} is not an object")
    try:
        return b.decode()
    except UnicodeDecodeError:
        raise MessageError(f"{field!r} is not valid UTF-8") from None


def raw_text(raw: msgspec.Raw | None) -> str | None:
    """A value kept as the message's own JSON text (``schema.columns``), or None."""
    if raw is None:
        return None
    b = bytes(raw)
    if b == b"null":
        return None
    try:
        return b.decode()
    except UnicodeDecodeError:
        raise MessageError("a value is not valid UTF-8") from None


def _hex(text: str, field: str) -> int:
    try:
        value = int(text, 16)
    except ValueError:
        raise MessageError(f"{field!r} is not a hexadecimal number: {text!r}") from None
    if not 0 <= value < 1 << 63:
        raise MessageError(f"{field!r} is out of range: {text!r}")
    return value


_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z?")


def parse_time(text: str) -> int:
    """``tms`` in nanoseconds since the epoch: a number in text (nanoseconds), or an
    ISO-8601 time in UTC (``2022-05-01T06:00:00.123456789Z``, ``2022-05-01 06:00:00``)."""
    t = text.strip()
    if t.lstrip("-").isdigit():
        value = int(t)
        if not -(1 << 63) <= value < 1 << 63:
            raise MessageError(f"{TMS!r} is out of range: {text!r}")
        return value
    m = _ISO.fullmatch(t)
    if m is None:
        raise MessageError(f"{TMS!r} is not a time: {text!r}")
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    try:
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        raise MessageError(f"{TMS!r} is not a time: {text!r}") from None
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        raise MessageError(f"{TMS!r} is not a time: {text!r}")
    fraction = m.group(7) or ""
    value = seconds * 1_000_000_000 + int(fraction.ljust(9, "0") or 0)
    if not -(1 << 63) <= value < 1 << 63:  # nanoseconds since the epoch in int64: 1677-09-21 to 2262-04-11
        raise MessageError(f"{TMS!r} is out of range (nanoseconds since the epoch in 64 bits): {text!r}")
    return value
