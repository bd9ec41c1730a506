"""A whole olr-buffer source, written from the Source contract (olr_buffer/sources/base.py):
``lines://PATH``, a file of changes, one JSON object a line::

    {"scn": 10, "xid": "t1", "op": "begin"}
    {"scn": 10, "xid": "t1", "op": "insert", "table": "SHOP.ITEMS", "after": {"ID": 1}}
    {"scn": 11, "xid": "t1", "op": "commit"}

(``op``: begin; insert, update, delete with ``before`` and/or ``after``; commit or
rollback: a transaction's records in order, one transaction after another). It
reads the file to its end (``replay``) or follows it (``run``), and resumes after the
last line in the queue. docs/architecture.md, "Adding a source", walks through it, and
tests/sources/test_example_source.py runs it through ``replay`` and ``run``. To make it a
source of olr-buffer, move it to ``olr_buffer/sources/lines/`` and add
``"lines": ".lines"`` to ``SCHEMES`` in ``olr_buffer/sources/__init__.py``.
"""

from __future__ import annotations

import json

from olr_buffer.changes import BEGIN, COMMIT, OP_CODES, ROLLBACK, BlockBuilder, end_payload, row_payload
from olr_buffer.errors import EXIT_BAD_INPUT, OlrBufferError
from olr_buffer.sources.base import (
    Acknowledgement,
    Reader,
    ResumeState,
    SourceFigures,
    SourceKind,
    SourceSettings,
    decode_state,
    encode_state,
)

STATE_KEY = b"lines/position"  # the resume state's key in the queue's metadata


class LinesState(ResumeState):
    """Where the reader is: the byte offset of the next line, and its number."""

    offset: int = 0
    line: int = 1


class BadLine(OlrBufferError):
    exit_code = EXIT_BAD_INPUT  # bad input: ``olr-buffer`` exits 3 with this one line


class LinesSource:
    """The five members of the contract: ``name`` and ``state_prefix``, ``prepare``,
    ``readers``, ``acknowledge`` and ``figures``. The runner runs the reader in a thread,
    stops it (``settings.stop``) and raises what it raises."""

    state_prefix = STATE_KEY

    def __init__(self, location: str, queue, settings: SourceSettings) -> None:
        self.path = location.removeprefix("lines://")
        self.name = location
        self.queue = queue  # appends blocks: queue.append(records, {STATE_KEY: state})
        self.settings = settings
        self.state = LinesState()
        self.records = 0

    def prepare(self, threads, resume) -> list[int]:
        raw = resume.get(STATE_KEY)
        if raw is not None:
            self.state = decode_state(LinesState, STATE_KEY, raw)
        return [1]  # one stream: queue thread 1

    def readers(self, follow: bool, poll_interval: float) -> list[Reader]:
        return [Reader("reader-lines", lambda: self._read(follow, poll_interval))]

    def acknowledge(self, ack: Acknowledgement) -> None:
        pass  # a file has nothing upstream to confirm to (a replication slot would)

    def figures(self) -> SourceFigures:
        return SourceFigures(records_read=self.records)

    # -- the reader -----------------------------------------------------------------------

    def _read(self, follow: bool, poll_interval: float) -> None:
        stop = self.settings.stop
        builder = BlockBuilder(1)
        with open(self.path, "rb") as f:
            f.seek(self.state.offset)
            while not stop.is_set():
                text = f.readline()
                if text.endswith(b"\n"):
                    self._add(builder, text)
                    self.state.offset += len(text)
                    self.state.line += 1
                    if builder.count >= self.settings.block_records:
                        self._append(builder)
                    continue
                f.seek(self.state.offset)  # an incomplete last line is read again when whole
                self._append(builder)
                if not follow:
                    return
                stop.wait(poll_interval)

    def _add(self, builder: BlockBuilder, text: bytes) -> None:
        try:
            m = json.loads(text)
            code, scn, xid = OP_CODES[m["op"]], int(m["scn"]), str(m["xid"])
        except (ValueError, KeyError, TypeError) as exc:
            raise BadLine(f"{self.path}:{self.state.line}: not a change ({type(exc).__name__}: {exc})") from None
        if code == BEGIN:
            builder.add(code, scn, 0, xid, 0, self.state.line, end_payload(None))
        elif code in (COMMIT, ROLLBACK):
            builder.add(code, scn, 0, xid, 0, self.state.line, end_payload(None))
            builder.heartbeat(scn)  # every change up to its end is in: it can be published
        else:
            owner, _, table = m.get("table", "").rpartition(".")
            before, after = (json.dumps(m[k]) if m.get(k) is not None else None for k in ("before", "after"))
            builder.add(code, scn, 0, xid, 0, self.state.line,
                        row_payload(None, owner, table, None, None, before, after))

    def _append(self, builder: BlockBuilder) -> None:
        """The records and the state after them, in one write: a crash loses or repeats nothing."""
        if not builder.count:
            return
        self.queue.append(builder.build(), {STATE_KEY: encode_state(self.state)})
        self.records += builder.count
        builder.reset()
        self.settings.on_append()


def check_replay(location: str) -> None:
    """``replay``: the file must be there (checked before any directory is made)."""
    path = location.removeprefix("lines://")
    try:
        open(path, "rb").close()
    except OSError as exc:
        raise BadLine(f"{path}: cannot read it ({exc.strerror or exc})") from None


KIND = SourceKind(
    "lines", LinesSource,
    status=lambda meta, now: None, status_key="lines", status_lines=lambda doc: [],
    check_replay=check_replay, shows_threads=False,
)
