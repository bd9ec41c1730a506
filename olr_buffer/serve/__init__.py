"""``olr-buffer serve``: a changefeed served over OpenLogReplicator's network protocol
(docs/formats.md, "Network protocol") to one receiver at a time, which confirms positions and resumes
from them."""

from .errors import ServeError, ServeLockedError, ServeStateError
from .receivers import receivers_status, render_receivers
from .server import ServeOptions, StreamServer
from .state import default_state_dir

__all__ = [
    "ServeError",
    "ServeLockedError",
    "ServeOptions",
    "ServeStateError",
    "StreamServer",
    "default_state_dir",
    "receivers_status",
    "render_receivers",
]
