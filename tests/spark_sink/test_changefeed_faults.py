"""The changefeed's disk fills (a small tmpfs; root only, skipped otherwise): the run
stops cleanly with no half-published file, and resumes once there is room.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import ok
from tests.contract_model import ModelResult
from tests.fault_helpers import (
    FULL_ARGS,
    big_base,
    big_model,
    exact,
    grow,
    no_tmp_files,
    one_line_error,
    part_bytes,
    published_prefix,
    replay,
    tmpfs,
)


def test_changefeed_disk_full_stops_cleanly_and_resumes(big_base: Path, big_model: ModelResult, tmp_path: Path) -> None:
    q, cf = tmp_path / "queue", tmp_path / "cf"
    with tmpfs(cf, "400k"):
        failed = replay(big_base, q, cf, *FULL_ARGS)
        line = one_line_error(failed, "no space left on device", "hint:")
        assert str(cf) in line, line
        no_tmp_files(cf)
        published = published_prefix(cf, big_model)
        assert 0 < published < big_model.committed, published
        before = part_bytes(cf)
        grow(cf)
        done = ok(replay(big_base, q, cf, *FULL_ARGS, "--json")).json()
        exact(cf, big_model)
        after = part_bytes(cf)
        assert {n: after.get(n) for n in before} == before, "a published file changed"
        assert done["next_tx_seq"] == big_model.committed
        # and once more: nothing to do
        again = ok(replay(big_base, q, cf, *FULL_ARGS, "--json")).json()
        assert again["transactions_published"] == 0
        exact(cf, big_model)
