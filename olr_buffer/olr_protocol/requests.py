"""The protocol's requests and replies, in protobuf: ``RedoRequest`` (receiver to sender) and
``RedoResponse`` (sender to receiver), with their codes (``requests.proto`` beside this
module has them as a ``.proto``).

Encoded and decoded here, by hand: the two messages have a handful of scalar fields, so
the protobuf wire format they need (varints and length-delimited strings) fits in this
module, without generated code or a protobuf runtime to keep in step with it, and
without a build step at install. Decoding follows protobuf's rules: fields in any order,
the last of a repeated scalar or of a ``oneof`` wins, unknown fields are skipped (by their
wire type), and an unknown enum value is kept as its number; anything else (a truncated
varint or string, a wire type that does not match the field, invalid UTF-8) raises
:class:`MalformedMessageError`. Encoding writes fields in field-number order, leaves out
fields at their default unless they have explicit presence (``optional``, ``oneof``), as
protobuf does: the bytes are those of Google's runtime.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from .errors import MalformedMessageError

#: OpenLogReplicator's ``Scn::none()`` (``Ctx::ZERO_SCN`` before 1.6): in ``START`` "from
#: now on" (WriterStream::processStart); any other value, 0 too, is an SCN to start at
SCN_NOW = (1 << 64) - 1


class RequestCode(IntEnum):
    INFO = 0
    START = 1
    CONTINUE = 2
    CONFIRM = 3


class ResponseCode(IntEnum):
    READY = 0
    FAILED_START = 1
    STARTING = 2
    ALREADY_STARTED = 3
    REPLICATE = 4
    PAYLOAD = 5
    INVALID_DATABASE = 6
    INVALID_COMMAND = 7


# wire types
_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5
_U64_LIMIT = 1 << 64


def code_name(code: int, codes: type[IntEnum]) -> str:
    """``START``, or the number of a code the enum does not know."""
    try:
        return codes(code).name
    except ValueError:
        return str(code)


@dataclass(slots=True)
class RedoRequest:
    """A receiver's request. ``scn``, ``tms`` and ``tm_rel`` are a ``oneof`` (at most one
    is not ``None``); ``seq``, ``c_scn`` and ``c_idx`` are ``None`` when absent."""

    code: int
    database_name: str = ""
    scn: int | None = None
    tms: str | None = None
    tm_rel: int | None = None
    seq: int | None = None
    c_scn: int | None = None
    c_idx: int | None = None

    def encode(self) -> bytes:
        out = bytearray()
        if self.code:
            _put_varint(out, 1, self.code)
        if self.database_name:
            _put_bytes(out, 2, self.database_name.encode())
        if self.scn is not None:
            _put_varint(out, 3, self.scn)
        elif self.tms is not None:
            _put_bytes(out, 4, self.tms.encode())
        elif self.tm_rel is not None:
            _put_varint(out, 5, self.tm_rel % _U64_LIMIT)  # int64: two's complement in 10 bytes
        if self.seq is not None:
            _put_varint(out, 6, self.seq)
        if self.c_scn is not None:
            _put_varint(out, 8, self.c_scn)
        if self.c_idx is not None:
            _put_varint(out, 9, self.c_idx)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> RedoRequest:
        req = cls(code=0)
        for field, wire, value in _fields(data):
            if field == 1:
                req.code = _as_varint(field, wire, value)
            elif field == 2:
                req.database_name = _as_text(field, wire, value)
            elif field == 3:
                req.scn, req.tms, req.tm_rel = _as_varint(field, wire, value), None, None
            elif field == 4:
                req.scn, req.tms, req.tm_rel = None, _as_text(field, wire, value), None
            elif field == 5:
                v = _as_varint(field, wire, value)
                req.scn, req.tms, req.tm_rel = None, None, v - _U64_LIMIT if v >= 1 << 63 else v
            elif field == 6:
                req.seq = _as_varint(field, wire, value)
            elif field == 8:
                req.c_scn = _as_varint(field, wire, value)
            elif field == 9:
                req.c_idx = _as_varint(field, wire, value)
            # field 7 (schema filters) and unknown fields: skipped
        return req

    def describe(self) -> str:
        """The request in one line for a log: ``START database 'ORCL' scn 0``."""
        parts = [code_name(self.code, RequestCode), f"database {self.database_name!r}"]
        for name in ("scn", "tms", "tm_rel", "seq", "c_scn", "c_idx"):
            value = getattr(self, name)
            if value is not None:
                parts.append(f"{name} {value!r}" if isinstance(value, str) else f"{name} {value}")
        return " ".join(parts)


@dataclass(slots=True)
class RedoResponse:
    """The sender's reply to ``INFO``, ``START`` and ``CONTINUE``; ``scn`` is ``None``
    when absent (a ``oneof``), ``c_scn`` and ``c_idx`` are 0 when absent."""

    code: int
    scn: int | None = None
    c_scn: int = 0
    c_idx: int = 0

    def encode(self) -> bytes:
        out = bytearray()
        if self.code:
            _put_varint(out, 1, self.code)
        if self.scn is not None:
            _put_varint(out, 2, self.scn)
        if self.c_scn:
            _put_varint(out, 10, self.c_scn)
        if self.c_idx:
            _put_varint(out, 11, self.c_idx)
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> RedoResponse:
        resp = cls(code=0)
        for field, wire, value in _fields(data):
            if field == 1:
                resp.code = _as_varint(field, wire, value)
            elif field == 2:
                resp.scn = _as_varint(field, wire, value)
            elif field == 3:  # scns, the other member of the scn oneof: clears scn
                _as_text(field, wire, value)
                resp.scn = None
            elif field == 10:
                resp.c_scn = _as_varint(field, wire, value)
            elif field == 11:
                resp.c_idx = _as_varint(field, wire, value)
        return resp


# -- the wire format -------------------------------------------------------------------


def _put_varint(out: bytearray, field: int, value: int) -> None:
    if not 0 <= value < _U64_LIMIT:
        raise ValueError(f"field {field}: {value} is not a uint64")
    out.append(field << 3 | _VARINT)
    _varint(out, value)


def _put_bytes(out: bytearray, field: int, value: bytes) -> None:
    out.append(field << 3 | _LEN)
    _varint(out, len(value))
    out += value


def _varint(out: bytearray, value: int) -> None:
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    end = len(data)
    while True:
        if pos >= end:
            raise MalformedMessageError("truncated varint")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 70:
            raise MalformedMessageError("varint longer than 10 bytes")
    if value >= _U64_LIMIT:
        raise MalformedMessageError("varint above 64 bits")
    return value, pos


def _fields(data: bytes):
    """``(field number, wire type, value)`` of each field: an int for a varint, bytes
    for a length-delimited field, None for a fixed-width one (skipped)."""
    pos = 0
    end = len(data)
    while pos < end:
        key, pos = _read_varint(data, pos)
        field, wire = key >> 3, key & 7
        value: int | bytes | None
        if field == 0:
            raise MalformedMessageError("field number 0")
        if wire == _VARINT:
            value, pos = _read_varint(data, pos)
        elif wire == _LEN:
            length, pos = _read_varint(data, pos)
            if length > end - pos:
                raise MalformedMessageError(f"field {field}: {length} bytes announced, {end - pos} left")
            value, pos = data[pos : pos + length], pos + length
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            if width > end - pos:
                raise MalformedMessageError(f"field {field}: truncated fixed-width value")
            value, pos = None, pos + width
        else:  # 3, 4: groups (deprecated, never in these messages); 6, 7: invalid
            raise MalformedMessageError(f"field {field}: wire type {wire} is not allowed here")
        yield field, wire, value


def _as_varint(field: int, wire: int, value) -> int:
    if wire != _VARINT:
        raise MalformedMessageError(f"field {field}: wire type {wire}, expected a varint")
    return value


def _as_text(field: int, wire: int, value) -> str:
    if wire != _LEN:
        raise MalformedMessageError(f"field {field}: wire type {wire}, expected a string")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedMessageError(f"field {field}: not valid UTF-8") from None
