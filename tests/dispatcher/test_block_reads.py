"""A backlog of blocks is read once: the dispatcher publishes what became safe as it reads,
before the blocks of those commits leave its cache, instead of reading them again."""

from __future__ import annotations

import json
from pathlib import Path

from olr_buffer.changes import INFINITE_SCN
from olr_buffer.dispatcher import Dispatcher
from olr_buffer.sources.redo.files import scan
from olr_buffer.testing import MemoryQueue
from tests.dispatcher.test_dispatcher_model import BatchListSink, _thread_blocks


class CountingQueue(MemoryQueue):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def read_block(self, index: int):
        self.reads += 1
        return super().read_block(index)


def _tiny_transactions(root: Path, threads: int, per_thread: int) -> None:
    """Per thread, ``per_thread`` transactions of one row each, the threads' SCNs interleaved."""
    for t in range(1, threads + 1):
        with open(root / f"redo_{t}_1.jsonl", "w", encoding="utf-8") as fh:
            for i in range(per_thread):
                scn = 100 + (i * threads + t - 1) * 3
                xid = f"0x{t:04x}.{i:03x}.00000001"
                for k, rec in enumerate(
                    (
                        {"op": "begin", "xid": xid},
                        {"op": "insert", "xid": xid, "owner": "HR", "table": "EMP", "rid": f"R{i}", "after": {"ID": i}},
                        {"op": "commit", "xid": xid},
                    )
                ):
                    fh.write(json.dumps({**rec, "scn": scn + k}) + "\n")


def test_a_backlog_polled_at_once_is_read_once(tmp_path: Path):
    threads, per_thread = 3, 200
    _tiny_transactions(tmp_path, threads, per_thread)
    found = scan(str(tmp_path))
    blocks = _thread_blocks(tmp_path, found, block_records=8)
    queue = CountingQueue()
    n_blocks = 0
    while any(blocks.values()):  # the threads' blocks interleaved, all in the queue before the first poll
        for t in sorted(blocks):
            if blocks[t]:
                queue.append(blocks[t].pop(0))
                n_blocks += 1
    sink = BatchListSink()
    dispatcher = Dispatcher(queue, sink, sorted(found), cache_blocks=8)
    while dispatcher.poll(max_blocks=64):
        pass
    dispatcher.publish_ready(INFINITE_SCN)

    assert len({r["tx_seq"] for r in sink.rows}) == threads * per_thread
    assert n_blocks > 64  # a poll of 64 blocks would push most of them out of a cache of 8
    # each block read once by the tail, and a few again at most (a commit whose block left
    # the cache while the other threads' blocks it waited for were read)
    assert queue.reads <= n_blocks + 8, (queue.reads, n_blocks)
