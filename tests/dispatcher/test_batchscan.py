"""The dispatcher's compiled batch step (``batchscan.pyx``) gives what its pure-Python
reference (``python_batch_spans``, ``python_read_runs``) gives, on any batch: transactions
of one thread or several, one group or many, their locations as lists or as arrays, groups
that follow one another in a block or not; and the runs' records of real decoded blocks,
joined alike."""

from __future__ import annotations

import importlib
from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from olr_buffer.dispatcher import BATCH_STEP, OpenTransaction
from olr_buffer.dispatcher.batch import BATCHSCAN, python_batch_spans, python_read_runs
from olr_buffer.txbuffer import Block, BlockCodec

# the compiled module itself, also where OLR_BUFFER_PURE_PYTHON=1 has the dispatcher run
# the reference (these tests then still hold the two to each other)
COMPILED = importlib.import_module("olr_buffer.dispatcher.batchscan")


def test_the_compiled_step_is_in_use():
    """The install compiles it (the rest of these tests then hold it to the reference)."""
    assert BATCHSCAN is COMPILED, BATCH_STEP
    assert BATCH_STEP == "compiled"


@st.composite
def groups(draw) -> list[int]:
    """A thread's groups, flat ``(block, start, count)``: often one after another in one
    block (a run the loops join), often not."""
    out: list[int] = []
    for _ in range(draw(st.integers(1, 12))):
        if out and draw(st.booleans()):  # right after the previous group, same block
            block, start, count = out[-3], out[-2] + out[-1], draw(st.integers(1, 5))
        else:
            block, start, count = draw(st.integers(0, 4)) * 64, draw(st.integers(0, 40)), draw(st.integers(1, 5))
        out += [block, start, count]
    return out


@st.composite
def transactions(draw) -> OpenTransaction:
    locations: dict[int, array | list[int]] = {}
    for thread in draw(st.lists(st.integers(1, 8), min_size=1, max_size=3, unique=True)):
        flat = draw(groups())
        locations[thread] = array("q", flat) if draw(st.booleans()) else flat
    return OpenTransaction("x", 0, 0, 0, None, locations)


@given(st.lists(transactions(), max_size=12))
def test_spans_equal_the_reference(txns):
    batch = [(txn, None) for txn in txns]
    assert COMPILED.batch_spans(batch) == python_batch_spans(batch)


def test_locations_not_in_threes_are_refused_not_read_past():
    txn = OpenTransaction("x", 0, 0, 0, None, {1: [0, 1, 2, 3]})
    with pytest.raises(IndexError):
        python_batch_spans([(txn, None)])
    with pytest.raises(IndexError):
        COMPILED.batch_spans([(txn, None)])
    txn.locations[1] = array("i", [0, 1, 2])
    with pytest.raises(TypeError):
        COMPILED.batch_spans([(txn, None)])


RECORD = st.binary(max_size=20)


@st.composite
def blocks_and_runs(draw) -> tuple[dict[int, Block], list[tuple[int, int, int]]]:
    """A few real blocks (encoded, then decoded: their offsets past a header), and runs of
    any of their records, in any order, a block's runs apart or repeated."""
    codec = BlockCodec()
    blocks: dict[int, Block] = {}
    for n in range(draw(st.integers(1, 4))):
        records = draw(st.lists(RECORD, min_size=1, max_size=12))
        first = n * 100
        blocks[first] = codec.decode(first, codec.encode(records))
    runs = []
    for _ in range(draw(st.integers(0, 10))):
        first = draw(st.sampled_from(sorted(blocks)))
        count = blocks[first].count
        start = draw(st.integers(0, count))
        runs.append((first, start, draw(st.integers(start, count))))
    return blocks, runs


@given(blocks_and_runs())
def test_joined_records_equal_the_reference(blocks_runs):
    blocks, runs = blocks_runs
    got: list[int] = []

    def get(index: int) -> Block:
        got.append(index)
        return blocks[index]

    want = python_read_runs(runs, blocks.__getitem__)
    assert COMPILED.read_runs(runs, get) == want
    assert want == b"".join(blocks[i].span(a, b) for i, a, b in runs)
    assert len(got) == len(set(got)), "a block got more than once"


def test_a_run_outside_its_block_is_an_index_error_not_a_read_past_it():
    codec = BlockCodec()
    block = codec.decode(0, codec.encode([b"ab", b"cd"]))
    for run in [(0, 0, 3), (0, 2, 1), (0, -1, 1)]:
        with pytest.raises(IndexError, match="of block 0, which holds 2"):
            COMPILED.read_runs([run, (0, 0, 1)], lambda _i: block)
    assert COMPILED.read_runs([(0, 0, 2)], lambda _i: block) == b"abcd"
    assert COMPILED.read_runs([(0, 1, 2), (0, 0, 1)], lambda _i: block) == b"cdab"
    assert COMPILED.read_runs([], lambda _i: block) == b""
