"""LmdbQueue and MemoryQueue against a simple model, driven by a hypothesis state machine.

The model is a Python list of every record ever appended (its position is the record's
queue index), a dict of metadata, and per queue the first index still stored. Both
queues get the same operations; the LMDB one uses real files in a temp dir with tiny
segments so that rolls and cleanup happen within a few steps, and is closed and reopened
at random. Tailers live across steps (and across reopens, by position).

Profiles: ``HYPOTHESIS_PROFILE=ci`` runs more and longer examples; the default (``dev``)
keeps the run short. The profiles are registered here under ``txbuffer-stateful-<name>``
so that they do not replace the repository-wide ``dev``/``ci`` profiles of
``tests/conftest.py``.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from olr_buffer.testing import MemoryQueue
from olr_buffer.txbuffer import LmdbQueue, QueueError, Tailer, TxQueue

_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "txbuffer-stateful-dev",
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=_HEALTH,
)
settings.register_profile(
    "txbuffer-stateful-ci",
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=_HEALTH,
)
_PROFILE = "txbuffer-stateful-" + (os.environ.get("HYPOTHESIS_PROFILE") or "dev")
if _PROFILE not in ("txbuffer-stateful-dev", "txbuffer-stateful-ci"):
    _PROFILE = "txbuffer-stateful-dev"

# -- strategies ----------------------------------------------------------------------------

_random_record = st.builds(
    lambda n, seed: random.Random(seed).randbytes(n),  # incompressible
    st.integers(0, 2000),
    st.integers(0, 2**32 - 1),
)
_compressible_record = st.builds(
    lambda unit, n: (unit * (n // len(unit) + 1))[:n],
    st.binary(min_size=1, max_size=8),
    st.integers(0, 2000),
)
_small_record = st.binary(max_size=16)
records_st = st.lists(st.one_of(_small_record, _compressible_record, _random_record), max_size=40)

META_KEYS = [b"pos/a", b"pos/b", b"pos/c", b"ckpt", b"ckpt/scn", b"z"]
meta_st = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(META_KEYS), st.binary(max_size=40), max_size=4),
)

NAMES = ("lmdb", "mem")


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.mkdtemp(prefix="txq-stateful-")
        self.path = os.path.join(self.tmp, "queue")
        self.records: list[bytes] = []  # the model: queue index -> record
        self.meta: dict[bytes, bytes] = {}
        self.first: dict[str, int] = {"lmdb": 0, "mem": 0}  # first stored index, per queue
        self.queues: dict[str, TxQueue] = {}
        # tailer id -> {queue name: Tailer}; a tailer's position is its .index
        self.tailers: dict[int, dict[str, Tailer]] = {}
        self.segment_bytes = 0
        self.durable = False
        self.rolls_seen = 0

    # -- set-up ----------------------------------------------------------------------------

    @initialize(
        segment_bytes=st.sampled_from([8 * 1024, 16 * 1024, 32 * 1024, 64 * 1024]),
        durable=st.booleans(),
    )
    def open_queues(self, segment_bytes: int, durable: bool) -> None:
        self.segment_bytes = segment_bytes
        self.durable = durable
        self.queues["lmdb"] = LmdbQueue(self.path, segment_bytes=segment_bytes, durable=durable)
        self.queues["mem"] = MemoryQueue(segment_bytes=segment_bytes)
        for q in self.queues.values():
            assert q.first_index == 0
            assert q.next_index == 0
            assert q.meta_items() == {}

    def teardown(self) -> None:
        for q in self.queues.values():
            q.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------------------

    def _check_block(self, name: str, block, index: int) -> None:
        assert block.first <= index < block.end, (name, index, block.first, block.end)
        assert block.first >= self.first[name]
        assert block.end <= len(self.records)
        assert len(block) == block.count == block.end - block.first
        assert block.records() == self.records[block.first : block.end]

    # -- writes ----------------------------------------------------------------------------

    @rule(batch=records_st, meta=meta_st)
    def append(self, batch: list[bytes], meta: dict[bytes, bytes] | None) -> None:
        expected_first = len(self.records)
        segs_before = len(self.queues["lmdb"].segments())
        for name, q in self.queues.items():
            first = q.append(batch, meta)
            assert first == expected_first, name
            assert q.next_index == expected_first + len(batch), name
        self.records.extend(batch)
        if meta:
            self.meta.update(meta)
        if len(self.queues["lmdb"].segments()) > segs_before and segs_before:
            self.rolls_seen += 1
        if batch:
            # The block just written is one block holding exactly the batch.
            for name, q in self.queues.items():
                block = q.read_block(expected_first)
                assert (block.first, block.end) == (expected_first, expected_first + len(batch)), name
                assert block.records() == batch, name

    @rule(
        blocks=st.integers(1, 6),
        per_block=st.integers(1, 40),
        size=st.integers(200, 2000),
        seed=st.integers(0, 2**32 - 1),
        meta=meta_st,
    )
    def append_filler(self, blocks: int, per_block: int, size: int, seed: int, meta) -> None:
        """Several blocks of incompressible records: makes both queues roll segments."""
        rnd = random.Random(seed)
        for _ in range(blocks):
            self.append([rnd.randbytes(rnd.randint(0, size)) for _ in range(per_block)], meta)

    @rule(meta=st.dictionaries(st.sampled_from(META_KEYS), st.binary(max_size=40), min_size=1, max_size=3))
    def append_meta_only(self, meta: dict[bytes, bytes]) -> None:
        n = len(self.records)
        for name, q in self.queues.items():
            segs = [(s.first, s.end) for s in q.segments()]
            assert q.append([], meta) == n, name
            assert q.next_index == n, name
            assert [(s.first, s.end) for s in q.segments()] == segs or not segs, name
        self.meta.update(meta)

    # -- tailers ---------------------------------------------------------------------------

    @rule(data=st.data())
    def new_tailer(self, data: st.DataObject) -> None:
        low = max(self.first.values())
        start = data.draw(st.one_of(st.none(), st.integers(low, len(self.records) + 3)), label="start")
        tid = len(self.tailers)
        self.tailers[tid] = {}
        for name, q in self.queues.items():
            t = q.tailer(start)
            assert t.index == (self.first[name] if start is None else start), name
            self.tailers[tid][name] = t

    def _tail_one(self, name: str, t: Tailer, by_block: bool) -> None:
        q = self.queues[name]
        n = len(self.records)
        pos = t.index
        if pos < self.first[name]:
            # Cleanup went past this tailer: its records are gone, it must not guess.
            if pos < n:
                try:
                    t.next_block()
                except IndexError:
                    pass
                else:
                    raise AssertionError(f"{name}: tailer at {pos} read below first index {self.first[name]}")
            t.index = q.first_index  # the caller's recovery: restart from what is stored
            return
        if by_block:
            got: list[tuple[int, bytes]] = []
            while True:
                start = t.index
                block = t.next_block()
                if block is None:
                    break
                self._check_block(name, block, start)
                assert t.index == block.end
                skip = start - block.first  # started mid-block: the caller skips these
                got.extend((block.first + i, block.record(i)) for i in range(skip, block.count))
        else:
            got = list(t)
        expected = list(enumerate(self.records))[pos:]
        assert got == expected, name
        assert t.index == max(pos, n), name
        assert t.next_block() is None, name
        assert list(t) == [], name

    @precondition(lambda self: self.tailers)
    @rule(data=st.data(), by_block=st.booleans())
    def tail(self, data: st.DataObject, by_block: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.tailers)), label="tailer")
        for name, t in self.tailers[tid].items():
            self._tail_one(name, t, by_block)

    # -- reads -----------------------------------------------------------------------------

    @rule(data=st.data())
    def read(self, data: st.DataObject) -> None:
        n = len(self.records)
        index = data.draw(st.integers(min(self.first.values()) - 2, n + 2), label="index")
        for name, q in self.queues.items():
            if self.first[name] <= index < n:
                assert q.get(index) == self.records[index], name
                block = q.read_block(index)
                self._check_block(name, block, index)
                assert block.at(index) == self.records[index]
            else:
                for fn in (q.get, q.read_block):
                    try:
                        fn(index)
                    except IndexError:
                        pass
                    else:
                        raise AssertionError(f"{name}: {fn.__name__}({index}) did not raise IndexError")

    # -- close and reopen ------------------------------------------------------------------

    @rule(durable=st.booleans())
    def reopen(self, durable: bool) -> None:
        old = self.queues["lmdb"]
        segs = [(s.first, s.end, s.path) for s in old.segments()]
        positions = {tid: ts["lmdb"].index for tid, ts in self.tailers.items()}
        old.close()
        old.close()  # closing twice is harmless
        try:
            old.get(0)
        except QueueError:
            pass
        else:
            raise AssertionError("a closed queue still reads")
        q = LmdbQueue(self.path, segment_bytes=self.segment_bytes, durable=durable)
        self.queues["lmdb"] = q
        assert q.next_index == len(self.records)
        assert q.first_index == self.first["lmdb"]
        assert q.meta_items() == self.meta
        assert [(s.first, s.end, s.path) for s in q.segments()] == segs
        # Every stored record survived.
        assert list(q.tailer()) == list(enumerate(self.records))[self.first["lmdb"] :]
        for tid, pos in positions.items():
            self.tailers[tid]["lmdb"] = q.tailer(pos)

    # -- cleanup ---------------------------------------------------------------------------

    @rule(data=st.data())
    def delete_segments_before(self, data: st.DataObject) -> None:
        n = len(self.records)
        # Segment boundaries (and their neighbours) are where off-by-one bugs live.
        edges = sorted({e for q in self.queues.values() for s in q.segments() for e in (s.first, s.end)})
        near_edge = st.sampled_from(edges).flatmap(lambda e: st.integers(max(0, e - 1), e + 1)) if edges else st.just(n)
        index = data.draw(st.one_of(st.integers(0, n + 3), near_edge, st.just(n)), label="index")
        for name, q in self.queues.items():
            before = q.segments()
            old_first = q.first_index
            deleted = q.delete_segments_before(index)
            # Exactly the leading, non-current segments that lie wholly below the index.
            expected = []
            for s in before:
                if s.current or s.end > index:
                    break
                expected.append(s)
            spans = lambda segs: [(s.first, s.end) for s in segs]  # noqa: E731
            assert spans(deleted) == spans(expected), name
            assert spans(q.segments()) == spans(before[len(expected) :]), name
            new_first = q.first_index
            # first_index only moves to a segment boundary, never past the current segment,
            # and never past a record at or above the given index.
            assert new_first >= old_first, name
            if before:
                assert new_first in {s.first for s in before}, name
                assert new_first <= before[-1].first, name
            if new_first > old_first:
                assert new_first <= index, name
            if name == "lmdb":
                for s in deleted:
                    assert not os.path.exists(s.path), s.path
                    assert not os.path.exists(s.path + "-lock"), s.path
            self.first[name] = new_first

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def queues_match_model(self) -> None:
        if not self.queues:
            return
        n = len(self.records)
        for name, q in self.queues.items():
            assert q.next_index == n, name
            assert q.first_index == self.first[name], name
            assert self.first[name] <= n
            assert q.meta_items() == self.meta, name
            pos_meta = {k: v for k, v in self.meta.items() if k.startswith(b"pos/")}
            assert q.meta_items(b"pos/") == pos_meta, name
            for k in META_KEYS:
                assert q.meta(k) == self.meta.get(k), (name, k)
            segs = q.segments()
            if segs:
                assert segs[0].first == q.first_index, name
                assert segs[-1].end == n, name
                assert [s.current for s in segs] == [False] * (len(segs) - 1) + [True], name
                for a, b in zip(segs, segs[1:]):
                    assert a.end == b.first, (name, a, b)
                    assert a.first < a.end, (name, a)  # only the current segment may be empty
                assert segs[-1].first <= segs[-1].end, name
            else:
                assert q.first_index == n, name
            if self.first[name] < n:
                assert q.get(self.first[name]) == self.records[self.first[name]], name
                assert q.get(n - 1) == self.records[n - 1], name

    @invariant()
    def lmdb_files_match_segments(self) -> None:
        q = self.queues.get("lmdb")
        if q is None:
            return
        on_disk = sorted(f for f in os.listdir(os.path.join(self.path, "segments")) if f.endswith(".mdb"))
        assert on_disk == [os.path.basename(s.path) for s in q.segments()]
        for s in q.segments():
            assert s.bytes == os.path.getsize(s.path) > 0


TestQueueStateMachine = QueueMachine.TestCase
TestQueueStateMachine.settings = settings.get_profile(_PROFILE)
