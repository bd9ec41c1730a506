"""The OpenLogReplicator source: ``olr://HOST:PORT/DATABASE``, olr-buffer as a receiver of
OpenLogReplicator's network protocol (docs/formats.md, "Network protocol"), into the same queue as the
other sources. See docs/operations.md, "Reading OpenLogReplicator"."""

from .errors import OlrSourceError, OlrStreamError
from .location import Location, parse_location
from .receiver import OlrReceiver
from .source import KIND, OlrSource
from .state import STATE_KEY, OlrState

__all__ = [
    "KIND",
    "STATE_KEY",
    "Location",
    "OlrReceiver",
    "OlrSource",
    "OlrSourceError",
    "OlrState",
    "OlrStreamError",
    "parse_location",
]
