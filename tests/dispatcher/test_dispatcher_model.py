"""The dispatcher against the independent model of the contract, on random RAC workloads.

The real readers turn each thread's files into blocks; the blocks of the threads are then
appended to one queue in a random interleaving, with dispatcher polls at random points.
Whatever the interleaving, the published transactions must be exactly the model's.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.changes import CHANGEFEED_OP, INFINITE_SCN, ROW_SCHEMA, Commit, CommitKey
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.sources.redo.files import scan
from olr_buffer.sources.redo.thread_reader import ThreadReader
from olr_buffer.testing import MemoryQueue
from tests.contract_model import assert_changefeed_equal, expected_changefeed


class ListSink:
    """Collects published rows as changefeed dicts."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.schemas: list[tuple[str | None, str | None]] = []  # each row's schema version and document
        self.next_tx_seq = 0

    def write_transaction(self, commit, chunks) -> int:
        out = []
        schemas = []
        for thread, rec in ((t, r) for t, chunk in chunks for r in _records(chunk)):
            code, scn, sub, _seq, _line, tm, owner, table, obj, rid, before, after, sql = rec[:13]
            schemas.append((rec[13] if len(rec) > 13 else None, rec[14] if len(rec) > 14 else None))
            out.append(
                {
                    "tx_seq": self.next_tx_seq,
                    "op_seq": len(out),
                    "c_scn": commit.key.scn,
                    "c_tm": commit.tm,
                    "xid": commit.xid,
                    "op": CHANGEFEED_OP[code],
                    "scn": scn,
                    "sub": sub,
                    "tm": tm,
                    "thread": thread,
                    "owner": owner,
                    "table": table,
                    "obj": obj,
                    "rid": rid,
                    "before": json.loads(before) if before is not None else None,
                    "after": json.loads(after) if after is not None else None,
                    "sql": sql,
                }
            )
        if out:
            self.next_tx_seq += 1
            self.rows.extend(out)
            self.schemas.extend(schemas)
        return len(out)

    def write_transactions(self, items) -> list[int]:
        return [self.write_transaction(commit, [(thread, rows)]) for commit, thread, rows in items]

    def write_rows(self, rows, txs) -> None:
        """The flat batch: each transaction's rows are the next ``n`` of ``rows``."""
        assert txs and all(n > 0 for *_, n in txs) and sum(n for *_, n in txs) == len(rows)
        a = 0
        for xid, key, tm, thread, n in txs:
            assert isinstance(key, CommitKey)
            if type(thread) is int:
                chunks = [(thread, rows[a : a + n])]
            else:  # a transaction of several threads: each row's thread
                assert len(thread) == n
                chunks = [(t, [r]) for t, r in zip(thread, rows[a : a + n])]
            assert self.write_transaction(Commit(xid, key, tm), chunks) == n
            a += n


class BatchListSink(ListSink):
    """A sink that counts the batches it takes."""

    def __init__(self) -> None:
        super().__init__()
        self.batches = 0

    def write_transactions(self, items) -> list[int]:
        self.batches += 1
        return super().write_transactions(items)

    def write_rows(self, rows, txs) -> None:
        self.batches += 1
        super().write_rows(rows, txs)


class ColumnListSink(BatchListSink):
    """A sink that takes rows as columns too (the dispatcher's other read-back), and counts
    the rows it took so."""

    def __init__(self) -> None:
        super().__init__()
        self.column_rows = 0

    def write_columns(self, rows, txs) -> None:
        assert isinstance(rows, pa.RecordBatch) and rows.schema.equals(ROW_SCHEMA)
        self.column_rows += rows.num_rows
        self.write_rows(_records(rows), txs)

    def write_transaction(self, commit, chunks) -> int:
        chunks = list(chunks)
        self.column_rows += sum(c.num_rows for _, c in chunks if isinstance(c, pa.RecordBatch))
        return super().write_transaction(commit, chunks)


def _records(rows) -> list[list]:
    """Rows as the record path gives them (sequence and line, which the changefeed does
    not hold, as 0), from columns."""
    if not isinstance(rows, pa.RecordBatch):
        return rows
    cols = [rows.column(name).to_pylist() for name in ROW_SCHEMA.names]
    return [[code, scn, sub, 0, 0, *rest] for code, scn, sub, *rest in zip(*cols)]


@st.composite
def workloads(draw, rollbacks: bool = True, home: int = 3, min_threads: int = 1) -> dict[int, list[dict]]:
    """Per thread, its records in order: transactions interleaved, some distributed, with
    ``lwn`` and ``close`` records here and there. ``rollbacks``: some rows rolled back
    (compensation records); ``home``: a row is on its transaction's home thread ``home``
    times in ``home + 1``, on any thread else."""
    n_threads = draw(st.integers(min_threads, 4))
    streams = []
    for i in range(draw(st.integers(0, 10))):
        xid = f"0x{i:04x}.001.00000001"
        home_thread = draw(st.integers(1, n_threads))
        events = []
        if draw(st.integers(0, 9)) > 0:
            events.append((home_thread, {"op": "begin", "xid": xid}))
        for _ in range(draw(st.integers(0, 6))):
            thread = home_thread if draw(st.integers(0, home)) else draw(st.integers(1, n_threads))
            op = draw(st.sampled_from(["insert", "update", "delete", "ddl"]))
            rec = {"op": op, "xid": xid, "owner": "HR", "table": draw(st.sampled_from(["EMP", "DEPT"]))}
            if op == "ddl":
                rec["sql"] = "alter table x add (c number)"
            else:
                rec["rid"] = draw(st.sampled_from(["AAAA", "AAAB", "AAAC"]))
                rec["obj"] = 77
                if op != "insert":
                    rec["before"] = {"ID": draw(st.integers(0, 3))}
                if op != "delete":
                    rec["after"] = {"ID": draw(st.integers(0, 3)), "N": "é"}
                if rollbacks and draw(st.integers(0, 4)) == 0:
                    rec["rollback"] = True
            events.append((thread, rec))
        end = draw(st.sampled_from(["commit", "commit", "commit", "rollback", None]))
        if end:
            # the end may be on another thread than the begin (distributed transactions)
            end_thread = home_thread if draw(st.integers(0, 2)) else draw(st.integers(1, n_threads))
            events.append((end_thread, {"op": end, "xid": xid, "tm": 1_700_000_000_000_000_000 + i}))
            if draw(st.integers(0, 4)) == 0:  # a row after the end: late (ignored) unless at the end's SCN
                events.append(
                    (
                        end_thread,
                        {
                            "op": "insert",
                            "xid": xid,
                            "owner": "HR",
                            "table": "EMP",
                            "rid": "AAAZ",
                            "obj": 77,
                            "after": {"ID": 9},
                        },
                    )
                )
        streams.append(events)
    # interleave the transactions, keeping each one's order
    order = []
    live = [s for s in streams if s]
    while live:
        s = live[draw(st.integers(0, len(live) - 1))]
        order.append(s.pop(0))
        live = [s for s in live if s]
    per_thread: dict[int, list[dict]] = {t: [] for t in range(1, n_threads + 1)}
    last_scn = {t: -1 for t in per_thread}
    sub = {t: 0 for t in per_thread}
    clock = 100
    for thread, rec in order:
        clock += draw(st.integers(0, 2))
        if draw(st.integers(0, 5)) == 0:
            # lwn N: the thread has written every record with scn <= N (the contract), so
            # N is below the SCN of its next record, which is at least the clock
            lwn_thread = draw(st.integers(1, n_threads))
            if last_scn[lwn_thread] < clock - 1:
                per_thread[lwn_thread].append({"op": "lwn", "scn": clock - 1})
                last_scn[lwn_thread], sub[lwn_thread] = clock - 1, 0
        if draw(st.integers(0, 7)) == 0:  # an instance shuts down; its next record opens it again
            # above every SCN written by then (the contract), the close's own too: at the
            # clock - 1, as an lwn
            close_thread = draw(st.integers(1, n_threads))
            if last_scn[close_thread] < clock - 1:
                per_thread[close_thread].append({"op": "close", "scn": clock - 1})
                last_scn[close_thread], sub[close_thread] = clock - 1, 0
        sub[thread] = sub[thread] + 1 if last_scn[thread] == clock else 0
        last_scn[thread] = clock
        per_thread[thread].append({**rec, "scn": clock, "sub": sub[thread]})
    return per_thread


def write_input(root: Path, per_thread: dict[int, list[dict]], per_file: int) -> None:
    for thread, recs in per_thread.items():
        if not recs:
            continue
        for n, start in enumerate(range(0, len(recs), per_file), start=1):
            with open(root / f"redo_{thread}_{n}.jsonl", "w", encoding="utf-8") as fh:
                for rec in recs[start : start + per_file]:
                    fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


# records a block: a few (groups cut across blocks), or many (batches that take several
# groups of one block, adjacent or not)
_BLOCK_RECORDS = st.one_of(st.integers(1, 4), st.just(64))


@given(
    workload=workloads(),
    per_file=st.integers(1, 6),
    block_records=_BLOCK_RECORDS,
    batches=st.booleans(),
    columns=st.booleans(),
    data=st.data(),
)
def test_dispatcher_matches_model_whatever_the_interleaving(workload, per_file, block_records, batches, columns, data):
    """Also with a sink that takes rows as columns."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        expected, found, blocks = staged(root, workload, per_file, block_records)

        queue = MemoryQueue()
        sink = ColumnListSink() if columns else BatchListSink()
        dispatcher = Dispatcher(queue, sink, sorted(found), batching=batches)
        assert dispatcher.columns == columns
        dispatcher.columns_own_share = data.draw(st.sampled_from([1, 16]))  # 1: every batch as columns
        live = {t: b for t, b in blocks.items() if b}
        while live:
            thread = data.draw(st.sampled_from(sorted(live)))
            queue.append(live[thread].pop(0))
            if not live[thread]:
                del live[thread]
            if data.draw(st.booleans()):
                dispatcher.poll(max_blocks=data.draw(st.integers(1, 3)))
                check_invariants(dispatcher, sink)
            if data.draw(st.integers(0, 4)) == 0:
                dispatcher = restarted(dispatcher, queue, sink, sorted(found))
                check_invariants(dispatcher, sink)
        while dispatcher.poll():
            check_invariants(dispatcher, sink)
        dispatcher.publish_ready(INFINITE_SCN)  # the end of a replay: the input is complete
        dispatcher.totals()

        assert_changefeed_equal(sink.rows, expected.rows)
        assert dispatcher.stats.published == expected.committed
        assert dispatcher.stats.rolled_back == expected.rolled_back
        assert dispatcher.stats.no_begin == expected.no_begin
        assert dispatcher.stats.empty == expected.empty
        assert dispatcher.stats.unmatched_compensations == expected.unmatched_compensations
        assert len(dispatcher.open) == expected.open
        if not batches:
            assert sink.batches == 0
        if not columns:
            assert not hasattr(sink, "column_rows")


@given(
    rollbacks=st.booleans(),
    per_file=st.integers(1, 6),
    block_records=_BLOCK_RECORDS,
    data=st.data(),
)
def test_transactions_of_several_threads_are_taken_from_the_columns_in_the_models_order(
    rollbacks, per_file, block_records, data
):
    """Without compensation records, a transaction of several threads is published from
    the rows read as columns, taken in its order (late rows of any thread dropped): every
    row reaches the sink as columns, the changefeed is the model's, and the counts are
    those of the same run read back as lists. With them (``rollbacks``), batches read as
    columns all the same put such rows and rows of their own together."""
    workload = data.draw(workloads(rollbacks=rollbacks, home=1, min_threads=2))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        expected, found, blocks = staged(root, workload, per_file, block_records)
        # the interleaving and the polls, drawn once for both runs: (thread, polls or 0)
        steps = []
        left = {t: len(b) for t, b in blocks.items() if b}
        while left:
            thread = data.draw(st.sampled_from(sorted(left)))
            left[thread] -= 1
            if not left[thread]:
                del left[thread]
            steps.append((thread, data.draw(st.integers(1, 3)) if data.draw(st.booleans()) else 0))

        def run(sink):
            queue = MemoryQueue()
            dispatcher = Dispatcher(queue, sink, sorted(found))
            dispatcher.columns_own_share = 1  # (as columns whatever the rows of their own)
            taken = {t: 0 for t in blocks}
            for thread, polls in steps:
                queue.append(blocks[thread][taken[thread]])
                taken[thread] += 1
                if polls:
                    dispatcher.poll(max_blocks=polls)
            while dispatcher.poll():
                pass
            dispatcher.publish_ready(INFINITE_SCN)
            return dispatcher.totals()

        sink, lists = ColumnListSink(), BatchListSink()
        stats = run(sink)
        assert_changefeed_equal(sink.rows, expected.rows)
        assert sink.column_rows == len(sink.rows)
        assert stats == run(lists) and sink.rows == lists.rows
        assert stats.published == expected.committed and stats.empty == expected.empty


@given(
    workload=workloads(),
    per_file=st.integers(1, 6),
    block_records=_BLOCK_RECORDS,
    batches=st.booleans(),
    columns=st.booleans(),
    data=st.data(),
)
def test_retention_drops_exactly_the_abandoned_transactions(workload, per_file, block_records, batches, columns, data):
    """With the retention limit applied at random points (by SCN distance, or by the
    clock of ends' ``tm``), the changefeed is the model's without the abandoned
    transactions, whatever came of them later; every other transaction is untouched, and
    nothing abandoned is held any more."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        expected, found, blocks = staged(root, workload, per_file, block_records)

        queue = MemoryQueue()
        sink = ColumnListSink() if columns else BatchListSink()
        dispatcher = Dispatcher(queue, sink, sorted(found), batching=batches)
        dispatcher.columns_own_share = data.draw(st.sampled_from([1, 16]))
        abandoned: set[str] = set()
        live = {t: b for t, b in blocks.items() if b}
        while live:
            thread = data.draw(st.sampled_from(sorted(live)))
            queue.append(live[thread].pop(0))
            if not live[thread]:
                del live[thread]
            if data.draw(st.booleans()):
                dispatcher.poll(max_blocks=data.draw(st.integers(1, 3)))
            if data.draw(st.integers(0, 2)) == 0:
                if data.draw(st.booleans()):
                    gone = dispatcher.abandon_expired(scn=data.draw(st.integers(0, 6)))
                else:
                    gone = dispatcher.abandon_expired(seconds=data.draw(st.integers(0, 3)) * 1e-9)
                assert all(a.xid not in dispatcher.open for a in gone)
                abandoned |= {a.xid for a in gone}
                check_invariants(dispatcher, sink)
            if data.draw(st.integers(0, 4)) == 0:
                dispatcher = restarted(dispatcher, queue, sink, sorted(found))
        while dispatcher.poll():
            pass
        dispatcher.publish_ready(INFINITE_SCN)
        stats = dispatcher.totals()

        assert stats.abandoned_transactions == len(abandoned)
        assert not abandoned & set(dispatcher.open)
        kept = [r for r in expected.rows if r["xid"] not in abandoned]
        renumber = {tx: n for n, tx in enumerate(dict.fromkeys(r["tx_seq"] for r in kept))}
        assert_changefeed_equal(sink.rows, [{**r, "tx_seq": renumber[r["tx_seq"]]} for r in kept])


def check_invariants(dispatcher: Dispatcher, sink: ListSink) -> None:
    """What holds after every step: nothing is published above the watermark (offline,
    it only rises), and cleanup keeps every block a held transaction still needs."""
    watermark = dispatcher.watermark
    assert all(row["c_scn"] <= watermark for row in sink.rows)
    held = [*dispatcher.open.values(), *(txn for *_, txn in dispatcher._pending if txn.end_key is not None)]
    low = dispatcher.needed_from()
    assert low <= dispatcher.position
    assert all(low <= txn.first_block for txn in held)
    assert all(txn.first_block <= block for txn in held for locs in txn.locations.values() for block in locs[::3])


def restarted(dispatcher: Dispatcher, queue, sink, threads) -> Dispatcher:
    """A new dispatcher from the old one's checkpoint, as after a crash and restart."""
    state = dispatcher.checkpoint_state()
    fresh = Dispatcher(queue, sink, threads, batching=dispatcher.batching)
    fresh.columns_own_share = dispatcher.columns_own_share
    fresh.restore(state)
    assert fresh.checkpoint_state() == state
    return fresh


def staged(root: Path, workload: dict[int, list[dict]], per_file: int, block_records: int):
    """``workload`` written under ``root``: the model's changefeed of it, its threads'
    files (``scan``) and each thread's blocks (:func:`_thread_blocks`)."""
    write_input(root, workload, per_file)
    found = scan(str(root))
    return expected_changefeed(root), found, _thread_blocks(root, found, block_records)


def _thread_blocks(root: Path, found: dict, block_records: int) -> dict[int, list[list[bytes]]]:
    """Each redo thread's input read alone into blocks of ``block_records``: what its
    reader appends, to be interleaved into one queue as the test draws."""
    blocks = {}
    for thread, files in found.items():
        q = MemoryQueue()
        ThreadReader(q, str(root), thread, files, None, block_records=block_records).read_to_end()
        blocks[thread] = [list(q.read_block(i)) for i in _block_starts(q)]
    return blocks


def _block_starts(q: MemoryQueue) -> list[int]:
    starts, i = [], q.first_index
    while i < q.next_index:
        starts.append(i)
        i = q.read_block(i).end
    return starts
