"""The redo source's figures: cheap (no file is looked at: the service's metrics ask every
second), and its input's size for a replay's progress, whatever the capture process does
to the files meanwhile."""

from __future__ import annotations

import os
from pathlib import Path

from olr_buffer.changes import DEFAULT_BLOCK_BYTES, DEFAULT_BLOCK_RECORDS
from olr_buffer.simulate import simulate
from olr_buffer.sources.base import SourceSettings
from olr_buffer.sources.redo import RedoSource
from olr_buffer.testing import MemoryQueue


def _source(inp: Path) -> RedoSource:
    queue = MemoryQueue()
    source = RedoSource(str(inp), queue, SourceSettings(DEFAULT_BLOCK_RECORDS, DEFAULT_BLOCK_BYTES, processes=False))
    source.prepare(None, queue.meta_items(source.state_prefix))
    return source


def test_a_log_archived_while_its_size_is_taken_counts_nothing_that_once(tmp_path: Path):
    """`run` archives a sequence (plain file gone, its .zst there) while the figures are
    taken: this stopped `run` with a FileNotFoundError from the figures."""
    simulate(tmp_path / "in", threads=2, transactions=50, seed=3, records_per_file=60, compress_archived=False)
    source = _source(tmp_path / "in")
    read, total = source.input_size()
    assert read == 0 and total == sum(os.path.getsize(p) for p in (tmp_path / "in").glob("redo_*"))
    gone = sorted((tmp_path / "in").glob("redo_1_*"))[0]
    size = os.path.getsize(gone)
    gone.unlink()
    assert source.input_size() == (0, total - size)
    assert source.figures().records_read == 0


def test_the_figures_look_at_no_file(tmp_path: Path):
    simulate(tmp_path / "in", threads=1, transactions=20, seed=3, records_per_file=1000, compress_archived=False)
    source = _source(tmp_path / "in")
    for p in (tmp_path / "in").glob("redo_*"):
        p.unlink()
    figures = source.figures()  # would fail on the first file's size
    assert (figures.records_read, figures.quarantined) == (0, 0)
