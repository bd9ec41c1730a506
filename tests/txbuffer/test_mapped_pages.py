"""Reading the queue back does not keep its pages in the process's RSS: LmdbQueue gives
the mapped pages back every RELEASE_MAPPED_BYTES read (txbuffer/mapped.py)."""

from __future__ import annotations

import os
from pathlib import Path

from olr_buffer.dispatcher.replay import BlockCache
from olr_buffer.testing import MemoryQueue
from olr_buffer.txbuffer import LmdbQueue, mapped
from olr_buffer.txbuffer import lmdb_queue as lmdb_queue_module

RECORD = 64 * 1024  # incompressible records: the block on disk is as large as the records


def _segment_rss(path: str) -> int:
    """Resident bytes of this process's mappings of ``path`` (from /proc/self/smaps)."""
    ranges = {f"{s:x}-{e:x}" for s, e in mapped.mappings(path)}
    total, inside = 0, False
    with open("/proc/self/smaps") as fh:
        for line in fh:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = head in ranges
            elif inside and head == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


def _fill(q: LmdbQueue, blocks: int) -> dict[int, list[bytes]]:
    written = {}
    for _ in range(blocks):
        recs = [os.urandom(RECORD) for _ in range(8)]  # 512 KiB a block
        written[q.append(recs)] = recs
    return written


def test_reading_back_gives_the_mapped_pages_back(tmp_path: Path) -> None:
    q = LmdbQueue(tmp_path / "q", segment_bytes=1 << 30, durable=False)
    try:
        written = _fill(q, 96)  # 48 MiB in one segment
        seg = q.segments()[0].path
        q.release_mapped_pages()
        for first, recs in written.items():  # every block comes back whole after each release
            assert q.read_block(first).records() == recs
        limit = lmdb_queue_module.RELEASE_MAPPED_BYTES
        assert mapped.mappings(seg), "the segment is mapped"
        resident = _segment_rss(seg)
        assert resident <= limit + (4 << 20), f"{resident} bytes of the segment stay mapped after reading 48 MiB"
        # without releases, the same reads leave the whole segment resident: the check above can fail
        lmdb_queue_module.RELEASE_MAPPED_BYTES = 1 << 40
        try:
            for first in written:
                q.read_block(first)
            assert _segment_rss(seg) >= 40 << 20
        finally:
            lmdb_queue_module.RELEASE_MAPPED_BYTES = limit
    finally:
        q.close()


def test_block_cache_is_bounded_in_bytes() -> None:
    q = MemoryQueue()
    firsts = [q.append([os.urandom(RECORD) for _ in range(8)]) for _ in range(40)]
    cache = BlockCache(q, capacity=64, max_bytes=4 << 20)
    for first in firsts:
        block = cache.get(first)
        assert block.first == first
        assert cache.nbytes <= 4 << 20
    assert cache.nbytes == sum(b.nbytes for b in cache._blocks.values())
    assert len(cache._blocks) < len(firsts)
    big = BlockCache(q, capacity=2, max_bytes=1 << 40)
    for first in firsts:
        big.get(first)
    assert len(big._blocks) == 2  # the count bound still holds
