"""The changefeed writer against a list model: whatever it is asked (write, write a batch,
flush, abandon, reopen, lose the manifest, lose the end of ``published.jsonl``), the part
files hold exactly the transactions the model says are published, gapless, in order,
each once; ``next_tx_seq`` counts published and buffered ones; no temporary file stays
but the open file's."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from olr_buffer.changes import INSERT, Commit, CommitKey
from olr_buffer.sinks.parquet.writer import MANIFEST, META_DIR, PUBLISHED_LOG, ChangefeedWriter

FILE_ROWS = 4  # a file is published once it holds this many rows
ROW_GROUP_ROWS = 2  # row groups split transactions inside a file


def _row(scn: int, i: int) -> list:
    return [INSERT, scn, i, 1, i, None, "O", "T", None, f"R{i}", None, f'{{"I":{i}}}', None]


class WriterMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="writer-model-"))
        self.cf = self.root / "cf"
        self.writer = self._open()
        self.scn = 0
        self.published: list[tuple[str, int]] = []  # (xid, rows): durable
        self.pending: list[tuple[str, int]] = []  # handed over, not yet published
        self.pending_rows = 0

    def _open(self) -> ChangefeedWriter:
        return ChangefeedWriter(self.cf, file_rows=FILE_ROWS, row_group_rows=ROW_GROUP_ROWS, durable=False)

    def _commit(self) -> Commit:
        self.scn += 10
        return Commit(f"x{self.scn}", CommitKey(self.scn, 1, 1, self.scn), self.scn * 1000)

    def _handed(self, xid: str, rows: int) -> None:
        """The model of one transaction handed to the writer."""
        if not rows:
            return  # an empty transaction takes no tx_seq
        self.pending.append((xid, rows))
        self.pending_rows += rows
        if self.pending_rows >= FILE_ROWS:
            self._published()

    def _published(self) -> None:
        self.published += self.pending
        self.pending, self.pending_rows = [], 0

    def _lost(self) -> None:
        self.pending, self.pending_rows = [], 0

    @rule(rows=st.integers(0, 5))
    def write(self, rows: int) -> None:
        commit = self._commit()
        n = self.writer.write_transaction(commit, [(1, [_row(commit.scn, i) for i in range(rows)])])
        assert n == rows
        self._handed(commit.xid, rows)

    @rule(sizes=st.lists(st.integers(0, 5), max_size=4))
    def write_batch(self, sizes: list[int]) -> None:
        items = []
        for rows in sizes:
            commit = self._commit()
            items.append((commit, 1, [_row(commit.scn, i) for i in range(rows)]))
        assert self.writer.write_transactions(items) == sizes
        for (commit, _, _), rows in zip(items, sizes):
            self._handed(commit.xid, rows)

    @rule()
    def flush(self) -> None:
        self.writer.flush()
        self._published()

    @rule()
    def abandon(self) -> None:
        self.writer.abandon()
        self._lost()

    @rule()
    def reopen(self) -> None:
        self.writer.release()
        self._lost()
        self.writer = self._open()

    @precondition(lambda self: self.published)
    @rule()
    def lose_the_manifest(self) -> None:
        self.writer.release()
        self._lost()
        (self.cf / META_DIR / MANIFEST).unlink()
        self.writer = self._open()
        logged = self._logged()  # every file adopted is logged, once (in order, unless the log lost lines)
        assert sorted(logged) == self._files() and len(set(logged)) == len(logged)

    @precondition(lambda self: self.published)
    @rule(keep=st.integers(0, 3))
    def crash_before_the_log_and_the_manifest(self, keep: int) -> None:
        """A crash after a file's rename: neither the log nor the manifest has it."""
        self.writer.release()
        self._lost()
        log = self.cf / META_DIR / PUBLISHED_LOG
        log.write_text("".join(log.read_text().splitlines(keepends=True)[:keep]))
        (self.cf / META_DIR / MANIFEST).unlink()
        self.writer = self._open()

    @rule(keep=st.integers(0, 3))
    def truncate_the_log(self, keep: int) -> None:
        self.writer.release()
        self._lost()
        log = self.cf / META_DIR / PUBLISHED_LOG
        if log.exists():
            log.write_text("".join(log.read_text().splitlines(keepends=True)[:keep]))
        self.writer = self._open()

    def _files(self) -> list[str]:
        return sorted(p.name for p in self.cf.glob("part-*.parquet"))

    def _logged(self) -> list[str]:
        log = self.cf / META_DIR / PUBLISHED_LOG
        return [json.loads(line)["file"] for line in log.read_text().splitlines()] if log.exists() else []

    @invariant()
    def the_files_hold_what_is_published(self) -> None:
        files = self._files()
        rows = []
        for name in files:
            t = pq.read_table(self.cf / name, columns=["tx_seq", "op_seq", "xid", "rid"])
            rows += zip(*(t.column(c).to_pylist() for c in ("tx_seq", "op_seq", "xid", "rid")))
        want = [(seq, i, xid, f"R{i}") for seq, (xid, n) in enumerate(self.published) for i in range(n)]
        assert rows == want
        assert self.writer.next_tx_seq == len(self.published) + len(self.pending)
        assert self.writer.files_published == len(files)
        temporary = [p.name for p in self.cf.iterdir() if p.name.startswith(".")]
        assert len(temporary) <= (1 if self.pending else 0)  # only the open file's
        logged = self._logged()
        assert len(logged) == len(set(logged)) and set(logged) <= set(files)

    def teardown(self) -> None:
        self.writer.release()
        shutil.rmtree(self.root, ignore_errors=True)


TestWriterMachine = WriterMachine.TestCase
TestWriterMachine.settings = settings(settings.default, stateful_step_count=12)
