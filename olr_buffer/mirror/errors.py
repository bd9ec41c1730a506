"""The mirror's errors (one line each, with a hint)."""

from __future__ import annotations

from ..errors import EXIT_BAD_INPUT, OlrBufferError


class MirrorError(OlrBufferError):
    """The mirror cannot go on: a target that is not this changefeed's, or is ahead of it."""


class MirrorDataError(MirrorError):
    """A change the mirror cannot apply: no schema document, no key, a value that does not
    fit its column's type."""

    exit_code = EXIT_BAD_INPUT


class MirrorTargetError(MirrorError):
    """A mirror table could not be read or written (the store failed): the service tries
    again; the one-shot ``--until-caught-up`` stops."""
