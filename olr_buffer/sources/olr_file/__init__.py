"""OpenLogReplicator's file-writer output as a source: ``olr+file://OUTPUT``, the JSON
messages OpenLogReplicator writes with ``"writer": {"type": "file", "output": OUTPUT}``,
read into the same queue as the other sources, to their end (``replay``) or followed as
they are written (``run``). See docs/formats.md, "OpenLogReplicator's file output"."""

from .errors import OlrFileError
from .location import Output, parse_output
from .reader import OlrFileReader
from .source import KIND, OlrFileSource
from .state import STATE_KEY, OlrFileState

__all__ = [
    "KIND",
    "STATE_KEY",
    "OlrFileError",
    "OlrFileReader",
    "OlrFileSource",
    "OlrFileState",
    "Output",
    "parse_output",
]
