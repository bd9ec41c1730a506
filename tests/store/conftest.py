"""Each store test runs on both stores: a local directory and S3 (moto's server)."""

from __future__ import annotations

import pytest

from olr_buffer.store import open_store


@pytest.fixture(params=["local", "s3"])
def store_uri(request, tmp_path):
    """The URI of an empty store of each kind."""
    if request.param == "local":
        return str(tmp_path / "changefeed")
    return request.getfixturevalue("s3_uri")


@pytest.fixture
def store(store_uri):
    return open_store(store_uri)
