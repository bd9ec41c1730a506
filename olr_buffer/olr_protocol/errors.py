"""Errors of OpenLogReplicator's network protocol."""

from __future__ import annotations

from ..errors import OlrBufferError


class ProtocolError(OlrBufferError):
    """Bytes on the connection that the protocol does not allow."""


class FrameTooLargeError(ProtocolError):
    """A frame announces more bytes than the reader accepts."""


class MalformedMessageError(ProtocolError):
    """A frame's bytes are not a valid protobuf message of the expected type."""


class StreamError(OlrBufferError):
    """The changefeed's rows cannot be streamed as the protocol says: a commit SCN that goes
    back, an op it cannot carry."""
