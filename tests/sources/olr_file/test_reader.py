"""The reader's exact restart, at every append: a reader stopped right after any append
(as a kill there stops it) and started again from the state stored with that append
puts into the queue exactly the records of a reader never stopped, in the same blocks,
inside a message of a whole transaction too (a line's steps)."""

from __future__ import annotations

import random

import pytest

from olr_buffer.changes import read_summary
from olr_buffer.sources.olr_file import OlrFileReader, parse_output
from olr_buffer.sources.olr_file.state import PREFIX, load_columns, load_state
from olr_buffer.testing import MemoryQueue
from tests.sources.olr.streams import FORMS, messages, workload
from tests.sources.olr_file.fixtures import write_output


class Killed(Exception):
    pass


class KilledAfter:
    """A queue whose ``n``-th append is the last: it is stored, then the reader dies."""

    def __init__(self, queue: MemoryQueue, n: int) -> None:
        self.queue, self.n = queue, n

    def append(self, records, meta=None):
        first = self.queue.append(records, meta)
        self.n -= 1
        if self.n == 0:
            raise Killed
        return first


def blocks(queue: MemoryQueue) -> list[tuple[int, list[bytes]]]:
    """Each block's thread and records (its summary aside)."""
    out, index = [], queue.first_index
    while index < queue.next_index:
        block = queue.read_block(index)
        records = [queue.get(i) for i in range(block.first, block.first + block.count)]
        out.append((read_summary(records[0]).thread, records[1:]))
        index = block.first + block.count
    return out


def read(queue, output, meta=None, block_records=4) -> None:
    """A reader from the state and columns in ``meta`` (a queue's metadata), to the end."""
    state, columns = (load_state(meta), load_columns(meta)) if meta is not None else (None, None)
    OlrFileReader(queue, output, state=state, columns=columns, block_records=block_records).read(follow=False)


@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_reader_killed_after_any_append_resumes_exactly(tmp_path, form):
    f = FORMS[form]
    msgs = messages(workload(random.Random(5), 12, large=9, rac=True), f)
    write_output(tmp_path / "olr", msgs, files=3, name="OLR-%i.json")
    output = parse_output(f"olr+file://{tmp_path}/olr/OLR-%i.json")
    reference = MemoryQueue()
    counted = KilledAfter(reference, -1)
    read(counted, output)
    appends = -1 - counted.n
    want = blocks(reference)
    assert len(want) > 15
    for n in range(1, appends + 1):
        queue = MemoryQueue()
        with pytest.raises(Killed):
            read(KilledAfter(queue, n), output)
        read(queue, output, queue.meta_items(PREFIX))
        assert blocks(queue) == want, f"killed after append {n}"
    st = load_state(reference.meta_items(PREFIX))
    assert st.finished and st.open is None and st.steps == 0
