"""The checkpoint document: its bytes are pinned, and the layout on disk decodes."""

from __future__ import annotations

import msgspec
import pytest

from olr_buffer.changes import CommitKey
from olr_buffer.dispatcher import Checkpoint, DispatchError, DispatchStats, decode_checkpoint
from olr_buffer.dispatcher.checkpoint import (
    HeldTransaction,
    TransactionState,
    encode_checkpoint,
)
from olr_buffer.errors import OlrBufferError
from olr_buffer.sinks.parquet.position import ChangefeedPosition, load_position
from olr_buffer.txbuffer.metadata import seal

# A document as this version writes it. A change to any field (name, order inside a
# transaction, type) changes these bytes: keep older documents decoding (GOLDEN_BEFORE_RETENTION
# and the first layout below), and change CHECKPOINT_FORMAT, docs/formats.md and status
# with it unless an older reader can ignore the change (a field added with a default: an
# object key, or an item at the end of a transaction's array).
GOLDEN = (
    b'{"format":1,"position":40,"progress":{"1":17,"2":-1},"other_progress":{"3":9},"closed":{"2":30},'
    b'"top":17,"watermark":-1,'
    b'"transactions":[[true,["0x1",12,5,5,1700000000000000000,3,1,null,0,null,{"1":[12,1,4,20,1,2]},null]],'
    b'[false,["0x2",20,7,-1,null,1,0,[16,1,2,8],6,99,{"1":[20,3,2]},1700000000500000000]]],'
    b'"ended":["0x0"],'
    b'"stats":{"blocks":3,"records":9,"published":1,"rows":2,"rolled_back":0,"no_begin":0,"empty":0,'
    b'"already_published":0,"extra_ends":0,"late_records":0,"late_transactions":0,"compensations":1,'
    b'"unmatched_compensations":0,"abandoned_transactions":1,"abandoned_rows":4,"abandoned_records":2,'
    b'"forgotten_records":0},'
    b'"threads":[1,2],"written":1700000001.5,'
    b'"changefeed":null,'
    b'"clock_tm":1700000000900000000,"abandoned":[["0x9",15]],'
    b'"clock_tms":[1700000000700000000,1700000000900000000,1700000000800000000]}'
)

# The same state as written before retention (olr-buffer before seen_tm, clock_tm,
# abandoned and the abandoned_* counters): it decodes, with their defaults.
GOLDEN_BEFORE_RETENTION = (
    b'{"format":1,"position":40,"progress":{"1":17,"2":-1},"other_progress":{"3":9},"closed":{"2":30},'
    b'"top":17,"watermark":-1,'
    b'"transactions":[[true,["0x1",12,5,5,1700000000000000000,3,1,null,0,null,{"1":[12,1,4,20,1,2]}]],'
    b'[false,["0x2",20,7,-1,null,1,0,[16,1,2,8],6,99,{"1":[20,3,2]}]]],'
    b'"ended":["0x0"],'
    b'"stats":{"blocks":3,"records":9,"published":1,"rows":2,"rolled_back":0,"no_begin":0,"empty":0,'
    b'"already_published":0,"extra_ends":0,"late_records":0,"late_transactions":0,"compensations":1,'
    b'"unmatched_compensations":0},'
    b'"threads":[1,2],"written":1700000001.5,'
    b'"changefeed":{"path":"/cf","next_tx_seq":4,"last_c_scn":16,"files":2}}'
)

DOC = Checkpoint(
    position=40,
    progress={1: 17, 2: -1},
    other_progress={3: 9},
    closed={2: 30},
    top=17,
    watermark=-1,
    transactions=[
        HeldTransaction(
            True, TransactionState("0x1", 12, 5, 5, 1700000000000000000, 3, 1, None, 0, None, {1: [12, 1, 4, 20, 1, 2]})
        ),
        HeldTransaction(
            False,
            TransactionState(
                "0x2", 20, 7, -1, None, 1, 0, CommitKey(16, 1, 2, 8), 6, 99, {1: [20, 3, 2]}, 1700000000500000000
            ),
        ),
    ],
    ended=["0x0"],
    stats=DispatchStats(
        blocks=3,
        records=9,
        published=1,
        rows=2,
        compensations=1,
        abandoned_transactions=1,
        abandoned_rows=4,
        abandoned_records=2,
    ),
    threads=[1, 2],
    written=1700000001.5,
    clock_tm=1700000000900000000,
    abandoned=[("0x9", 15)],
    clock_tms=[1700000000700000000, 1700000000900000000, 1700000000800000000],
)


def test_the_document_encodes_to_the_pinned_bytes():
    assert encode_checkpoint(DOC) == GOLDEN
    assert decode_checkpoint(seal(GOLDEN)) == DOC


def test_a_document_written_before_the_clock_kept_its_last_ends_decodes_without_them():
    older = GOLDEN.replace(b',"clock_tms":[1700000000700000000,1700000000900000000,1700000000800000000]', b"")
    assert older != GOLDEN
    assert decode_checkpoint(seal(older)) == msgspec.structs.replace(DOC, clock_tms=[])


def test_a_document_written_before_retention_decodes_with_the_defaults():
    cp = decode_checkpoint(seal(GOLDEN_BEFORE_RETENTION))
    assert [h.transaction.seen_tm for h in cp.transactions] == [None, None]
    assert (cp.clock_tm, cp.abandoned) == (None, [])
    assert cp.stats == DispatchStats(blocks=3, records=9, published=1, rows=2, compensations=1)
    before = msgspec.structs.replace(
        DOC,
        transactions=[
            HeldTransaction(h.in_open, msgspec.structs.replace(h.transaction, seen_tm=None)) for h in DOC.transactions
        ],
        stats=DispatchStats(blocks=3, records=9, published=1, rows=2, compensations=1),
        changefeed={"path": "/cf", "next_tx_seq": 4, "last_c_scn": 16, "files": 2},
        clock_tm=None,
        abandoned=[],
        clock_tms=[],
    )
    assert cp == before
    assert (
        encode_checkpoint(cp)
        .replace(b",null]", b"]")
        .replace(b',"clock_tm":null,"abandoned":[],"clock_tms":[]', b"")
        .replace(b',"abandoned_transactions":0,"abandoned_rows":0,"abandoned_records":0,"forgotten_records":0', b"")
        == GOLDEN_BEFORE_RETENTION
    )


def test_the_changefeed_position_of_an_older_document_reaches_the_sink():
    """Before the sink kept its own position document, the changefeed's position was part
    of this one: it still decodes, and the changefeed writer reads it (once: a checkpoint
    of this version stores the sink's own document beside it)."""
    cp = decode_checkpoint(seal(GOLDEN_BEFORE_RETENTION))
    assert load_position(None, cp.changefeed) == ChangefeedPosition(path="/cf", next_tx_seq=4, last_c_scn=16, files=2)
    assert decode_checkpoint(seal(GOLDEN)).changefeed is None


# the layout before retention, as an older olr-buffer decodes it
class OldTransaction(msgspec.Struct, array_like=True):
    xid: str
    first_block: int
    first_scn: int
    begin_scn: int
    begin_tm: int | None
    rows: int
    compensations: int
    end_key: list | None
    end_code: int
    end_tm: int | None
    locations: dict[int, list[int]]


class OldCheckpoint(msgspec.Struct, kw_only=True):
    format: int
    position: int
    transactions: list[tuple[bool, OldTransaction]]
    ended: list[str]


def test_an_older_reader_can_ignore_what_retention_added():
    """What an olr-buffer of the layout before (the same format) makes of this document:
    unknown keys and trailing items of a transaction's array are ignored."""

    old = msgspec.json.decode(GOLDEN, type=OldCheckpoint)
    assert [t.xid for _, t in old.transactions] == ["0x1", "0x2"]
    assert old.transactions[1][1].locations == {1: [20, 3, 2]}


def test_derived_figures_come_from_the_document():
    assert DOC.needed_from() == 12  # the first block of the oldest held transaction
    assert msgspec.structs.replace(DOC, transactions=[]).needed_from() == 40  # none held: the tail position
    assert DOC.effective_watermark() == -1
    older = msgspec.structs.replace(DOC, watermark=None, progress={1: 17, 2: 8})
    assert older.effective_watermark() == 8  # not stored: min P(t) over the threads in play


def test_a_document_of_the_first_layout_still_decodes():
    """The fields added later (closed, top, watermark, threads, written, changefeed) are
    absent from queues written before them; unknown fields are ignored."""
    bare = (
        b'{"format":1,"position":5,"progress":{"1":4},"other_progress":{},'
        b'"transactions":[[true,["x",0,1,1,null,1,0,null,0,null,{"1":[0,1,2]}]]],'
        b'"ended":[],"stats":{"blocks":1,"records":2,"a_counter_of_later":7}}'
    )
    cp = decode_checkpoint(bare)  # a bare document: written before the checksummed envelope
    assert (cp.closed, cp.top, cp.watermark, cp.threads, cp.changefeed) == ({}, -1, None, None, None)
    assert cp.transactions[0].transaction.locations == {1: [0, 1, 2]}
    assert cp.stats == DispatchStats(blocks=1, records=2)
    assert cp.effective_watermark() == 4


def test_another_format_is_refused_in_one_line_with_a_hint():
    with pytest.raises(DispatchError, match="format 2; this olr-buffer reads format 1") as info:
        decode_checkpoint(seal(GOLDEN.replace(b'"format":1', b'"format":2')))
    assert info.value.hint and "\n" not in str(info.value)


@pytest.mark.parametrize(
    "damage",
    [
        lambda b: b.replace(b'"ended":["0x0"],', b""),  # a field missing
        lambda b: b.replace(b"[true,", b'["yes",'),  # a field of the wrong type
        lambda b: b.replace(b"[16,1,2,8]", b"[16,1,2]"),  # a commit key short of a field
        lambda b: b[:-3],  # not JSON
    ],
)
def test_a_damaged_document_is_refused_in_one_line(damage):
    with pytest.raises(OlrBufferError, match="dispatcher/checkpoint is damaged") as info:
        decode_checkpoint(seal(damage(GOLDEN)), "q")
    assert "\n" not in str(info.value)
