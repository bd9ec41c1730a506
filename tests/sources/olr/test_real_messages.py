"""``run olr://`` on real OpenLogReplicator messages (tests/sources/olr/real_messages.py:
from its manual, its issues, SynchDB's documentation), sent by the stand-in: the
changefeed holds the rows contract section 7 says, a row of schemaless mode and a ddl
without a table included."""

from __future__ import annotations

from olr_buffer.olr_protocol import read_message
from tests.contract_model import assert_changefeed_equal, check_changefeed_layout
from tests.sources.olr import real_messages as real
from tests.sources.olr.service import changefeed, raw_column, service, transactions, wait_for, wait_transactions
from tests.sources.olr.standin import StandIn


def test_every_real_message_is_read():
    for data in real.STREAM:
        m = read_message(data)
        assert m.position is not None and m.payload


def test_real_messages_give_the_contract_changefeed(tmp_path):
    with StandIn(real.STREAM) as sender, service(sender.uri, tmp_path) as box:
        wait_transactions(tmp_path / "cf", len({r["tx_seq"] for r in real.EXPECTED}), box=box)
    rows = changefeed(tmp_path / "cf")
    assert_changefeed_equal(rows, real.EXPECTED)
    check_changefeed_layout(tmp_path / "cf")
    # before/after: the message's own text, escapes and all
    befores = [b for b in raw_column(tmp_path / "cf", "before") if b is not None]
    assert befores == [real.ISSUE_231[1].decode().split('"before":', 1)[1].removesuffix("}]}")]
    assert "http:\\/\\/dummyimage.com" in befores[0]
    # the tables whose columns came with their rows name a schema version; the others none
    versions = {(r["owner"], r["table"]): r["schema_version"] for r in rows}
    assert versions[("DBZUSER", "ORDERS")] and versions[("GLUESYNCUSER", "ARTICLES")]
    assert versions[("", "OBJ_87705")] is None and versions[("USR1", "ADAMX")] is None


def test_messages_without_c_idx_are_refused_saying_so(tmp_path):
    """Issue 126's messages have no c_idx: those of a transaction share one position, so
    none could be resumed from. The second is refused, in one line that says why, and
    nothing of the transaction is published."""
    with StandIn(real.ISSUE_126) as sender, service(sender.uri, tmp_path) as box:
        box["error_expected"] = True
        wait_for(lambda: "error" in box, 60, "the error")
    text = str(box["error"])
    assert "\n" not in text and "message at c_scn 358141 c_idx 0" in text and "has no c_idx" in text, text
    assert transactions(tmp_path / "cf") == 0
