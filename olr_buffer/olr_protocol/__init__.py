"""OpenLogReplicator's network protocol (docs/formats.md, "Network protocol"), for both directions: the
framing, the protobuf handshake messages and their codes, and the JSON messages.

``serve`` sends it (:class:`MessageBuilder`); the OpenLogReplicator source
(``sources/olr``) receives it, and reads the messages with :func:`read_message`
in every form OpenLogReplicator's format options give them, with the same names.
"""

from .errors import FrameTooLargeError, MalformedMessageError, ProtocolError, StreamError
from .framing import MAX_REQUEST_BYTES, FrameReader, frame, frame_header
from .json_messages import COLUMNS, MessageBuilder, Position
from .received import Entry, MessageError, Received, object_text, parse_time, raw_text, read_message
from .requests import SCN_NOW, RedoRequest, RedoResponse, RequestCode, ResponseCode, code_name

__all__ = [
    "COLUMNS",
    "Entry",
    "MAX_REQUEST_BYTES",
    "FrameReader",
    "FrameTooLargeError",
    "MalformedMessageError",
    "MessageBuilder",
    "MessageError",
    "Position",
    "Received",
    "ProtocolError",
    "RedoRequest",
    "RedoResponse",
    "RequestCode",
    "ResponseCode",
    "SCN_NOW",
    "StreamError",
    "code_name",
    "frame",
    "frame_header",
    "object_text",
    "parse_time",
    "raw_text",
    "read_message",
]
