"""``run olr://...`` against the stand-in: each JSON form OpenLogReplicator writes gives
the changefeed contract section 7 says."""

from __future__ import annotations

import random

import pytest

from tests.contract_model import assert_changefeed_equal, check_changefeed_layout
from tests.sources.olr.service import changefeed, service, wait_transactions
from tests.sources.olr.standin import StandIn
from tests.sources.olr.streams import FORMS, expected_rows, messages, workload


@pytest.mark.parametrize("form", sorted(FORMS))
def test_each_form_gives_the_contract_changefeed(tmp_path, form):
    txs = workload(random.Random(hash(form) & 0xFFFF), 40, rac="rth" in form or "xidn" in form)
    f = FORMS[form]
    with StandIn(messages(txs, f)) as sender, service(sender.uri, tmp_path) as box:
        wait_transactions(tmp_path / "cf", len(txs), box=box)
    assert_changefeed_equal(changefeed(tmp_path / "cf"), expected_rows(txs, f))
    check_changefeed_layout(tmp_path / "cf")
