"""The changefeed writer's lease on object storage (moto's server), as a standby meets it."""

from __future__ import annotations

import orjson
import pytest

from olr_buffer.sinks.parquet.writer import ChangefeedWriter
from olr_buffer.store import LeaseHeldError, LeaseTiming, open_store
from olr_buffer.store.lease import LEASE


def test_a_writer_refused_on_a_new_changefeed_leaves_the_holders_lease(s3_uri, tmp_path):
    # a standby's try, while the active one has published nothing yet
    active = ChangefeedWriter(s3_uri, staging=tmp_path / "a", lease_timing=LeaseTiming(ttl=30, renew=10))
    store = open_store(s3_uri)
    try:
        held = orjson.loads(store.read(LEASE))
        with pytest.raises(LeaseHeldError):
            ChangefeedWriter(s3_uri, staging=tmp_path / "b")
        doc = orjson.loads(store.read(LEASE))
        assert doc["writer"] == held["writer"] and doc["ttl"] == 30 and not doc["released"]
    finally:
        active.release()
