"""The reader of OpenLogReplicator's file-writer output: its JSON messages, one a line, in
the files of one ``output`` (:mod:`.location`), into the queue, exactly once across kills
and restarts.

The messages are those OpenLogReplicator sends over its network writer, read with
:func:`~olr_buffer.olr_protocol.read_message` in every form its format options give, and
put into the queue as the OpenLogReplicator source (``olr://``) puts them, so that the
same messages give the same changefeed:

* ``BEGIN`` (added with the transaction's first row: one without rows adds nothing) and
  the rows (``scn``: the last one the transaction's messages gave; ``tm``: the message's
  own) in queue thread ``rth`` (1 without it), in message order;
* ``COMMIT`` in queue thread 1 with the key ``(c_scn, 1, 0, c_idx)`` of the message that
  ends the transaction (a ``commit`` entry, or the one message of a transaction in
  OpenLogReplicator's one-message-per-transaction form), and thread 1's progress moved
  to ``c_scn``: the output is in commit order, one stream (OpenLogReplicator merges the
  RAC threads itself), so thread 1 is the only thread in play.

A message's position is ``(c_scn, c_idx)``; messages of a version that writes no
``c_idx`` are numbered as OpenLogReplicator numbers them (from 0, the messages that share
a ``c_scn``). Positions increase strictly over the output; checkpoint messages (``chkpt``)
are skipped.

**Exact restart.** The state stored with every block (:class:`~.state.OlrFileState`) is
where the reader is: the file, the byte offset and number of the line, and how many of
that line's steps are in the queue (a step per payload entry, and the line's end, which
commits a one-message transaction), with the transaction open there. Appends happen only
between steps, with the state as it is then, so a restart reads the line again and goes
on with its next step: nothing twice, nothing lost.

**Bad lines.** Every check is made before a line's first step: a line that cannot be
taken stops the read with ``FILE:LINE: reason`` (exit 3) once what came before it is in
the queue, or, with ``--dead-letter``, is written there and skipped whole.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ...changes import (
    BEGIN,
    COMMIT,
    DDL,
    DEFAULT_BLOCK_BYTES,
    DEFAULT_BLOCK_RECORDS,
    DELETE,
    INSERT,
    UPDATE,
    RecordError,
    end_payload,
    row_payload,
    schema_fields,
)
from ...dead_letters import DeadLetterError, DeadLetters
from ...faults import fault_point
from ...olr_protocol import MessageError, object_text, raw_text, read_message
from ...olr_protocol.json_messages import OP_BEGIN, OP_CHECKPOINT, OP_COMMIT, OP_DDL, OP_DELETE, OP_INSERT, OP_UPDATE
from ...txbuffer import BlockAppender
from ..olr_types import ColumnsError, SchemaDocuments
from ..stream import BlockWriter
from .errors import LineError, OlrFileError
from .location import Output
from .state import STATE_KEY, OlrFileState, OpenTransaction, Position, TableColumns, columns_key

log = logging.getLogger("olr_buffer.olr_file")

THREAD = 1  # the queue thread of the commits: the only thread in play
_ROW_CODES = {OP_INSERT: INSERT, OP_UPDATE: UPDATE, OP_DELETE: DELETE, OP_DDL: DDL}
_UNSUPPORTED = (
    "OpenLogReplicator's format options message 4 and 8 (no begin, no commit message) are not "
    "supported: each transaction's bounds are needed"
)


def _text(p: Position) -> str:
    return f"c_scn {p[0]} c_idx {p[1]}"


class _Txn:
    """The transaction being read."""

    __slots__ = ("xid", "thread", "first", "rows", "scn", "tm", "whole", "begun", "documented")

    def __init__(
        self,
        xid: str,
        thread: int,
        first: Position,
        scn: int,
        tm: int | None,
        whole: bool,
        begun: bool = False,
        rows: int = 0,
        documented: list[str] | None = None,
    ) -> None:
        self.xid = xid
        self.thread = thread
        self.first = first
        self.rows = rows
        self.scn = scn  # the last scn its messages gave
        self.tm = tm  # the tm of its first message
        self.whole = whole  # opened by a message without a begin entry: ends with that message
        self.begun = begun  # its BEGIN record is added (with its first row)
        self.documented: list[str] = documented or []  # schema versions whose document a row of it carries


class _Row:
    """A row entry, checked: what its step adds."""

    __slots__ = ("code", "entry", "owner", "table", "obj", "before", "after", "columns")

    def __init__(
        self,
        code: int,
        entry,
        owner: str,
        table: str,
        obj: int | None,
        before: str | None,
        after: str | None,
        columns: str | None,
    ) -> None:
        self.code = code
        self.entry = entry
        self.owner = owner
        self.table = table
        self.obj = obj
        self.before = before
        self.after = after
        self.columns = columns  # schema.columns' JSON text, if the entry gives them


class OlrFileReader(BlockWriter):
    """Reads the files of ``output`` into ``queue`` from ``state`` (None: from the first
    file's start); see the module doc."""

    def __init__(
        self,
        queue: BlockAppender,
        output: Output,
        *,
        state: OlrFileState | None = None,
        columns: dict[bytes, str] | None = None,
        stop: threading.Event | None = None,
        dead_letters: DeadLetters | None = None,
        on_append: Callable[[], None] | None = None,
        block_records: int = DEFAULT_BLOCK_RECORDS,
        block_bytes: int = DEFAULT_BLOCK_BYTES,
        flush_seconds: float = 0.1,
    ) -> None:
        super().__init__(
            queue,
            thread=THREAD,
            on_append=on_append,
            block_records=block_records,
            block_bytes=block_bytes,
            stop=stop,
            flush_seconds=flush_seconds,
        )
        self.output = output
        self.name = output.uri
        self.dead_letters = dead_letters
        self.columns: dict[bytes, str] = dict(columns or {})  # the tables' columns as last given, by key
        self._schemas = SchemaDocuments()
        self.finished = False  # read every file to its end (replay)
        # the state stored with every block
        self.file: str | None = None
        self.offset = 0
        self.line = 1
        self.steps = 0
        self.last: Position | None = None
        self.last_commit: Position | None = None
        self.counted: Position | None = None
        self.txn: _Txn | None = None
        self.messages = 0
        self.transactions = 0
        self.checkpoints = 0
        if state is not None:
            self._restore(state)

    # -- state ---------------------------------------------------------------------------

    def _restore(self, st: OlrFileState) -> None:
        self.file, self.offset, self.line, self.steps = st.file, st.offset, st.line, st.steps
        self.last, self.last_commit, self.counted = st.last, st.last_commit, st.counted
        self.messages, self.transactions, self.checkpoints = st.messages, st.transactions, st.checkpoints
        o = st.open
        if o is not None:
            self.txn = _Txn(
                o.xid, o.thread, (o.first[0], o.first[1]), o.scn, o.tm, o.whole, o.begun, o.rows, list(o.documented)
            )

    def state(self) -> OlrFileState:
        t = self.txn
        return OlrFileState(
            output=self.name,
            file=self.file,
            offset=self.offset,
            line=self.line,
            steps=self.steps,
            last=self.last,
            last_commit=self.last_commit,
            counted=self.counted,
            open=None
            if t is None
            else OpenTransaction(t.xid, t.thread, t.first, t.scn, t.tm, t.whole, t.begun, t.rows, list(t.documented)),
            messages=self.messages,
            transactions=self.transactions,
            checkpoints=self.checkpoints,
            finished=self.finished,
            written=time.time(),
        )

    state_key = STATE_KEY  # (and the tables' columns not stored yet, under their keys)

    def _appended(self) -> None:
        fault_point("after_append")

    def _maybe_append(self) -> None:
        b = self.builder
        if b.count >= self.block_records or b.nbytes >= self.block_bytes:
            self._append()

    def _add(self, code: int, scn: int, xid: str, line: int, payload: list) -> None:
        self._add_record(code, scn, xid, 0, line, payload, may_close=False)  # closed between two steps

    # -- the files -----------------------------------------------------------------------

    def read(self, follow: bool, poll_interval: float = 0.1) -> None:
        """Read every file to its end (``follow`` False), or follow the output (the last
        file as it grows, the next ones as they appear) until ``stop``."""
        self._read(follow, poll_interval)
        self._use(THREAD)
        self._append()  # what it holds, and the state as of the end or the stop

    def _read(self, follow: bool, poll_interval: float) -> None:
        out = self.output
        while not self.stop.is_set():
            names = self._files()
            if self.file is None:
                if not names:
                    if not follow:
                        return
                    self._idle(poll_interval)
                    continue
                self.file, self.offset, self.line, self.steps = names[0], 0, 1, 0
            if self.file not in names:
                raise OlrFileError(
                    out.path(self.file),
                    self.line,
                    "the file being read is gone (removed or renamed while olr-buffer had not read it to its end)",
                    hint="put it back; the same command resumes at this line",
                )
            i = names.index(self.file)
            complete = i + 1 < len(names)  # a later file exists: this one is written out
            self._read_file(final=complete or not follow)
            if self.stop.is_set():
                return
            if complete:
                log.info(
                    "%s: read to its end; reading %s",
                    out.path(self.file),
                    names[i + 1],
                    extra={"file": out.path(names[i + 1])},
                )
                self.file, self.offset, self.line, self.steps = names[i + 1], 0, 1, 0
                continue
            if not follow:
                self.finished = True
                return
            self._idle(poll_interval)

    def _files(self) -> list[str]:
        try:
            return self.output.files()
        except OSError as exc:
            raise OlrFileError(
                self.output.directory,
                None,
                f"cannot list the directory: {exc.strerror or exc}",
                hint="the directory of OpenLogReplicator's output must be readable by this user; "
                "the same command resumes",
            ) from None

    def _idle(self, poll_interval: float) -> None:
        if self.builder.count:
            self._use(THREAD)
            self._append()
        self.stop.wait(poll_interval)

    def _read_file(self, final: bool) -> None:
        """Read the lines of the current file from the current offset: to its end, or (not
        ``final``) up to a last line still being written (without its ``\\n``)."""
        assert self.file is not None  # the loop chose a file before reading it
        path = self.output.path(self.file)
        try:
            f = open(path, "rb")
        except OSError as exc:
            raise OlrFileError(
                path,
                self.line,
                f"cannot open it: {exc.strerror or exc}",
                hint="the file must be readable by this user; the same command resumes",
            ) from None
        with f:
            size = os.fstat(f.fileno()).st_size
            if size < self.offset:
                raise OlrFileError(
                    path,
                    self.line,
                    f"the file holds {size:,} bytes, fewer than the {self.offset:,} "
                    "read from it already: it was cut short or replaced",
                    hint="put back the file OpenLogReplicator wrote; the same command resumes at this line",
                )
            f.seek(self.offset)
            while not self.stop.is_set():
                raw = f.readline()
                if not raw:
                    return
                if raw[-1:] != b"\n" and not final:
                    return  # still being written: read once its "\n" is there
                self._line(path, raw)
                if not final and self.builder.count and self.flush_due(time.monotonic()):
                    self._use(THREAD)
                    self._append()

    # -- a line ----------------------------------------------------------------------------

    def _line(self, path: str, raw: bytes) -> None:
        text = raw[:-1] if raw[-1:] == b"\n" else raw
        if text[-1:] == b"\r":  # "new-line": 2
            text = text[:-1]
        if text.strip():
            try:
                self._take(text)
            except LineError as exc:
                reason = str(exc)
                if self.dead_letters is None:
                    self._use(THREAD)
                    self._append()  # what came before it is kept, with the position of this line
                    raise OlrFileError(path, self.line, reason) from None
                try:
                    self.dead_letters.put(path, self.line, reason, raw)
                except DeadLetterError:
                    self._use(THREAD)
                    self._append()
                    raise
            except RecordError as exc:
                self._use(THREAD)
                self._append()
                raise OlrFileError(path, self.line, str(exc)) from None
        self.offset += len(raw)
        self.line += 1
        self.steps = 0
        self._maybe_append()

    def _take(self, text: bytes) -> None:
        try:
            m = read_message(text)
        except MessageError as exc:
            reason = exc.message
            if b"}{" in text:
                reason += (
                    '; several messages on one line: OpenLogReplicator\'s file writer needs "new-line": 1 '
                    "(its default) or 2"
                )
            raise LineError(reason) from None
        payload = m.payload
        if self.steps == 0:
            if payload and all(e.op == OP_CHECKPOINT for e in payload):
                self.checkpoints += 1
                return
            pos, counted = self._position(m)
            rows = self._check(m, pos)
            taken = False
        else:  # the line was taken in part before a restart: its checks passed then
            assert self.last is not None  # the position of the line taken in part
            pos, counted = self.last, False
            rows = self._rows(m)
            taken = True
        for i in range(self.steps, len(payload)):
            entry = payload[i]
            op = entry.op
            if op in _ROW_CODES:
                self._row(rows[i], m, pos)
            elif op == OP_BEGIN:
                self._open(m, pos, whole=False)
            elif op == OP_COMMIT:
                self._commit(m, pos)
            else:
                self.checkpoints += 1
            if not taken:  # with its first step (an append before it stores the state before the line)
                taken = True
                self._taken(pos, counted)
            self.steps = i + 1
            self._maybe_append()
        if not taken:
            self._taken(pos, counted)
        if self.txn is not None and self.txn.whole:
            self._commit(m, pos)

    def _taken(self, pos: Position, counted: bool) -> None:
        self.last = pos
        if counted:
            self.counted = pos
        self.messages += 1

    # -- checks (before the line's first step) ---------------------------------------------

    def _position(self, m) -> tuple[Position, bool]:
        """The message's position, and whether it was counted (no ``c_idx`` given)."""
        if m.c_scn is None:
            raise LineError("no c_scn (the commit SCN OpenLogReplicator writes in every message of a transaction)")
        if m.c_idx is not None:
            pos, counted = (m.c_scn, m.c_idx), False
        else:
            c = self.counted
            pos, counted = (m.c_scn, c[1] + 1 if c is not None and c[0] == m.c_scn else 0), True
        if self.last is not None and pos <= self.last:
            raise LineError(
                f"the position ({_text(pos)}) does not follow the last message's ({_text(self.last)}): positions "
                "increase over OpenLogReplicator's output; this is a message written again (OpenLogReplicator "
                "restarted from an earlier checkpoint and appended again what it had written: remove the repeated "
                "lines), or a version that stamps c_scn with a transaction's begin SCN (2.0: its issue 330), which is "
                "not supported"
            )
        return pos, counted

    def _rows(self, m) -> dict[int, _Row]:
        """The row entries of ``m`` by index, their values checked; :class:`LineError`."""
        rows = {}
        for i, entry in enumerate(m.payload):
            code = _ROW_CODES.get(entry.op)
            if code is None:
                continue
            schema = entry.schema
            owner, table, obj = (schema.owner, schema.table, schema.obj) if schema is not None else (None, None, None)
            if table is None and code != DDL:  # OpenLogReplicator names every row's table (OBJ_<n> when it cannot)
                raise LineError(f"a row ({entry.op}) without schema.table")
            # what OpenLogReplicator does not name is the empty string, as the olr source has it: the owner of an
            # object it cannot name (and of every row in its schemaless mode), the table of a ddl without schema
            owner, table = owner or "", table or ""
            try:
                before = object_text(entry.before, "before")
                after = object_text(entry.after, "after")
            except MessageError as exc:
                raise LineError(exc.message) from None
            if code != DDL and before is None and after is None:
                raise LineError(f"a row ({entry.op}) with neither before nor after")
            if code == DDL and entry.sql is None:
                raise LineError("a ddl without sql")
            try:
                columns = raw_text(schema.columns) if schema is not None and table else None
            except MessageError as exc:
                raise LineError(exc.message) from None
            for value, what in (
                (owner, "schema.owner"),
                (table, "schema.table"),
                (entry.rid, "rid"),
                (entry.sql, "sql"),
            ):
                if value is not None:
                    try:
                        value.encode()
                    except UnicodeEncodeError:
                        raise LineError(f"{what} is not valid Unicode (lone surrogate)") from None
            if columns is not None and self.columns.get(columns_key(owner, table)) != columns:
                self._document(owner, table, columns)  # new columns are refused here, before they are kept, when bad
            rows[i] = _Row(code, entry, owner, table, obj, before, after, columns)
        return rows

    def _check(self, m, pos: Position) -> dict[int, _Row]:
        """Every check of the message against the transaction open before it, made before
        anything of it is taken."""
        rows = self._rows(m)
        rth = m.rth
        if rth is not None and not 1 <= rth < 1 << 31:
            raise LineError(f"rth {rth} is not a redo thread")
        if m.xid is not None:
            try:
                m.xid.encode()
            except UnicodeEncodeError:
                raise LineError("xid is not valid Unicode (lone surrogate)") from None
        txn = self.txn
        xid = txn.xid if txn is not None else None
        scn = txn.scn if txn is not None else 0
        for entry in m.payload:
            op = entry.op
            if op in _ROW_CODES:
                if xid is None:
                    self._opening(m, pos)
                    xid, scn = m.xid, (m.scn if m.scn is not None else 0)
                elif m.xid is not None and m.xid != xid:
                    raise LineError(f"a message of transaction {m.xid} while transaction {xid} has no commit yet")
                if m.scn is not None:
                    scn = m.scn
                if scn > pos[0]:
                    raise LineError(
                        f"a row at scn {scn}, above the transaction's c_scn {pos[0]}: c_scn must be the commit's"
                    )
            elif op == OP_BEGIN:
                if xid is not None:
                    raise LineError(f"a begin while transaction {xid} has no commit yet; {_UNSUPPORTED}")
                self._opening(m, pos)
                xid, scn = m.xid, (m.scn if m.scn is not None else 0)
            elif op == OP_COMMIT:
                if xid is None:
                    raise LineError(f"a commit with no transaction open; {_UNSUPPORTED}")
                if m.xid is not None and m.xid != xid:
                    raise LineError(f"a message of transaction {m.xid} while transaction {xid} has no commit yet")
                xid = None
            elif op != OP_CHECKPOINT:
                raise LineError(f"unknown op {op!r} in the payload")
        return rows

    @staticmethod
    def _opening(m, pos: Position) -> None:
        if m.xid is None:
            raise LineError("a transaction without xid")
        if pos[0] == 0:
            raise LineError("c_scn 0 is not the position of a transaction")

    # -- steps -----------------------------------------------------------------------------

    def _thread(self, m) -> int:
        if m.rth is not None:
            return m.rth
        return self.txn.thread if self.txn is not None else THREAD

    def _open(self, m, pos: Position, whole: bool) -> _Txn:
        txn = self.txn = _Txn(m.xid, self._thread(m), pos, m.scn if m.scn is not None else 0, m.tm, whole)
        return txn

    def _row(self, row: _Row, m, pos: Position) -> None:
        self._use(self._thread(m))  # first: it may append, with the state before this step
        txn = self.txn
        if txn is None:
            txn = self._open(m, pos, whole=True)
        if m.scn is not None:
            txn.scn = m.scn
        entry = row.entry
        if not txn.begun:
            txn.begun = True
            self._add(BEGIN, max(1, min(txn.scn, pos[0])), txn.xid, txn.first[1], end_payload(txn.tm))
        txn.rows += 1
        payload = row_payload(m.tm, row.owner, row.table, row.obj, entry.rid, row.before, row.after, entry.sql)
        if row.columns is not None:
            key = columns_key(row.owner, row.table)
            if self.columns.get(key) != row.columns:
                self.columns[key] = row.columns
                self._pending_meta[key] = TableColumns(owner=row.owner, table=row.table, columns=row.columns).encode()
        known = self._schema(row.owner, row.table) if row.table else None
        if known is not None:  # the row names its table's version; the first of the transaction carries the document
            version, document = known
            payload += schema_fields(version, None if version in txn.documented else document)
            if version not in txn.documented:
                txn.documented.append(version)
        self._add(row.code, txn.scn, txn.xid, pos[1], payload)

    def _schema(self, owner: str, table: str) -> tuple[str, str] | None:
        """``(version, document)`` of the table's schema document, from the last columns
        the output gave for it (None: it gave none)."""
        text = self.columns.get(columns_key(owner, table))
        return None if text is None else self._document(owner, table, text)

    def _document(self, owner: str, table: str, text: str) -> tuple[str, str]:
        try:
            return self._schemas.of(owner, table, text)
        except ColumnsError as exc:
            raise LineError(f"{owner}.{table}: {exc}") from None

    def _commit(self, m, pos: Position) -> None:
        self._use(THREAD)
        txn = self.txn
        assert txn is not None  # _check refused a commit with no transaction open
        c_tm = m.tm if m.tm is not None else txn.tm
        self.txn = None
        self.last_commit = pos
        if not txn.begun:  # no row: nothing to publish, nothing appended
            return
        self.transactions += 1
        self.builder.heartbeat(pos[0])
        self._add(COMMIT, pos[0], txn.xid, pos[1], end_payload(c_tm))
