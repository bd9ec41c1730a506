"""The manifest as a leased writer writes it (sinks/parquet/fencing.ManifestHead): a
conditional write refused because an earlier attempt of the same write reached the store
(its answer lost in an outage, the call tried again) is this writer's own, not a take-over;
a version with other bytes is another writer's."""

from __future__ import annotations

import pytest

from olr_buffer.sinks.parquet import Location, ManifestHead
from olr_buffer.sinks.parquet.fencing import MANIFEST_NAME
from olr_buffer.store import Lease, WriterFencedError


@pytest.fixture(params=["local", "s3"])
def head(request, tmp_path):
    target = str(tmp_path / "cf") if request.param == "local" else request.getfixturevalue("s3_uri")
    loc = Location(target, durable=False)
    lease = Lease(loc.store, owner="q1", ttl=60)
    lease.acquire()
    try:
        yield ManifestHead(loc, lease, None)
    finally:
        lease.release()


def test_a_write_whose_earlier_attempt_reached_the_store_is_ours(head):
    doc = {"next_tx_seq": 5}
    head.write(doc)
    first = head.etag
    doc = {"next_tx_seq": 9}
    # the first attempt of the next write reached the store, its answer was lost ...
    head.write(doc)
    head.etag = first
    # ... and the call is tried again, conditional on the version before it
    head.write(doc)
    assert head.etag != first
    assert b'"next_tx_seq": 9' in head.loc.store.read(MANIFEST_NAME)
    head.write({"next_tx_seq": 10})  # and it goes on from the version it holds


def test_a_version_with_other_bytes_is_another_writers(head):
    head.write({"next_tx_seq": 5})
    first = head.etag
    head.write({"next_tx_seq": 9})
    head.etag = first
    with pytest.raises(WriterFencedError):
        head.write({"next_tx_seq": 7})
