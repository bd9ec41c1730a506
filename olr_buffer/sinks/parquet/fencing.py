"""Fencing in the data path: every publication of a writer that holds the changefeed's
lease (:class:`~olr_buffer.store.Lease`) is conditional on its lease generation, checked by
the store itself, so that a writer paused past its lease (SIGSTOP, a long GC, a frozen VM)
publishes nothing once another writer took the changefeed over.

**The manifest is the compare-and-swap point.** A leased writer writes
``_olr_buffer/manifest.json`` only with ``If-Match`` on the version it wrote last (a local
directory: the store's ``flock``-guarded compare and rename), and records in it
``lease: {generation, writer, host, pid}``. One publication (:class:`ManifestHead`)::

    1. stage the file: S3, a multipart upload with every part sent, not completed;
       locally, the temporary file in _olr_buffer/tmp/ (nothing visible either way)
    2. DECIDE: CAS the manifest with pending = {name, staged handle}
    3. make it visible: CompleteMultipartUpload with If-None-Match: * / link()
    4. a Delta changefeed: the Delta commit (put-if-absent of _delta_log/N.json); an
       Iceberg changefeed: the Iceberg commit (the catalog swaps the table's metadata if
       the snapshot it was made against is still the table's)
    5. CAS the manifest: next_tx_seq past the file, no pending

**Take-over** (:func:`fence_previous_writers`), by the new holder right after it took the
lease and before it reads the changefeed's position (``compact --in-place`` too, on a
changefeed written under a lease): read the manifest; finish its ``pending`` publication
if there is one (complete the upload, link the staged file: the same bytes whoever does
it; then the staged object is discarded; a staged object that is gone was never visible
and never will be); CAS the manifest with the new generation and no pending; on a Delta
changefeed, commit ``txn(appId = "olr-buffer.lease", version = generation)``; on an
Iceberg changefeed, commit a snapshot that adds nothing, its summary stamped
``olr_buffer.lease_generation = generation`` (:mod:`.iceberg.commits`). From then on an
older writer's step 2 or 5 fails (``If-Match``: 412), its step 4 fails (the log version
it wants exists, or the snapshot it commits against is no longer the table's: the
catalog refuses; its check of the table's lease generation refuses to retry), and its
step 3 is reached only for a publication decided before the take-over, which the new
holder finished already (a no-op; if a compaction replaced that file since, its staged
object is gone: the older writer finds the manifest moved on and stops). The older writer stops with
:class:`~olr_buffer.store.WriterFencedError`. docs/failure-scenarios.md goes through the
interleavings.
"""

from __future__ import annotations

import logging
import os

import orjson

from ...store import (
    Lease,
    ObjectChangedError,
    ObjectExistsError,
    ObjectNotFoundError,
    WriterFencedError,
    fenced_error,
)
from . import delta_table, iceberg_table
from .errors import ChangefeedCorruptError
from .iceberg_settings import IcebergSettings
from .layout import MANIFEST, META_DIR, META_FILE_MODE, Location

log = logging.getLogger(__name__)

MANIFEST_NAME = f"{META_DIR}/{MANIFEST}"
_ATTEMPTS = 20  # take-overs tried while an older writer keeps moving the manifest


class ManifestHead:
    """The manifest of ``loc`` as a leased writer writes it: each write conditional on the
    version this writer wrote (or read) last (``etag``; None: there is none yet)."""

    def __init__(self, loc: Location, lease: Lease, etag: str | None) -> None:
        self.loc = loc
        self.lease = lease
        self.etag = etag

    def write(self, doc: dict) -> None:
        """Write ``doc`` (stamped with the lease) if the manifest is still this writer's
        last version; :class:`WriterFencedError` if another writer wrote it since."""
        store = self.loc.store
        data = orjson.dumps({**doc, "lease": self.lease.stamp()}, option=orjson.OPT_INDENT_2)
        try:
            if self.etag is None:
                info = store.create(MANIFEST_NAME, data)
            else:
                info = store.replace_if(MANIFEST_NAME, data, self.etag)
            etag = info.etag
        except (ObjectChangedError, ObjectExistsError):
            # refused: another writer's version, or this one's own, written by an earlier
            # attempt whose answer was lost (a connection cut after the request reached the
            # store; the call is tried again after an outage): the same bytes are ours
            etag = None
        except ObjectNotFoundError:
            raise self.fenced() from None
        if etag is None:  # the answer was lost, or the write refused: ours only if it holds our bytes
            try:
                current = store.read_versioned(MANIFEST_NAME)
            except ObjectNotFoundError:
                raise self.fenced() from None
            if current.data != data:
                raise self.fenced()
            etag = current.etag
        self.etag = etag
        if self.loc.path is not None:
            try:
                os.chmod(os.path.join(self.loc.path, META_DIR, MANIFEST), META_FILE_MODE)
            except OSError:
                pass

    def superseded(self) -> bool:
        """Whether the manifest records a later lease generation than this writer's (an
        error on the way to a publication may come from a take-over: its temporary
        file removed)."""
        try:
            doc = _document(self.loc.store.read(MANIFEST_NAME))
        except ObjectNotFoundError:
            return False
        stamp = doc.get("lease")
        generation = stamp.get("generation") if isinstance(stamp, dict) else None
        return isinstance(generation, int) and generation > self.lease.generation

    def fenced(self) -> WriterFencedError:
        """The error for a manifest another writer wrote: who took over, from its stamp."""
        holder = None
        try:
            doc = orjson.loads(self.loc.store.read(MANIFEST_NAME))
            holder = doc.get("lease") if isinstance(doc, dict) else None
        except Exception:  # noqa: BLE001 - the error names the take-over as well as it can
            holder = None
        return fenced_error(self.loc.store, self.loc.where(), self.lease.generation, holder)


def fence_previous_writers(loc: Location, lease: Lease, iceberg: IcebergSettings | None = None) -> ManifestHead:
    """Take the changefeed at ``loc`` over from every writer of an older lease generation;
    ``lease``: held by the caller, just acquired. Run before the changefeed's position is
    read: finishes the publication an older writer decided, moves the manifest to this
    generation (and, on a Delta changefeed, the table's log), after which no older writer
    publishes anything (``iceberg``: an Iceberg changefeed's catalog and table, if given;
    else those the manifest records). Returns the head through which this writer writes the manifest.
    :class:`WriterFencedError` if a writer of a later generation took over already."""
    store = loc.store
    for _ in range(_ATTEMPTS):
        try:
            current = store.read_versioned(MANIFEST_NAME)
        except ObjectNotFoundError:
            current = None
        doc = _document(current.data if current else None)
        found = doc.get("lease")
        stamp: dict = found if isinstance(found, dict) else {}
        generation = stamp.get("generation")
        theirs: int = generation if isinstance(generation, int) else 0
        if theirs > lease.generation:
            raise fenced_error(store, loc.where(), lease.generation, stamp)
        pending = doc.pop("pending", None)
        if isinstance(pending, dict):
            roll_forward(loc, pending)
        head = ManifestHead(loc, lease, current.etag if current else None)
        try:
            head.write({k: v for k, v in doc.items() if k != "lease"})
        except WriterFencedError:
            continue  # the older writer moved meanwhile: look again
        if theirs and theirs != lease.generation:
            log.info(
                "%s: fenced the writers of lease generation %d and older (last: %s on %s, pid %s)",
                loc.where(),
                theirs,
                stamp.get("writer"),
                stamp.get("host"),
                stamp.get("pid"),
            )
        break
    else:
        raise WriterFencedError(
            f"{loc.where()}: cannot take the changefeed over: its manifest keeps changing",
            hint="another writer is still publishing: stop it",
            uri=loc.where(),
        )
    if delta_table.has_table(loc):
        delta_table.fence_table(loc, lease)
    elif iceberg_table.has_table(loc):
        iceberg_table.fence_table(loc, lease, iceberg)
    return head


def roll_forward(loc: Location, pending: dict) -> None:
    """Finish the publication ``pending`` (``{name, staged}``) that a writer decided: its
    staged object becomes its name, unless it is that already. One whose staged object is
    gone was never made visible and never can be: it is dropped (its transactions follow
    from the source)."""
    name, staged = pending.get("name"), pending.get("staged")
    if not isinstance(name, str) or not isinstance(staged, dict):
        return
    try:
        loc.store.complete_staged(name, staged)
    except ObjectExistsError:
        where = loc.where(name)
        raise ChangefeedCorruptError(
            f"{where}: a writer decided to publish it, and another object holds its name",
            hint="files were copied in by hand: move this one out",
            path=where,
        ) from None
    except ObjectNotFoundError:
        log.warning("%s: the publication an earlier writer decided is gone (never visible): dropped", loc.where(name))
        return
    # its staged object goes: the writer that decided it, woken, cannot make the file come
    # back after a compaction replaced it (it finds the publication finished, or gone)
    loc.store.discard_staged(name, staged)
    log.warning("%s: finished its publication, which an earlier writer decided before it stopped", loc.where(name))


def _document(data: bytes | None) -> dict:
    if data is None:
        return {}
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}
