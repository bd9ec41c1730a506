"""Errors of the object stores: one type per failure kind a caller acts on differently.

=============================  ==========================================================
``ObjectNotFoundError``        the object is not there
``ObjectExistsError``          a create found the name taken (nothing was written)
``ObjectChangedError``         a conditional replace found another version (nothing written)
``StoreUnreachableError``      connection refused, a timeout, a 5xx: retry later
``StoreAccessError``           denied, bad or missing credentials, missing bucket, wrong
                               region, a store without conditional writes: fatal, the
                               operator must fix something
=============================  ==========================================================

Everything else is a :class:`StoreError`. Messages are one line naming the object
(``s3://bucket/prefix/name`` or a path) and never hold a credential.
"""

from __future__ import annotations

from ..errors import OlrBufferError


class StoreError(OlrBufferError):
    """An object store operation failed; the message names the object and the reason."""

    #: Whether the same call may succeed later, unchanged (the store was unreachable).
    retryable = False


class ObjectNotFoundError(StoreError):
    """The object does not exist."""


class ObjectExistsError(StoreError):
    """The object to create already exists: nothing was written."""


class ObjectChangedError(StoreError):
    """A conditional replace found another version of the object: nothing was written."""


class StoreUnreachableError(StoreError):
    """The store did not answer, or answered that it cannot now (5xx, throttling): retry."""

    retryable = True


class StoreAccessError(StoreError):
    """The store refused: bad or missing credentials, access denied, no such bucket, the
    wrong region, or a store that lacks what olr-buffer needs. Retrying does not help."""
