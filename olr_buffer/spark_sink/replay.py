"""``replay`` on a Spark cluster: the same changefeed as the one-process replay, assembled
as DataFrame work (docs/spark.md, "Replay on Spark").

The steps, each a Spark job (named in the Spark UI's job descriptions):

1. **Read**: one task per log file (``.zst`` too), or per split of a plain file larger
   than :data:`SPLIT_BYTES` (a first job counts each split's newlines, so that each task
   knows its first line's number), reads and checks its lines with the redo source's own
   functions (:func:`~olr_buffer.sources.redo.decode_line`,
   :func:`~olr_buffer.sources.redo.check_order`), so that the records and the errors are
   the same as ``replay``'s. A task cannot see the thread's previous file or split: it
   reports its first line and its last ``(scn, sub)``, and the driver checks each
   thread's files and splits against each other. A bad line stops the job with ``FILE:LINE: reason`` before
   anything is published, or, with a dead-letter file, is written there and left out.
2. **Segments** (XID reuse): the begin and end records (a few per transaction) sorted per
   XID by row order; a begin above the first end's SCN of the transaction so far starts a
   new one, as the dispatcher rules. Every record takes its transaction's number by a
   running sum over its XID in row order.
3. **Transactions**: one aggregate per ``(xid, segment)``: the first end by
   ``(scn, thread, sequence, line)``, the lowest begin, how many ends and compensations.
   Committed, with a begin at or below the commit SCN, above the changefeed's last commit:
   published, numbered by commit key from the changefeed's next ``tx_seq``.
4. **Rows**: the rows and compensations of those transactions at or below the commit SCN
   (later ones are dropped and counted as late). Compensation is bracket matching per
   ``(xid, segment, rid)`` in row order, with windows (sorts, never a list per group): a
   running sum of +1 per row and -1 per compensation, floored at 0, gives each row its
   level; a compensation that finds the level at 0 cancels nothing; otherwise it cancels
   the row just before it at its level. ``op_seq`` is the row's number in its
   transaction in row order.
5. **Publish**: the rows, range-partitioned by ``(tx_seq, op_seq)`` into partitions of
   at most :data:`PARTITION_ROWS` rows and sorted, are written by the executors as one
   Parquet file a partition to a staging folder; the driver reads the files in order, a
   batch at a time (the rows never pass through its JVM), and hands them to the
   changefeed's own writer (:class:`~olr_buffer.sinks.parquet.ChangefeedWriter`): the
   same files, schema documents, manifest and Delta commits as ``replay``'s, local or on
   S3. A transaction larger than a partition streams through in batches.

Exactly once: everything above is a function of the input, so a rerun computes the same
transactions with the same ``tx_seq``; the writer's recovery on open keeps what was
published whole (and commits to the Delta table a file published but not committed), and
the rerun publishes only the commits above the changefeed's last.
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from ..changes import (
    BEGIN,
    COMMIT,
    COMPENSATION,
    INFINITE_SCN,
    LWN,
    ROLLBACK,
    ROW_CODES,
    Commit,
    CommitKey,
    RecordError,
    decode_record,
    encode_record,
    record,
)
from ..dead_letters import DeadLetters
from ..dispatcher import ReplayFigures
from ..errors import OlrBufferError
from ..sinks.parquet import DEFAULT_FILE_ROWS, DEFAULT_MODE, ChangefeedOwner, ChangefeedWriter, IcebergSettings
from ..sources.redo import (
    AFTER_MARKER,
    MAX_LINE_BYTES,
    CorruptCompressedFile,
    InputError,
    LogFile,
    check_contiguous,
    check_order,
    decode_line,
    parse_name,
    read_stream,
    scan,
)
from ..store import is_remote, open_store
from .reading import needs_pyspark

#: The file in the queue directory that holds the Spark replay's queue id: the changefeed's
#: owner, so that a rerun on the same queue directory resumes the same changefeed.
QUEUE_ID_FILE = "spark-replay.json"
#: Rows of a partition of the sorted result (a staged file) at most.
PARTITION_ROWS = 50_000
#: Rows of a transaction handed to the writer at once; a transaction of more rows streams.
CHUNK_ROWS = 4096
_BATCH_RECORDS = 1000  # small transactions are written together, about this many rows at a time

_RECORD, _ERROR, _FILE = 0, 1, 2  # kinds of what a read task yields
_ROW_CODES = sorted(ROW_CODES)
_BOM = b"\xef\xbb\xbf"

#: A plain log file larger than this is read by several tasks, one per split of about
#: this many bytes (``.zst`` files: one task each, whatever their size).
SPLIT_BYTES = 128 << 20

_PARSED_SCHEMA = (
    "kind int, thread int, seq long, part int, line long, code int, scn long, sub long, xid string, "
    "rid string, tm long, rec binary, msg string, raw binary"
)


class SparkReplayError(OlrBufferError):
    """The Spark replay cannot run as asked (its queue directory, a bug)."""


@dataclass
class SparkReplaySummary(ReplayFigures):
    """What a Spark replay did: the figures of every replay, and the Spark job's own."""

    files_read: int = 0
    held_for_run: int = 0  # ended above the watermark (until_watermark): left for run
    watermark: int | None = None  # until_watermark: the watermark at the end of the files
    # per thread, the log sequence a new queue reads from (recorded in the manifest, as
    # replay records it): the first that holds a record of a transaction left for run
    # (open, or ended above the watermark), else the last that holds a record of any;
    # run --adopt-changefeed needs the files from there on
    run_from: dict[int, int] = field(default_factory=dict)


# -- step 1: reading, on the executors --------------------------------------------------------


@dataclass(frozen=True)
class _Split:
    """A read task's part of a log file: the lines that start in ``[start, end)``
    (``end`` None: to the end of the file); ``newlines_before``: how many newlines the file
    holds before ``start`` (its first line's number follows from it)."""

    part: int = 0
    start: int = 0
    end: int | None = None
    newlines_before: int = 0


_TASK_SCHEMA = (
    "thread int, seq long, path string, compressed boolean, quarantine boolean, aws string, "
    "part int, start long, end long, newlines_before long"
)
_ARROW_ROWS = 8192  # rows of a read task's Arrow batch, at most
_ARROW_BYTES = 32 << 20  # and about this many bytes of records and raw lines


def _arrow_schema(ddl: str = _PARSED_SCHEMA):
    """The Arrow schema of a Spark DDL schema string (``"name type, ..."``), so that what a
    Python task yields and what Spark is told are written once."""
    import pyarrow as pa

    types = {"int": pa.int32(), "long": pa.int64(), "string": pa.string(), "binary": pa.binary()}
    return pa.schema([(name, types[kind]) for name, kind in (c.split() for c in ddl.split(", "))])


def _read_arrow(batches: Iterable[Any]) -> Iterator[Any]:
    """A read task (``mapInArrow``): :func:`_read_file` of each task row, as Arrow record
    batches of :data:`_PARSED_SCHEMA` (no pickling of rows)."""
    import pyarrow as pa

    schema = _arrow_schema()
    types = list(schema.types)

    def batch(rows: list[tuple]) -> Any:
        return pa.RecordBatch.from_arrays([pa.array(c, t) for c, t in zip(zip(*rows), types)], schema=schema)

    for tasks in batches:
        for task in tasks.to_pylist():
            os.environ.update(json.loads(task["aws"]))
            lf = LogFile(task["thread"], task["seq"], task["path"], task["compressed"])
            split = _Split(task["part"], task["start"], task["end"], task["newlines_before"])
            rows: list[tuple] = []
            size = 0
            for row in _read_file(lf, task["quarantine"], split):
                rows.append(row)
                size += len(row[11] or b"") + len(row[13] or b"")
                if len(rows) >= _ARROW_ROWS or size >= _ARROW_BYTES:
                    yield batch(rows)
                    rows, size = [], 0
            if rows:
                yield batch(rows)


def _count_newlines(task: tuple[int, int, str, dict, _Split]) -> tuple[int, int, int, int | None, str | None]:
    """A counting task: how many newlines a split of a plain file holds, as
    ``(thread, seq, part, count, None)``; ``(thread, seq, part, None, reason)`` if it cannot
    be read."""
    thread, seq, path, aws, split = task
    os.environ.update(aws)
    assert split.end is not None
    n, left = 0, split.end - split.start
    try:
        with _open(LogFile(thread, seq, path, False), split.start) as fh:
            while left > 0:
                chunk = fh.read(min(left, 1 << 23))
                if not chunk:
                    break
                n += chunk.count(b"\n")
                left -= len(chunk)
    except OSError as exc:
        return (thread, seq, split.part, None, f"cannot read: {exc.strerror or exc}")
    return (thread, seq, split.part, n, None)


def _read_file(lf: LogFile, quarantine: bool, split: _Split) -> Iterator[tuple]:
    """The records of one file (of its lines that start in ``split``) as rows of
    :data:`_PARSED_SCHEMA`; a bad line as an error row (and, unless ``quarantine``, the end
    of the split); last, the split's summary: its first line taken and the thread's
    ``(scn, sub)`` after its last (the driver checks the splits and files of a thread
    against each other)."""
    thread, seq, part = lf.thread, lf.sequence, split.part
    last_scn, last_sub = -1, -1
    first = None
    line, records, comps, nbytes = split.newlines_before, 0, 0, 0
    progress, closed = -1, False  # the thread's progress (every SCN up to it is written), closed by a close
    limit = MAX_LINE_BYTES + 1
    try:
        fh = _open(lf, max(0, split.start - 1))
    except OSError as exc:
        reason = f"cannot open: {exc.strerror}"
        yield (_ERROR, thread, seq, part, None, None, None, None, None, None, None, None, reason, None)
        return
    end = sys.maxsize if split.end is None else split.end
    at = split.start  # where fh is: the split reads the lines that start before its end
    with fh:
        try:
            if split.start == 0:
                if fh.peek(len(_BOM))[: len(_BOM)] == _BOM:
                    nbytes += len(fh.read(len(_BOM)))
                    at += len(_BOM)
            elif fh.read(1) != b"\n":  # it starts within a line: the split before reads that one
                skipped = _rest_of_line(fh)
                at += len(skipped)
                line += skipped.endswith(b"\n")
            while at < end:
                raw = fh.readline(limit)
                if not raw:
                    break
                line += 1
                nbytes += len(raw)
                at += len(raw)
                try:
                    if len(raw) >= limit:
                        raise RecordError(f"line longer than {MAX_LINE_BYTES} bytes")
                    code, scn, sub, xid, payload = decode_line(raw)
                    if first is None:
                        first = (line, code, scn, sub)
                    else:
                        check_order(code, scn, sub, last_scn, last_sub)
                    if payload is None:  # lwn, close: the next record lies above scn
                        last_scn, last_sub = scn, AFTER_MARKER
                        progress, closed = max(progress, scn), code != LWN
                        continue
                    encoded = encode_record(record(code, scn, sub, seq, line, payload))
                    xid.encode()  # type: ignore[union-attr]  # (a record's xid is a string)
                except RecordError as exc:
                    if len(raw) >= limit:
                        rest = _rest_of_line(fh)
                        nbytes += len(rest)
                        at += len(rest)
                        raw += rest
                    yield (_ERROR, thread, seq, part, line, None, None, None, None, None, None, None, str(exc), raw)
                    if not quarantine:
                        return
                    continue
                except UnicodeEncodeError as exc:  # a lone surrogate: refused as the block builder refuses it
                    reason = (
                        "field 'xid' is not valid Unicode (lone surrogate)"
                        if exc.object == xid
                        else "a string is not valid Unicode (lone surrogate)"
                    )
                    yield (_ERROR, thread, seq, part, line, None, None, None, None, None, None, None, reason, raw)
                    if not quarantine:
                        return
                    continue
                last_scn, last_sub = scn, sub
                progress, closed = max(progress, scn - 1), False
                records += 1
                if code in ROW_CODES:
                    yield (_RECORD, thread, seq, part, line, code, scn, sub, xid, payload[4], None, encoded, None, None)
                elif code & COMPENSATION:
                    comps += 1
                    yield (_RECORD, thread, seq, part, line, code, scn, sub, xid, payload[0], None, None, None, None)
                else:
                    yield (_RECORD, thread, seq, part, line, code, scn, sub, xid, None, payload[0], None, None, None)
        except (OSError, CorruptCompressedFile) as exc:
            yield (_ERROR, thread, seq, part, line + 1, None, None, None, None, None, None, None, str(exc), None)
            return
    summary = {
        "first": first,
        "last": [last_scn, last_sub],
        "records": records,
        "comps": comps,
        "bytes": nbytes,
        "progress": progress,
        "closed": closed,
    }
    yield (_FILE, thread, seq, part, None, None, None, None, None, None, None, None, json.dumps(summary), None)


def _open(lf: LogFile, start: int = 0):
    """A log file's content (a plain one's from byte ``start``): a local file, or an object
    (``s3://BUCKET/PREFIX/NAME``)."""
    if not is_remote(lf.path):
        fh = lf.open()
        if start:
            fh.seek(start)
        return fh
    folder, _, name = lf.path.rpartition("/")
    obj = open_store(folder).open_input(name)
    if start:
        obj.seek(start)
    return read_stream(obj, lf.compressed)


def _rest_of_line(fh) -> bytes:
    out = []
    while True:
        chunk = fh.readline(1 << 20)
        out.append(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return b"".join(out)


# -- step 2: segments of an XID (XID reuse), on the executors ------------------------------


def _segment_starts(rows: Iterable[Any]) -> Iterator[tuple]:
    """Over begin and end records sorted by ``(xid, scn, sub, thread, seq, line)``: the
    begins that start a new transaction of their XID (above the first end's SCN of the
    one before), as ``(xid, thread, seq, line)``."""
    xid = None
    end_scn = None  # the first end's SCN of the XID's current transaction
    for r in rows:
        if r.xid != xid:
            xid, end_scn = r.xid, None
        if r.code == BEGIN:
            if end_scn is not None and r.scn > end_scn:
                end_scn = None
                yield (r.xid, r.thread, r.seq, r.line, 1)
        elif end_scn is None:
            end_scn = r.scn


# -- the driver ---------------------------------------------------------------------------------


def _aws_for(uri: str) -> dict[str, str]:
    """The driver's AWS variables, for the executors, if ``uri`` is on an object store."""
    return {k: v for k, v in os.environ.items() if k.startswith("AWS_")} if is_remote(uri) else {}


def _queue_id(queue_dir: str) -> str:
    """The Spark replay's queue id, kept in ``queue_dir`` (made on the first run)."""
    path = os.path.join(queue_dir, QUEUE_ID_FILE)
    try:
        with open(path) as fh:
            return json.load(fh)["queue_id"]
    except FileNotFoundError:
        pass
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SparkReplayError(f"{path}: cannot read the Spark replay's queue id: {exc}") from None
    if os.path.isdir(queue_dir) and os.listdir(queue_dir):
        raise SparkReplayError(
            f"{queue_dir}: the queue directory holds another queue",
            hint="give the Spark replay its own queue directory (an empty or new one)",
        )
    os.makedirs(queue_dir, exist_ok=True)
    queue_id = uuid.uuid4().hex
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump({"queue_id": queue_id, "engine": "spark"}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return queue_id


def _scan(input_dir: str) -> tuple[dict[int, dict[int, LogFile]], dict[str, int]]:
    """The log files of a directory, or of an object-store prefix, by thread and sequence;
    the sizes of the plain ones, by path."""
    if not is_remote(input_dir):
        found = scan(input_dir)
        plain = (lf for seqs in found.values() for lf in seqs.values() if not lf.compressed)
        return found, {lf.path: os.path.getsize(lf.path) for lf in plain}
    found = {}
    sizes = {}
    base = input_dir.rstrip("/")
    for obj in open_store(input_dir).list(""):
        parsed = parse_name(obj.name)
        if parsed is not None:
            thread, seq, compressed = parsed
            path = f"{base}/{obj.name}"
            if seq in found.setdefault(thread, {}):
                raise InputError(path, None, f"thread {thread} sequence {seq} is also in another file")
            found[thread][seq] = LogFile(thread, seq, path, compressed)
            sizes[path] = obj.size
    return found, sizes


def _log_files(input_dir: str) -> tuple[list[LogFile], dict[int, list[LogFile]], dict[str, int]]:
    found, sizes = _scan(input_dir)
    if not found:
        raise InputError(input_dir, None, "no redo log files; expected names like redo_<thread>_<sequence>.jsonl")
    per_thread = {t: check_contiguous(input_dir, t, seqs) for t, seqs in sorted(found.items())}
    return [f for t in per_thread for f in per_thread[t]], per_thread, sizes


def _splits(lf: LogFile, sizes: dict[str, int], split_bytes: int) -> list[_Split]:
    """A plain file larger than ``split_bytes``: its splits, about that size each, their
    ``newlines_before`` not yet known (0); otherwise one split, the whole file."""
    size = 0 if lf.compressed else sizes.get(lf.path, 0)
    if size <= split_bytes:
        return [_Split()]
    n = -(-size // split_bytes)
    bounds = [size * k // n for k in range(n + 1)]
    return [_Split(k, bounds[k], bounds[k + 1]) for k in range(n)]


def _count_before(spark, tasks: list[tuple], stage: Callable[[str], None]) -> list[tuple]:
    """The read tasks with each split's ``newlines_before``, counted by a first job (one
    task per split of the files cut in splits; a file read whole starts at line 1)."""
    cut = [(t, seq, path, aws, split) for t, seq, path, _, _, aws, split in tasks if split.end is not None]
    if not cut:
        return tasks
    stage(f"count the lines of {len(cut)} split(s) of {len({(c[0], c[1]) for c in cut})} large file(s)")
    counts = spark.sparkContext.parallelize(cut, len(cut)).map(_count_newlines).collect()
    paths = {(t, seq): path for t, seq, path, _, _ in cut}
    for t, seq, _, _, why in counts:
        if why is not None:
            raise InputError(paths[(t, seq)], None, why)
    per_part = {(t, seq, part): n for t, seq, part, n, _ in counts}
    out = []
    for t, seq, path, compressed, quarantine, aws, split in tasks:
        before = sum(per_part[(t, seq, k)] for k in range(split.part))
        out.append((t, seq, path, compressed, quarantine, aws, replace(split, newlines_before=before)))
    return out


def _in_order(per_thread: dict[int, list[LogFile]], parts: dict[tuple[int, int], int]):
    """Per thread, its files and their splits in order: ``(thread, [(file, part), ...])``."""
    for thread, files in per_thread.items():
        yield thread, [(lf, part) for lf in files for part in range(parts[(thread, lf.sequence)])]


def _first_bad_order(
    per_thread: dict[int, list[LogFile]], parts: dict[tuple[int, int], int], summaries: dict[tuple[int, int, int], dict]
) -> list[tuple]:
    """The first line of each file (or split) that may not follow the one before it in
    its thread: ``(thread, seq, part, line, reason, path)``."""
    bad = []
    for thread, pieces in _in_order(per_thread, parts):
        last = (-1, -1)
        for lf, part in pieces:
            s = summaries.get((thread, lf.sequence, part))
            if s is None:
                break  # the file stopped at an error: reported as such
            if s["first"] is not None:
                line, code, scn, sub = s["first"]
                try:
                    check_order(code, scn, sub, *last)
                except RecordError as exc:
                    bad.append((thread, lf.sequence, part, line, str(exc), lf.path))
                last = tuple(s["last"])
    return bad


@needs_pyspark
def _watermark(
    per_thread: dict[int, list[LogFile]], parts: dict[tuple[int, int], int], summaries: dict[tuple[int, int, int], dict]
) -> int:
    """``min P(t)`` over the threads at the end of their files; a thread closed there
    does not hold it."""
    w = INFINITE_SCN
    for thread, pieces in _in_order(per_thread, parts):
        progress, closed = -1, False
        for lf, part in pieces:
            s = summaries[(thread, lf.sequence, part)]
            if s["first"] is not None:
                progress, closed = max(progress, s["progress"]), s["closed"]
        if not closed:
            w = min(w, progress)
    return w


def replay_on_spark(
    spark: Any,
    input_dir: str,
    queue_dir: str,
    changefeed: str,
    *,
    file_rows: int | None = None,
    table_format: str | None = None,
    dead_letter: str | None = None,
    durable: bool = True,
    until_watermark: bool = False,
    changefeed_mode: int | None = None,
    iceberg_catalog: str | None = None,
    iceberg_table: str | None = None,
    adopt_changefeed: bool = False,
    split_bytes: int = SPLIT_BYTES,
    staging: str | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> SparkReplaySummary:
    """Replay the redo log files of ``input_dir`` into ``changefeed`` with the Spark
    session ``spark``: the changefeed that ``olr-buffer replay`` writes (same rows,
    ``tx_seq`` and ``op_seq``; files may be cut differently). ``queue_dir`` keeps the
    replay's queue id (the changefeed's owner): run again with the same one after a
    failure or a kill, it publishes what is missing and nothing twice. ``on_stage`` is
    called with each step's name (also the Spark job descriptions).

    ``until_watermark``: the files are not the whole input (``run`` goes on from them):
    publish only the commits at or below the watermark at their end (``min P(t)`` over
    the threads, a thread closed at its end aside), and leave the rest, with every
    transaction still open, to ``run --adopt-changefeed`` on the same changefeed.

    ``file_rows``, ``table_format``, ``dead_letter``, ``durable``, ``changefeed_mode``,
    ``iceberg_catalog``, ``iceberg_table`` and ``adopt_changefeed`` are ``replay``'s
    options of those names (``durable=False``: ``--no-sync``). A plain log file larger than
    ``split_bytes`` is read by one task per split of about that size. ``staging``: where
    the executors leave the sorted rows for the driver to publish (a directory or
    ``s3://BUCKET/PREFIX`` that every executor and the driver reach; default: the
    folder ``staging`` of ``queue_dir``, which does on a local master)."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql.window import Window

    started = time.monotonic()
    sc = spark.sparkContext
    summary = SparkReplaySummary()

    def stage(name: str) -> None:
        sc.setJobDescription(f"olr-buffer replay: {name}")
        if on_stage is not None:
            on_stage(name)

    files, per_thread, sizes = _log_files(input_dir)
    summary.threads = sorted(per_thread)
    summary.files_read = len(files)
    queue_id = _queue_id(queue_dir)

    # -- 1. read ---------------------------------------------------------------------------
    quarantine = dead_letter is not None
    # executors read an object-store input with the driver's credentials and endpoint
    aws = _aws_for(input_dir)
    tasks = [
        (
            f.thread,
            f.sequence,
            f.path if aws or is_remote(f.path) else os.path.abspath(f.path),
            f.compressed,
            quarantine,
            aws,
            split,
        )
        for f in files
        for split in _splits(f, sizes, split_bytes)
    ]
    parts = {(f.thread, f.sequence): 0 for f in files}
    for t, seq, *_ in tasks:
        parts[(t, seq)] += 1
    tasks = _count_before(spark, tasks, stage)
    cut = f" in {len(tasks)} split(s)" if len(tasks) > len(files) else ""
    stage(f"read {len(files)} log file(s){cut}")
    task_rows = [
        (t, seq, path, compressed, quarantine, json.dumps(aws), sp.part, sp.start, sp.end, sp.newlines_before)
        for t, seq, path, compressed, quarantine, aws, sp in tasks
    ]
    parsed = (
        spark.createDataFrame(sc.parallelize(task_rows, max(1, len(task_rows))), _TASK_SCHEMA)
        .mapInArrow(_read_arrow, _PARSED_SCHEMA)
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        meta = parsed.filter(F.col("kind") != _RECORD).select("kind", "thread", "seq", "part", "line", "msg", "raw")
        meta_rows = meta.collect()
        summaries = {(r.thread, r.seq, r.part): json.loads(r.msg) for r in meta_rows if r.kind == _FILE}
        paths = {(f.thread, f.sequence): f.path for f in files}
        errors = [
            (r.thread, r.seq, r.part, r.line, r.msg, paths[(r.thread, r.seq)], r.raw)
            for r in meta_rows
            if r.kind == _ERROR
        ]
        errors += [(*bad, None) for bad in _first_bad_order(per_thread, parts, summaries)]
        errors.sort(key=lambda e: (e[0], e[1], e[2], e[3] if e[3] is not None else -1))
        # the first bad line stops the job; with a dead-letter file, only what cannot be
        # set aside does (a file that cannot be read, a line out of order across files)
        stop = errors[:1] if dead_letter is None else [e for e in errors if e[6] is None][:1]
        if stop:
            _, _, _, line, why, path, _ = stop[0]
            raise InputError(path, line, why)
        records = parsed.filter(F.col("kind") == _RECORD).drop("kind", "part", "msg", "raw")
        if errors:
            assert dead_letter is not None
            letters = DeadLetters(dead_letter)
            try:
                for _, _, _, line, why, path, raw in errors:
                    letters.put(path, line, why, raw)
            finally:
                letters.close()
            summary.quarantined = len(errors)
        summary.records_read = sum(s["records"] for s in summaries.values())
        if until_watermark:
            summary.watermark = _watermark(per_thread, parts, summaries)
        compensations = sum(s["comps"] for s in summaries.values())

        writer = ChangefeedWriter(
            changefeed,
            durable=durable,
            table_format=table_format,
            lease_owner=queue_id,
            file_rows=DEFAULT_FILE_ROWS if file_rows is None else file_rows,
            mode=DEFAULT_MODE if changefeed_mode is None else changefeed_mode,
            iceberg=IcebergSettings(iceberg_catalog, iceberg_table) if iceberg_catalog or iceberg_table else None,
        )
        try:
            writer.open(ChangefeedOwner(queue_id), None, queue=queue_dir, adopt=adopt_changefeed)
            files_before = writer.figures().files_published
            # per thread, the last file holding a record of a transaction
            reached = {t: seq for (t, seq, _), doc in sorted(summaries.items()) if doc["records"]}
            staged = _Staging(
                staging or os.path.join(os.path.abspath(queue_dir), "staging"),
                queue_id,
                uuid.uuid4().hex,
                _aws_for(staging or ""),
            )
            staged.clear()  # what a killed run left
            try:
                _assemble_and_publish(spark, F, Window, records, writer, compensations, reached, summary, stage, staged)
            finally:
                staged.clear()
            summary.watermark = None if summary.watermark == INFINITE_SCN else summary.watermark
            writer.close()
            summary.next_tx_seq = writer.next_tx_seq
            summary.changefeed_files = writer.figures().files_published
            summary.files_published = summary.changefeed_files - files_before
        except BaseException:
            writer.release()
            raise
    finally:
        parsed.unpersist()
        sc.setJobDescription(None)
    summary.seconds = time.monotonic() - started
    return summary


def _assemble_and_publish(
    spark, F, Window, records, writer, compensations: int, reached: dict[int, int], summary, stage, staging: _Staging
) -> None:
    cached: list[Any] = []  # unpersisted however this ends: a failed job leaves nothing in the session's cache
    try:
        _assemble_and_publish_cached(
            spark, F, Window, records, writer, compensations, reached, summary, stage, staging, cached
        )
    finally:
        for df in cached:
            df.unpersist()


def _assemble_and_publish_cached(
    spark,
    F,
    Window,
    records,
    writer,
    compensations: int,
    reached: dict[int, int],
    summary,
    stage,
    staging: _Staging,
    cached: list,
) -> None:
    key = ["scn", "sub", "thread", "seq", "line"]

    # -- 2. segments (XID reuse) -----------------------------------------------------------
    stage("find the transactions of each XID")
    ctl = records.filter(F.col("code").isin(BEGIN, COMMIT, ROLLBACK)).select("xid", "code", *key)
    starts_rdd = ctl.repartition("xid").sortWithinPartitions("xid", *key).rdd.mapPartitions(_segment_starts)
    starts = spark.createDataFrame(starts_rdd, "xid string, thread int, seq long, line long, start int")
    starts = starts.persist()
    cached.append(starts)
    if starts.take(1):
        per_xid = Window.partitionBy("xid").orderBy(*key).rowsBetween(Window.unboundedPreceding, Window.currentRow)
        recs = records.join(F.broadcast(starts), ["xid", "thread", "seq", "line"], "left").withColumn(
            "seg", F.sum(F.coalesce("start", F.lit(0))).over(per_xid)
        )
        recs = recs.drop("start")
    else:
        recs = records.withColumn("seg", F.lit(0).cast("long"))

    # -- 3. transactions ---------------------------------------------------------------------
    stage("transactions: ends, begins, commit order")
    is_end = F.col("code").isin(COMMIT, ROLLBACK)
    end = F.struct(
        F.col("scn").alias("scn"),
        F.col("thread").alias("thread"),
        F.col("seq").alias("seq"),
        F.col("line").alias("line"),
        F.col("code").alias("code"),
        F.col("tm").alias("tm"),
    )
    txns = recs.groupBy("xid", "seg").agg(
        F.min(F.when(is_end, end)).alias("e"),
        F.sum(F.when(is_end, 1).otherwise(0)).alias("n_ends"),
        F.min(F.when(F.col("code") == BEGIN, F.col("scn"))).alias("begin_scn"),
    )
    txns = txns.select(
        "xid",
        "seg",
        "n_ends",
        "begin_scn",
        F.col("e.scn").alias("c_scn"),
        F.col("e.thread").alias("c_thread"),
        F.col("e.seq").alias("c_seq"),
        F.col("e.line").alias("c_line"),
        F.col("e.code").alias("c_code"),
        F.col("e.tm").alias("c_tm"),
    )
    last = writer.last_commit
    above_last = (
        F.lit(True)
        if last is None
        else F.struct("c_scn", "c_thread", "c_seq", "c_line")
        > F.struct(
            F.lit(last.scn).cast("long").alias("c_scn"),
            F.lit(last.thread).cast("int").alias("c_thread"),
            F.lit(last.sequence).cast("long").alias("c_seq"),
            F.lit(last.line).cast("long").alias("c_line"),
        )
    )
    committed = (F.col("c_code") == COMMIT) & F.col("begin_scn").isNotNull() & (F.col("begin_scn") <= F.col("c_scn"))
    # (without until_watermark: above every SCN, the files are the whole input)
    watermark = summary.watermark if summary.watermark is not None else INFINITE_SCN - 1
    txns = txns.withColumn(
        "state",
        F.when(F.col("c_code").isNull(), "open")
        .when(F.col("c_scn") > F.lit(watermark).cast("long"), "held")
        .when(F.col("c_code") == ROLLBACK, "rolled_back")
        .when(~above_last, "already_published")
        .when(~committed, "no_begin")
        .otherwise("publish"),
    ).persist()
    cached.append(txns)
    extra = F.sum(F.greatest(F.col("n_ends") - 1, F.lit(0))).alias("extra")
    by_state = txns.groupBy("state").agg(F.count("*").alias("n"), extra).collect()
    counts = {r.state: (r.n, r.extra) for r in by_state}
    summary.open_transactions = counts.get("open", (0, 0))[0]
    summary.held_for_run = counts.get("held", (0, 0))[0]
    # run_from: per thread, where a new queue reads again (recorded in the manifest with
    # the last publication, as the one-process replay records it): the first file holding
    # a record of a transaction left for run, else the last file holding a record of any
    summary.run_from = dict(reached)
    if summary.open_transactions or summary.held_for_run:
        left = txns.filter(F.col("state").isin("open", "held")).select("xid", "seg")
        firsts = recs.join(left, ["xid", "seg"]).groupBy("thread").agg(F.min("seq").alias("seq")).collect()
        summary.run_from.update({r.thread: r.seq for r in firsts})
    summary.rolled_back = counts.get("rolled_back", (0, 0))[0]
    summary.no_begin = counts.get("no_begin", (0, 0))[0]
    summary.already_published = counts.get("already_published", (0, 0))[0]
    summary.extra_end_records = sum(extra or 0 for _, extra in counts.values())

    # -- 4. rows -----------------------------------------------------------------------------
    stage("rows: late records, compensation, op_seq")
    commit_cols = ["c_scn", "c_thread", "c_seq", "c_line", "c_tm"]
    publish = txns.filter(F.col("state") == "publish").select("xid", "seg", *commit_cols)
    is_comp = (F.col("code").bitwiseAND(COMPENSATION)) != 0
    rows = recs.filter(F.col("code").isin(*_ROW_CODES) | is_comp).join(publish, ["xid", "seg"])
    rows = rows.withColumn("late", F.col("scn") > F.col("c_scn"))
    late = rows.filter("late").count()
    summary.late_records = late
    rows = rows.filter(~F.col("late")).drop("late")
    if compensations:
        rows = rows.withColumn("comp", is_comp)
        per_rid = Window.partitionBy("xid", "seg", "rid").orderBy(*key)
        upto = per_rid.rowsBetween(Window.unboundedPreceding, Window.currentRow)
        before = per_rid.rowsBetween(Window.unboundedPreceding, -1)
        rows = rows.withColumn("s", F.sum(F.when(F.col("comp"), -1).otherwise(1)).over(upto))
        rows = rows.withColumn("low", F.least(F.lit(0), F.min("s").over(upto)))
        rows = rows.withColumn("low_before", F.least(F.lit(0), F.coalesce(F.min("s").over(before), F.lit(0))))
        # a compensation that finds nothing to cancel: the floored sum was at 0 before it
        rows = rows.withColumn("unmatched", F.col("comp") & (F.col("s") < F.col("low_before"))).persist()
        cached.append(rows)
        comp_counts = (
            rows.filter("comp")
            .groupBy()
            .agg(F.count("*").alias("n"), F.sum(F.col("unmatched").cast("long")).alias("unmatched"))
            .collect()[0]
        )
        summary.compensations = comp_counts.n or 0
        summary.unmatched_compensations = comp_counts.unmatched or 0
        rows = rows.filter(~F.col("unmatched"))
        level = F.col("s") - F.col("low") + F.when(F.col("comp"), 1).otherwise(0)
        rows = rows.withColumn("level", level)
        per_level = Window.partitionBy("xid", "seg", "rid", "level").orderBy(*key)
        cancelled = F.coalesce(F.lead("comp").over(per_level), F.lit(False))
        rows = rows.withColumn("cancelled", cancelled).filter(~F.col("comp") & ~F.col("cancelled"))
    rows = rows.select("xid", "seg", "thread", "rec", "c_scn", "c_thread", "c_seq", "c_line", "c_tm", *key)
    per_tx = Window.partitionBy("xid", "seg").orderBy(*key)
    rows = rows.withColumn("op_seq", F.row_number().over(per_tx) - 1).persist()
    cached.append(rows)

    # -- tx_seq: by commit key, from the changefeed's next ---------------------------------
    sizes = rows.groupBy("xid", "seg").agg(F.count("*").alias("n_rows"))
    kept = publish.join(sizes, ["xid", "seg"], "left").persist()
    cached.append(kept)
    summary.empty = kept.filter(F.col("n_rows").isNull()).count()
    ordered = kept.filter(F.col("n_rows").isNotNull()).orderBy("c_scn", "c_thread", "c_seq", "c_line")
    first = writer.next_tx_seq
    numbered = spark.createDataFrame(
        ordered.select("xid", "seg", "n_rows").rdd.zipWithIndex().map(lambda p: (*p[0], p[1] + first)),
        "xid string, seg long, n_rows long, tx_seq long",
    )
    commit_key = F.struct("c_scn", "c_thread", "c_seq", "c_line")
    totals = (
        kept.filter(F.col("n_rows").isNotNull())
        .groupBy()
        .agg(F.count("*").alias("n"), F.sum("n_rows").alias("rows"), F.max(commit_key).alias("through"))
        .collect()[0]
    )
    n_tx, n_rows = totals.n or 0, totals.rows or 0
    if n_tx:  # run_from goes into the manifest with the publication of the last commit, not before
        writer.note_run_from(summary.run_from, CommitKey(*totals.through))

    # -- 5. publish ----------------------------------------------------------------------------
    if n_tx:
        stage(f"sort and stage {n_tx:,} transactions ({n_rows:,} rows)")
        out = rows.join(numbered.select("xid", "seg", "tx_seq"), ["xid", "seg"]).select(
            "tx_seq", "op_seq", "xid", "thread", "rec", "c_scn", "c_thread", "c_seq", "c_line", "c_tm"
        )
        parts = max(1, -(-n_rows // PARTITION_ROWS))
        out = out.repartitionByRange(parts, "tx_seq", "op_seq").sortWithinPartitions("tx_seq", "op_seq")
        staged = _stage(out, staging, n_rows)
        stage(f"publish {n_tx:,} transactions ({n_rows:,} rows) from tx_seq {first}: {len(staged)} staged part(s)")
        _write(_staged_rows(staging, staged), writer)
    summary.transactions_published, summary.rows_published = n_tx, n_rows


# -- step 5: the sorted rows, staged by the executors, read back in order by the driver ------------


@dataclass(frozen=True)
class _Staging:
    """Where the executors leave the sorted rows: a directory or ``s3://`` prefix every
    executor and the driver reach (``uri``), under ``olr-buffer-<queue id>/<run>/``, so
    that nothing else there is ever touched (nor another queue's job sharing it);
    ``aws``: the driver's object-store settings, for the executors."""

    uri: str
    queue_id: str
    run: str
    aws: dict[str, str]

    @property
    def queue_prefix(self) -> str:
        """The queue's folder, relative to ``uri``: every run's of this queue."""
        return f"olr-buffer-{self.queue_id}"

    @property
    def prefix(self) -> str:
        """This run's folder, relative to ``uri``."""
        return f"{self.queue_prefix}/{self.run}"

    def filesystem(self, prefix: str | None = None) -> tuple[Any, str]:
        """The store's Arrow file system and the path of ``prefix`` (default: this run's folder)."""
        os.environ.update(self.aws)
        fs, root = open_store(self.uri).arrow_filesystem()
        return fs, f"{root.rstrip('/')}/{self.prefix if prefix is None else prefix}"

    def clear(self) -> None:
        """Remove the queue's folder: at the start, what a killed run left; at the end, this
        run's parts (the writer's lease is held: no other run of the queue is going on).
        What cannot be removed is left: it is never read again."""
        fs, folder = self.filesystem(self.queue_prefix)
        try:
            fs.delete_dir(folder)
        except (OSError, FileNotFoundError):
            pass


_STAGED_SCHEMA = "name string, rows long, first_tx long, first_op long, last_tx long, last_op long"


def _stage(out, staging: _Staging, n_rows: int) -> list[Any]:
    """Each partition of the sorted rows written by its task as one Parquet file of the
    staging folder; the files (the successful task attempts' only), in order, checked to
    hold every row once."""
    staged = sorted(out.mapInArrow(_stager(staging), _STAGED_SCHEMA).collect(), key=lambda f: (f.first_tx, f.first_op))
    at, count = None, 0
    for f in staged:
        if at is not None and (f.first_tx, f.first_op) <= at:
            raise SparkReplayError(f"staged part {f.name} overlaps the one before it: this is a bug")
        at, count = (f.last_tx, f.last_op), count + f.rows
    if count != n_rows:
        raise SparkReplayError(f"the staged parts hold {count} rows, not {n_rows}: this is a bug")
    import pyarrow.fs as pafs

    fs, folder = staging.filesystem()
    missing = [f.name for f in staged if fs.get_file_info(f"{folder}/{f.name}").type == pafs.FileType.NotFound]
    if missing:  # written where the driver does not look: the executors' own disks
        raise SparkReplayError(
            f"{staging.uri}: {len(missing)} of the {len(staged)} part(s) the executors staged are not there for "
            f"the driver (first: {staging.prefix}/{missing[0]})",
            hint="give --spark-staging (staging=) a directory that every executor and the driver reach, "
            "or s3://BUCKET/PREFIX",
        )
    return staged


def _stager(staging: _Staging) -> Callable[[Iterable[Any]], Iterator[Any]]:
    def write(batches: Iterable[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None  # (in a task)
        name = f"part-{ctx.partitionId():05d}-{ctx.taskAttemptId()}.parquet"
        fs, folder = staging.filesystem()
        out = None
        rows, first, last = 0, None, None
        try:
            for b in batches:
                if not b.num_rows:
                    continue
                if out is None:
                    fs.create_dir(folder, recursive=True)
                    out = pq.ParquetWriter(f"{folder}/{name}", b.schema, filesystem=fs, compression="lz4")
                    first = (b.column("tx_seq")[0].as_py(), b.column("op_seq")[0].as_py())
                out.write_batch(b)
                rows += b.num_rows
                last = (b.column("tx_seq")[-1].as_py(), b.column("op_seq")[-1].as_py())
        finally:
            if out is not None:
                out.close()
        if out is not None:
            assert first is not None and last is not None
            yield pa.RecordBatch.from_pylist(
                [
                    {
                        "name": name,
                        "rows": rows,
                        "first_tx": first[0],
                        "first_op": first[1],
                        "last_tx": last[0],
                        "last_op": last[1],
                    }
                ],
                schema=_arrow_schema(_STAGED_SCHEMA),
            )

    return write


_Row = collections.namedtuple("_Row", "tx_seq op_seq xid thread rec c_scn c_thread c_seq c_line c_tm")


def _staged_rows(staging: _Staging, staged: list[Any]) -> Iterator[_Row]:
    """The staged rows in ``(tx_seq, op_seq)`` order, a batch of a file at a time."""
    import pyarrow.parquet as pq

    fs, folder = staging.filesystem()
    for f in staged:
        with fs.open_input_file(f"{folder}/{f.name}") as fh:
            for b in pq.ParquetFile(fh).iter_batches(batch_size=CHUNK_ROWS, columns=list(_Row._fields)):
                yield from map(_Row._make, zip(*(b.column(c).to_pylist() for c in _Row._fields)))


def _write(rows: Iterator[Any], writer: ChangefeedWriter) -> None:
    """Hand the sorted rows to ``writer``: small transactions together, a large one in
    chunks as it comes."""
    batch: list[list] = []
    txs: list[tuple] = []
    for tx_seq, group in itertools.groupby(rows, key=lambda r: r.tx_seq):
        expected = writer.next_tx_seq + len(txs)
        if tx_seq != expected:
            raise SparkReplayError(f"transaction tx_seq {tx_seq} would be published as {expected}: this is a bug")
        members = iter(group)
        head = next(members)
        key = CommitKey(head.c_scn, head.c_thread, head.c_seq, head.c_line)
        firsts = [head, *itertools.islice(members, CHUNK_ROWS)]
        if len(firsts) <= CHUNK_ROWS:  # the whole transaction
            threads = [r.thread for r in firsts]
            batch += [decode_record(r.rec) for r in firsts]
            txs.append((head.xid, key, head.c_tm, threads[0] if len(set(threads)) == 1 else threads, len(firsts)))
            if len(batch) >= _BATCH_RECORDS:
                writer.write_rows(batch, txs)
                batch, txs = [], []
            continue
        if txs:
            writer.write_rows(batch, txs)
            batch, txs = [], []
        rest = itertools.chain(firsts, members)
        writer.write_transaction(Commit(head.xid, key, head.c_tm), _chunks(rest))
    if txs:
        writer.write_rows(batch, txs)


def _chunks(rows: Iterable[Any]) -> Iterator[tuple[int, list[list]]]:
    """``(thread, records)``: runs of rows of one thread, at most :data:`CHUNK_ROWS` each."""
    run: list[list] = []
    run_thread = None
    for r in rows:
        if r.thread != run_thread or len(run) >= CHUNK_ROWS:
            if run:
                yield run_thread, run  # type: ignore[misc]
            run, run_thread = [], r.thread
        run.append(decode_record(r.rec))
    if run:
        yield run_thread, run  # type: ignore[misc]
