"""OpenLogReplicator's network protocol (contracts section 6), for both directions: the
framing, the protobuf handshake messages and their codes, and the JSON messages.

``serve`` sends it; a source that receives it (contracts section 7) reads it with the
same names.
"""

from .errors import FrameTooLargeError, MalformedMessageError, ProtocolError, StreamError
from .framing import MAX_REQUEST_BYTES, FrameReader, frame, frame_header
from .json_messages import COLUMNS, MessageBuilder, Position
from .redo import RedoRequest, RedoResponse, RequestCode, ResponseCode, code_name

__all__ = [
    "COLUMNS",
    "MAX_REQUEST_BYTES",
    "FrameReader",
    "FrameTooLargeError",
    "MalformedMessageError",
    "MessageBuilder",
    "Position",
    "ProtocolError",
    "RedoRequest",
    "RedoResponse",
    "RequestCode",
    "ResponseCode",
    "StreamError",
    "code_name",
    "frame",
    "frame_header",
]
