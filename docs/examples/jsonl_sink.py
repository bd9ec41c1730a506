"""A whole olr-buffer sink, written from the Sink contract (olr_buffer/sinks/base.py):
``jsonl``, a directory of JSON-lines files, one file per batch of transactions::

    batch-00000000000000000000-00000000000000000041.jsonl   transactions 0..41
    batch-00000000000000000042-00000000000000000097.jsonl   transactions 42..97

one line a row, in commit order (``tx_seq``, then ``op_seq``)::

    {"tx_seq": 0, "op_seq": 0, "xid": "0x0001.002.00000003", "c_scn": 1002, "key": [1002, 1, 1, 7],
     "op": "c", "scn": 1000, "thread": 1, "owner": "SHOP", "table": "ITEMS", "before": null,
     "after": "{\\"ID\\": 1}"}

(``before``, ``after``: the row's JSON text, as the Parquet changefeed's columns hold it).
Each transaction is there once, in order, also after a kill: a file appears whole or not
at all (written under a temporary name, fsynced, renamed), and the sink knows on open,
from its own files, the last commit it made durable; the runtime skips what is at or below
it when it reads the queue again. Its position document (stored by the runtime in the
queue with each checkpoint) lets it refuse a directory that lost files since. One queue
writes it: the first records its id (``_owner``); another queue is refused, unless told to
adopt the directory (``PipelineOptions(adopt_changefeed=True)``).

docs/architecture.md, "Adding a sink", walks through it, and
tests/sinks/test_example_sink.py runs ``replay`` through it, also killed and run again. To
make it a sink of olr-buffer, move it to ``olr_buffer/sinks/jsonl/`` and add its ``KIND``
to ``KINDS`` in ``olr_buffer/sinks/__init__.py``; ``PipelineOptions(sink="jsonl")`` then
chooses it.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from olr_buffer.changes import AFTER, BEFORE, CHANGEFEED_OP, CODE, OWNER, SCN, TABLE, Commit, CommitKey
from olr_buffer.errors import OlrBufferError
from olr_buffer.faults import fault_point
from olr_buffer.fsutil import atomic_write, unlink_quietly
from olr_buffer.sinks.base import ChangefeedOwner, SinkFigures, SinkKind, SinkOpening, SinkSettings

POSITION_KEY = b"jsonl/position"  # its position document's key in the queue's metadata
OWNER_FILE = "_owner"
_NAME = re.compile(r"^batch-([0-9]{20})-([0-9]{20})\.jsonl$")


class JsonlSinkError(OlrBufferError):
    """A directory this queue may not write (one line; ``olr-buffer`` exits 1)."""


@dataclass(frozen=True)
class JsonlOptions:
    file_rows: int = 10_000  # a file is written once it holds this many rows (and at each checkpoint)


def options(flags: Mapping[str, Any]) -> JsonlOptions:
    """Its own options from ``replay``'s and ``run``'s changefeed options: ``--file-rows``."""
    return JsonlOptions(file_rows=flags["file_rows"]) if flags.get("file_rows") else JsonlOptions()


class JsonlSink:
    """The contract's members: ``path``, ``position_key``, ``open``, ``last_commit``,
    ``next_tx_seq``, ``write_transaction``, ``write_rows``, ``pending_since``, ``flush``,
    ``position``, ``figures``, ``abandon``, ``release``."""

    position_key = POSITION_KEY

    def __init__(self, path: str, settings: SinkSettings, opts: JsonlOptions) -> None:
        self.path = path
        self.durable = settings.durable
        self.file_rows = opts.file_rows
        self.created = not os.path.isdir(path)
        os.makedirs(path, exist_ok=True)
        self.lines: list[str] = []  # handed over, not durable yet
        self.since: float | None = None  # when the oldest of them was handed over
        self.files = self.published = self.rows_published = 0
        self.last_commit: CommitKey | None = None  # the last commit durable here
        self.last_handed: CommitKey | None = None  # the last commit handed over
        self.durable_next = 0  # the tx_seq after the last durable transaction
        self._recover()
        self.next_tx_seq = self.durable_next  # the tx_seq of the next transaction handed over

    # -- open: what is durable here, and whether this queue may write it ------------------

    def _batches(self) -> list[tuple[int, int, str]]:
        """The published files, ``(first, last, name)`` by tx_seq."""
        found = ((_NAME.match(n), n) for n in os.listdir(self.path))
        return sorted((int(m[1]), int(m[2]), n) for m, n in found if m)

    def _recover(self) -> None:
        """A temporary file of a killed run is removed; the files must run from tx_seq 0
        without a gap; the last line of the last one is the last durable commit."""
        for name in os.listdir(self.path):
            if name.endswith(".tmp"):
                unlink_quietly(os.path.join(self.path, name))
        batches = self._batches()
        for first, last, name in batches:
            if first != self.durable_next:
                raise JsonlSinkError(f"{self.path}: {name}: expected a file from tx_seq {self.durable_next}")
            self.durable_next = last + 1
        self.files = len(batches)
        if batches:
            with open(os.path.join(self.path, batches[-1][2]), "rb") as f:
                self.last_commit = CommitKey(*json.loads(f.readlines()[-1])["key"])

    def open(
        self, owner: ChangefeedOwner, stored: bytes | None, *, queue: str, adopt: bool, legacy: Any = None
    ) -> SinkOpening:
        """Refuse another queue's directory (unless ``adopt``) and one behind the position
        stored at this queue's last checkpoint; count what was published after it."""
        owner_path = os.path.join(self.path, OWNER_FILE)
        recorded = None
        if os.path.exists(owner_path):
            with open(owner_path) as f:
                recorded = f.read().strip()
        adopting = recorded is not None and recorded != owner.queue_id
        if adopting and not adopt:
            raise JsonlSinkError(f"{self.path}: written by queue {recorded}, not by {queue} ({owner.queue_id})")
        from_seq = json.loads(stored)["next_tx_seq"] if stored else 0
        if from_seq > self.durable_next:
            raise JsonlSinkError(
                f"{self.path}: holds tx_seq up to {self.durable_next - 1}, but {queue}'s checkpoint "
                f"says {from_seq - 1} was published: files were removed"
            )
        if recorded != owner.queue_id:
            atomic_write(owner_path, owner.queue_id.encode() + b"\n", durable=self.durable)
        since = (0, 0)  # published by this queue after its last checkpoint (a crash lost them from its counters)
        if not adopting and self.durable_next > from_seq:
            # a checkpoint flushes first: its next_tx_seq is where a file starts
            rows = sum(self._rows(name) for first, _, name in self._batches() if first >= from_seq)
            since = (self.durable_next - from_seq, rows)
        return SinkOpening(adopting, since)

    def _rows(self, name: str) -> int:
        with open(os.path.join(self.path, name), "rb") as f:
            return sum(1 for _ in f)

    # -- what the dispatcher calls --------------------------------------------------------

    def write_transaction(self, commit: Commit, chunks: Iterable[tuple[int, list[list]]]) -> int:
        rows, threads = [], []
        for thread, part in chunks:
            rows += part
            threads += [thread] * len(part)
        return self._add(commit.xid, commit.key, rows, threads)

    def write_rows(self, rows: list[list], txs: list[tuple[str, CommitKey, int | None, int | list[int], int]]) -> None:
        i = 0
        for xid, key, _tm, thread, n in txs:
            threads = thread if isinstance(thread, list) else [thread] * n  # a list: each row's
            self._add(xid, key, rows[i : i + n], threads)
            i += n

    def _add(self, xid: str, key: CommitKey, rows: list[list], threads: list[int]) -> int:
        if not rows:
            return 0  # nothing written, no tx_seq used
        for op_seq, (row, thread) in enumerate(zip(rows, threads)):
            self.lines.append(
                json.dumps(
                    {
                        "tx_seq": self.next_tx_seq,
                        "op_seq": op_seq,
                        "xid": xid,
                        "c_scn": key.scn,
                        "key": list(key),
                        "op": CHANGEFEED_OP[row[CODE]],
                        "scn": row[SCN],
                        "thread": thread,
                        "owner": row[OWNER],
                        "table": row[TABLE],
                        "before": row[BEFORE],
                        "after": row[AFTER],
                    }
                )
                + "\n"
            )
        self.next_tx_seq += 1
        self.last_handed = key
        if self.since is None:
            self.since = time.monotonic()
        if len(self.lines) >= self.file_rows:
            self.flush()
        return len(rows)

    # -- what the runtime calls -----------------------------------------------------------

    def flush(self) -> None:
        """Write what was handed over as one file, whole or not at all."""
        if not self.lines:
            return
        name = f"batch-{self.durable_next:020d}-{self.next_tx_seq - 1:020d}.jsonl"
        atomic_write(os.path.join(self.path, name), "".join(self.lines).encode(), durable=self.durable)
        fault_point("after_rename")  # the crash tests' instant: published, the checkpoint not yet written
        self.files += 1
        self.published += self.next_tx_seq - self.durable_next
        self.rows_published += len(self.lines)
        self.durable_next, self.last_commit = self.next_tx_seq, self.last_handed
        self.lines, self.since = [], None

    def pending_since(self) -> float | None:
        return self.since

    def position(self) -> bytes:
        return json.dumps({"next_tx_seq": self.durable_next, "files": self.files}).encode()

    def figures(self) -> SinkFigures:
        return SinkFigures(
            files_published=self.files, transactions_published=self.published, rows_published=self.rows_published
        )

    def abandon(self) -> None:
        """Drop what is not durable: the runtime hands it over again on the next run."""
        self.lines, self.since, self.next_tx_seq = [], None, self.durable_next

    def release(self, remove_if_unused: bool = False) -> None:
        self.abandon()
        if remove_if_unused and self.created and not self.files:
            unlink_quietly(os.path.join(self.path, OWNER_FILE))
            os.rmdir(self.path)


def build(path: str, settings: SinkSettings, opts: JsonlOptions | None = None) -> JsonlSink:
    return JsonlSink(path, settings, opts or JsonlOptions())


def status(stored: bytes | None, legacy: Any, queue_id: str | None) -> dict:
    """What ``olr-buffer status`` shows of it: its position at the last checkpoint."""
    return json.loads(stored) if stored else {"next_tx_seq": 0, "files": 0}


KIND = SinkKind(
    "jsonl",
    build,
    POSITION_KEY,
    status,
    status_line=lambda doc: f"{doc['files']} file(s), next tx_seq {doc['next_tx_seq']}",
    options=options,
)
