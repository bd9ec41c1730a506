"""Errors of the object stores: one type per failure kind a caller acts on differently.

=============================  ==========================================================
``ObjectNotFoundError``        the object is not there
``ObjectExistsError``          a create found the name taken (nothing was written)
``ObjectChangedError``         a conditional replace found another version (nothing written)
``StoreUnreachableError``      connection refused, a timeout, a 5xx: retry later
``CallGivenUpError``           (a ``StoreUnreachableError``) no answer while stopping:
                               given up, the service stops without it
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


class CallGivenUpError(StoreUnreachableError):
    """A call the store had not answered when the service was stopping: given up after
    ``--store-timeout`` seconds (at once on a second stop signal), the call left to
    finish or fail on its own. The process stops without it; nothing is lost (as after
    a kill at that instant)."""


def store_state(exc: StoreError) -> str:
    """What a failed call says of its store, in words, to follow "its store": ``does not
    answer (...)`` for a call given up, ``cannot be reached (...)`` else."""
    return f"does not answer ({exc})" if isinstance(exc, CallGivenUpError) else f"cannot be reached ({exc})"


class StoreAccessError(StoreError):
    """The store refused: bad or missing credentials, access denied, no such bucket, the
    wrong region, or a store that lacks what olr-buffer needs. Retrying does not help."""


#: What another client of the store (delta-rs's object store, pyarrow's S3 filesystem,
#: an HTTP or SQL catalog in front of the table) writes when the store, or the service
#: it talks to, did not answer or cannot now: lower case, each its own reason.
UNANSWERED = (
    "connection refused",
    "tcp connect error",
    "could not connect",
    "failed to connect",
    "dns error",
    "timed out",
    "timeout",
    "error sending request",
    "connection reset",
    "connection closed",
    "broken pipe",
    "error reading a body from connection",
    "end of file before message length reached",
    "curl error",
    "max retries exceeded",
    "service unavailable",
    "internal server error",
    "slowdown",
)
#: S3's error codes (an XML body's ``<Code>``) that refuse the caller's credentials.
DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken")


def error_in_text(text: str, where: str, doing: str, *, who: str = "the store") -> StoreError | None:
    """The store's error for a failure another client met, told by its one-line
    ``text``: :class:`StoreAccessError` where the store refused (no such bucket, access
    denied: the operator must fix something), :class:`StoreUnreachableError` where
    ``who`` did not answer (retry); None where the text says neither (the caller's own
    error). ``where``: the location, ``doing``: what was being done (``read the Delta log``)."""
    start = text.find("<Code>")
    end = text.find("</Code>", start)
    code = text[start + 6 : end] if start >= 0 and end > start else None
    if code == "NoSuchBucket":
        return StoreAccessError(
            f"{where}: cannot {doing}: the bucket does not exist",
            hint="create the bucket, or check its name, AWS_ENDPOINT_URL and AWS_REGION",
            uri=where,
        )
    if code in DENIED or " 403 " in f" {text} ":
        return StoreAccessError(
            f"{where}: cannot {doing}: access denied ({code or '403'})",
            hint="check AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN",
            uri=where,
        )
    lowered = text.lower()
    for reason in UNANSWERED:
        if reason in lowered:
            return StoreUnreachableError(
                f"{where}: cannot {doing}: {who} did not answer ({reason})",
                hint="olr-buffer run retries; replay resumes when run again",
                uri=where,
            )
    return None
