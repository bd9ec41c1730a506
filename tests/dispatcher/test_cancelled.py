"""The cancelled-rows set of the replayer (single ordinals and ranges from cut records),
and compensation worked out backwards, against the forward rule of the contract."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.changes import (
    BEGIN,
    CODE,
    COMPENSATED_RID,
    COMPENSATION,
    CUT,
    CUT_END,
    CUT_FIRST,
    DELETE,
    INSERT,
    RID,
    ROW_CODES,
    SCN,
)
from olr_buffer.dispatcher.replay import Cancelled, Replayer


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.integers(0, 20)), max_size=15))
def test_cancelled_agrees_with_a_plain_set(ops):
    c, model = Cancelled(), set()
    for single, a, n in ops:
        if single:
            c.add(a)
            model.add(a)
        else:
            c.add_range(a, a + n)
            model.update(range(a, a + n))
    assert [i for i in range(-2, 90) if i in c] == sorted(model)


# Compensation read backwards (Replayer._cancellations) against the contract's forward rule


def _forward(recs: list[list]) -> tuple[set[int], int]:
    """The contract's rule, record by record: a compensation cancels the latest row before
    it with its RID that is not cancelled already; a cut cancels a range of ordinals."""
    stacks: dict = {}
    cancelled: set[int] = set()
    unmatched = 0
    ordinal = 0
    for rec in recs:
        if rec[CODE] in ROW_CODES:
            stacks.setdefault(rec[RID], []).append(ordinal)
            ordinal += 1
        elif rec[CODE] == CUT:
            cancelled.update(range(rec[CUT_FIRST], rec[CUT_END]))
        elif not rec[CODE] & COMPENSATION:
            continue
        elif stacks.get(rec[COMPENSATED_RID]):
            cancelled.add(stacks[rec[COMPENSATED_RID]].pop())
        else:
            unmatched += 1
    return cancelled, unmatched


def _record(kind: str, scn: int, rid: str | None, cut: tuple[int, int]) -> list:
    if kind == "row":
        return [INSERT, scn, 0, 1, scn, None, "O", "T", 7, rid, None, "{}", None]
    if kind == "comp":
        return [DELETE | COMPENSATION, scn, 0, 1, scn, rid]
    if kind == "cut":
        return [CUT, scn, 0, 1, scn, cut[0], cut[1]]
    return [BEGIN, scn, 0, 1, scn, None]


_RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["row", "row", "comp", "cut", "begin"]),
        st.sampled_from(["a", "b", None]),
        st.tuples(st.integers(0, 12), st.integers(0, 5)),
    ),
    max_size=40,
)


@given(_RECORDS, st.integers(1, 8), st.integers(0, 45), st.lists(st.integers(1, 3), min_size=40, max_size=40))
def test_compensation_read_backwards_matches_the_forward_rule(spec, chunk, c_scn, threads):
    recs = [_record(kind, scn, rid, (a, a + n)) for scn, (kind, rid, (a, n)) in enumerate(spec)]
    upto = [r for r in recs if r[SCN] <= c_scn]
    cancelled, unmatched = _forward(upto)
    rows = [r for r in upto if r[CODE] in ROW_CODES]

    replayer = Replayer(cache=None)
    backwards = upto[::-1]
    got = replayer._cancellations(backwards[i : i + chunk] for i in range(0, len(backwards), chunk))
    assert [i for i in range(len(rows) + 20) if i in got] == sorted(o for o in cancelled if o < len(rows) + 20)
    assert replayer.stats.unmatched_compensations == unmatched
    # kept, chunk by chunk, as the replayer hands rows on
    kept = []
    for i in range(0, len(rows), chunk):
        kept += got.kept(i, rows[i : i + chunk])
    assert kept == [r for o, r in enumerate(rows) if o not in cancelled]
    # all records at once, late ones counted
    late = sum(1 for r in recs if r[SCN] > c_scn and r[CODE] != BEGIN)
    again = Replayer(cache=None)
    assert again.transaction_rows([(1, recs)], c_scn) == (kept, 1)
    assert again.stats.records_after_end == late
    # the same records spread over threads (SCNs are distinct: row order is SCN order)
    parts: dict[int, list] = {}
    for thread, rec in zip(threads, recs):
        parts.setdefault(thread, []).append(rec)
    spread = Replayer(cache=None)
    rows_got, threads_got = spread.transaction_rows(sorted(parts.items()), c_scn)
    assert rows_got == kept
    if len(parts) > 1:
        assert threads_got == [t for t, r in zip(threads, recs) if any(r is k for k in kept)]
    assert spread.stats.records_after_end == late
    assert spread.stats.unmatched_compensations == unmatched
