"""``replay`` on a Spark cluster: the same changefeed as the one-process replay, assembled
as DataFrame work (docs/spark.md, "Replay on Spark").

The steps, each a Spark job (named in the Spark UI's job descriptions):

1. **Read**: one task per log file (``.zst`` too) reads and checks its lines with the
   redo source's own functions (:func:`~olr_buffer.sources.redo.decode_line`,
   :func:`~olr_buffer.sources.redo.check_order`), so that the records and the errors are
   the same as ``replay``'s. A task cannot see the thread's previous file: it reports its
   first line and its last ``(scn, sub)``, and the driver checks each thread's files
   against each other. A bad line stops the job with ``FILE:LINE: reason`` before
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
   at most :data:`PARTITION_ROWS` rows, reach the driver one partition at a time
   (``toLocalIterator``), which hands them to the changefeed's own writer
   (:class:`~olr_buffer.sinks.parquet.ChangefeedWriter`): the same files, schema
   documents, manifest and Delta commits as ``replay``'s, local or on S3. A transaction
   larger than a partition streams through in chunks.

Exactly once: everything above is a function of the input, so a rerun computes the same
transactions with the same ``tx_seq``; the writer's recovery on open keeps what was
published whole (and commits to the Delta table a file published but not committed), and
the rerun publishes only the commits above the changefeed's last.
"""

from __future__ import annotations

import itertools
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
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
from ..errors import OlrBufferError
from ..sinks.parquet import DEFAULT_FILE_ROWS, ChangefeedOwner, ChangefeedWriter
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
#: At most this many rows reach the driver at once (a partition of the sorted result).
PARTITION_ROWS = 50_000
#: Rows of a transaction handed to the writer at once; a transaction of more rows streams.
CHUNK_ROWS = 4096
_BATCH_RECORDS = 1000  # small transactions are written together, about this many rows at a time

_RECORD, _ERROR, _FILE = 0, 1, 2  # kinds of what a read task yields
_ROW_CODES = sorted(ROW_CODES)
_BOM = b"\xef\xbb\xbf"

_PARSED_SCHEMA = (
    "kind int, thread int, seq long, line long, code int, scn long, sub long, xid string, rid string, "
    "tm long, rec binary, msg string, raw binary"
)


class SparkReplayError(OlrBufferError):
    """The Spark replay cannot run as asked (its queue directory, a bug)."""


@dataclass
class SparkReplaySummary:
    """What a Spark replay did (the fields that ``replay``'s summary has, where they apply)."""

    threads: list[int] = field(default_factory=list)
    files_read: int = 0
    records_read: int = 0
    transactions_published: int = 0
    rows_published: int = 0
    rolled_back: int = 0
    no_begin: int = 0
    empty: int = 0
    already_published: int = 0
    compensations: int = 0
    unmatched_compensations: int = 0
    late_records: int = 0
    extra_end_records: int = 0
    open_transactions: int = 0
    held_for_run: int = 0  # ended above the watermark (until_watermark): left for run
    watermark: int | None = None  # until_watermark: the watermark at the end of the files
    # per thread, the first sequence that holds a record of a transaction left for run
    # (open, or ended above the watermark): run needs the files from there on
    run_from: dict[int, int] = field(default_factory=dict)
    next_tx_seq: int = 0
    files_published: int = 0
    changefeed_files: int = 0
    quarantined: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


# -- step 1: reading, on the executors --------------------------------------------------------


def _read_files(files: Iterable[tuple[int, int, str, bool, bool, dict]]) -> Iterator[tuple]:
    """A read task: every line of each file, checked as the redo reader checks them.
    The driver's AWS variables, if the input is on a store, go with each file."""
    for thread, seq, path, compressed, quarantine, aws in files:
        os.environ.update(aws)
        yield from _read_file(LogFile(thread, seq, path, compressed), quarantine)


def _read_file(lf: LogFile, quarantine: bool) -> Iterator[tuple]:
    """The records of one file as rows of :data:`_PARSED_SCHEMA`; a bad line as an error
    row (and, unless ``quarantine``, the end of the file); last, the file's summary: its
    first line taken and the thread's ``(scn, sub)`` after its last (the driver checks the
    files of a thread against each other)."""
    thread, seq = lf.thread, lf.sequence
    last_scn, last_sub = -1, -1
    first = None
    line = records = comps = nbytes = 0
    progress, closed = -1, False  # the thread's progress (every SCN up to it is written), closed by a close
    limit = MAX_LINE_BYTES + 1
    try:
        fh = _open(lf)
    except OSError as exc:
        reason = f"cannot open: {exc.strerror}"
        yield (_ERROR, thread, seq, None, None, None, None, None, None, None, None, reason, None)
        return
    with fh:
        try:
            if fh.peek(len(_BOM))[: len(_BOM)] == _BOM:
                nbytes += len(fh.read(len(_BOM)))
            while True:
                raw = fh.readline(limit)
                if not raw:
                    break
                line += 1
                nbytes += len(raw)
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
                        raw += _rest_of_line(fh)
                    yield (_ERROR, thread, seq, line, None, None, None, None, None, None, None, str(exc), raw)
                    if not quarantine:
                        return
                    continue
                except UnicodeEncodeError as exc:  # a lone surrogate: refused as the block builder refuses it
                    reason = (
                        "field 'xid' is not valid Unicode (lone surrogate)"
                        if exc.object == xid
                        else "a string is not valid Unicode (lone surrogate)"
                    )
                    yield (_ERROR, thread, seq, line, None, None, None, None, None, None, None, reason, raw)
                    if not quarantine:
                        return
                    continue
                last_scn, last_sub = scn, sub
                progress, closed = max(progress, scn - 1), False
                records += 1
                if code in ROW_CODES:
                    yield (_RECORD, thread, seq, line, code, scn, sub, xid, payload[4], None, encoded, None, None)
                elif code & COMPENSATION:
                    comps += 1
                    yield (_RECORD, thread, seq, line, code, scn, sub, xid, payload[0], None, None, None, None)
                else:
                    yield (_RECORD, thread, seq, line, code, scn, sub, xid, None, payload[0], None, None, None)
        except (OSError, CorruptCompressedFile) as exc:
            yield (_ERROR, thread, seq, line + 1, None, None, None, None, None, None, None, str(exc), None)
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
    yield (_FILE, thread, seq, None, None, None, None, None, None, None, None, json.dumps(summary), None)


def _open(lf: LogFile):
    """A log file's content: a local file, or an object (``s3://BUCKET/PREFIX/NAME``)."""
    if not is_remote(lf.path):
        return lf.open()
    folder, _, name = lf.path.rpartition("/")
    return read_stream(open_store(folder).open_input(name), lf.compressed)


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


def _scan(input_dir: str) -> dict[int, dict[int, LogFile]]:
    """The log files of a directory, or of an object-store prefix, by thread and sequence."""
    if not is_remote(input_dir):
        return scan(input_dir)
    found: dict[int, dict[int, LogFile]] = {}
    base = input_dir.rstrip("/")
    for obj in open_store(input_dir).list(""):
        parsed = parse_name(obj.name)
        if parsed is not None:
            thread, seq, compressed = parsed
            path = f"{base}/{obj.name}"
            if seq in found.setdefault(thread, {}):
                raise InputError(path, None, f"thread {thread} sequence {seq} is also in another file")
            found[thread][seq] = LogFile(thread, seq, path, compressed)
    return found


def _log_files(input_dir: str) -> tuple[list[LogFile], dict[int, list[LogFile]]]:
    found = _scan(input_dir)
    if not found:
        raise InputError(input_dir, None, "no redo log files; expected names like redo_<thread>_<sequence>.jsonl")
    per_thread = {t: check_contiguous(input_dir, t, seqs) for t, seqs in sorted(found.items())}
    return [f for t in per_thread for f in per_thread[t]], per_thread


def _first_bad_order(per_thread: dict[int, list[LogFile]], summaries: dict[tuple[int, int], dict]) -> list[tuple]:
    """The first line of each file that may not follow the thread's previous file:
    ``(thread, seq, line, reason, path)``."""
    bad = []
    for thread, files in per_thread.items():
        last = (-1, -1)
        for lf in files:
            s = summaries.get((thread, lf.sequence))
            if s is None:
                break  # the file stopped at an error: reported as such
            if s["first"] is not None:
                line, code, scn, sub = s["first"]
                try:
                    check_order(code, scn, sub, *last)
                except RecordError as exc:
                    bad.append((thread, lf.sequence, line, str(exc), lf.path))
                last = tuple(s["last"])
    return bad


@needs_pyspark
def _watermark(per_thread: dict[int, list[LogFile]], summaries: dict[tuple[int, int], dict]) -> int:
    """``min P(t)`` over the threads at the end of their files; a thread closed there
    does not hold it."""
    w = INFINITE_SCN
    for thread, files in per_thread.items():
        progress, closed = -1, False
        for lf in files:
            s = summaries[(thread, lf.sequence)]
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
    transaction still open, to ``run --adopt-changefeed`` on the same changefeed."""
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

    files, per_thread = _log_files(input_dir)
    summary.threads = sorted(per_thread)
    summary.files_read = len(files)
    queue_id = _queue_id(queue_dir)

    # -- 1. read ---------------------------------------------------------------------------
    stage(f"read {len(files)} log file(s)")
    quarantine = dead_letter is not None
    # executors read an object-store input with the driver's credentials and endpoint
    aws = {k: v for k, v in os.environ.items() if k.startswith("AWS_")} if is_remote(input_dir) else {}
    tasks = [
        (
            f.thread,
            f.sequence,
            f.path if aws or is_remote(f.path) else os.path.abspath(f.path),
            f.compressed,
            quarantine,
            aws,
        )
        for f in files
    ]
    parsed = spark.createDataFrame(
        sc.parallelize(tasks, max(1, len(tasks))).mapPartitions(_read_files), _PARSED_SCHEMA
    ).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        meta = parsed.filter(F.col("kind") != _RECORD).select("kind", "thread", "seq", "line", "msg", "raw").collect()
        summaries = {(r.thread, r.seq): json.loads(r.msg) for r in meta if r.kind == _FILE}
        paths = {(f.thread, f.sequence): f.path for f in files}
        errors = [(r.thread, r.seq, r.line, r.msg, paths[(r.thread, r.seq)], r.raw) for r in meta if r.kind == _ERROR]
        errors += [(t, s, line, why, path, None) for t, s, line, why, path in _first_bad_order(per_thread, summaries)]
        errors.sort(key=lambda e: (e[0], e[1], e[2] if e[2] is not None else -1))
        # the first bad line stops the job; with a dead-letter file, only what cannot be
        # set aside does (a file that cannot be read, a line out of order across files)
        stop = errors[:1] if dead_letter is None else [e for e in errors if e[5] is None][:1]
        if stop:
            _, _, line, why, path, _ = stop[0]
            raise InputError(path, line, why)
        records = parsed.filter(F.col("kind") == _RECORD).drop("kind", "msg", "raw")
        if errors:
            assert dead_letter is not None
            letters = DeadLetters(dead_letter)
            try:
                for _, _, line, why, path, raw in errors:
                    letters.put(path, line, why, raw)
            finally:
                letters.close()
            summary.quarantined = len(errors)
        summary.records_read = sum(s["records"] for s in summaries.values())
        if until_watermark:
            summary.watermark = _watermark(per_thread, summaries)
        compensations = sum(s["comps"] for s in summaries.values())

        writer = ChangefeedWriter(
            changefeed,
            durable=durable,
            table_format=table_format,
            lease_owner=queue_id,
            file_rows=DEFAULT_FILE_ROWS if file_rows is None else file_rows,
        )
        try:
            writer.open(ChangefeedOwner(queue_id), None, queue=queue_dir)
            files_before = writer.figures().files_published
            _assemble_and_publish(spark, F, Window, records, writer, compensations, summary, stage)
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


def _assemble_and_publish(spark, F, Window, records, writer, compensations: int, summary, stage) -> None:
    key = ["scn", "sub", "thread", "seq", "line"]

    # -- 2. segments (XID reuse) -----------------------------------------------------------
    stage("find the transactions of each XID")
    ctl = records.filter(F.col("code").isin(BEGIN, COMMIT, ROLLBACK)).select("xid", "code", *key)
    starts_rdd = ctl.repartition("xid").sortWithinPartitions("xid", *key).rdd.mapPartitions(_segment_starts)
    starts = spark.createDataFrame(starts_rdd, "xid string, thread int, seq long, line long, start int")
    starts = starts.persist()
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
    extra = F.sum(F.greatest(F.col("n_ends") - 1, F.lit(0))).alias("extra")
    by_state = txns.groupBy("state").agg(F.count("*").alias("n"), extra).collect()
    counts = {r.state: (r.n, r.extra) for r in by_state}
    summary.open_transactions = counts.get("open", (0, 0))[0]
    summary.held_for_run = counts.get("held", (0, 0))[0]
    if summary.open_transactions or summary.held_for_run:
        left = txns.filter(F.col("state").isin("open", "held")).select("xid", "seg")
        firsts = recs.join(left, ["xid", "seg"]).groupBy("thread").agg(F.min("seq").alias("seq")).collect()
        summary.run_from = {r.thread: r.seq for r in firsts}
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

    # -- tx_seq: by commit key, from the changefeed's next ---------------------------------
    sizes = rows.groupBy("xid", "seg").agg(F.count("*").alias("n_rows"))
    kept = publish.join(sizes, ["xid", "seg"], "left").persist()
    summary.empty = kept.filter(F.col("n_rows").isNull()).count()
    ordered = kept.filter(F.col("n_rows").isNotNull()).orderBy("c_scn", "c_thread", "c_seq", "c_line")
    first = writer.next_tx_seq
    numbered = spark.createDataFrame(
        ordered.select("xid", "seg", "n_rows").rdd.zipWithIndex().map(lambda p: (*p[0], p[1] + first)),
        "xid string, seg long, n_rows long, tx_seq long",
    )
    totals = numbered.groupBy().agg(F.count("*").alias("n"), F.sum("n_rows").alias("rows")).collect()[0]
    n_tx, n_rows = totals.n or 0, totals.rows or 0

    # -- 5. publish ----------------------------------------------------------------------------
    stage(f"publish {n_tx:,} transactions ({n_rows:,} rows) from tx_seq {first}")
    if n_tx:
        out = rows.join(numbered.select("xid", "seg", "tx_seq"), ["xid", "seg"]).select(
            "tx_seq", "op_seq", "xid", "thread", "rec", "c_scn", "c_thread", "c_seq", "c_line", "c_tm"
        )
        parts = max(1, -(-n_rows // PARTITION_ROWS))
        out = out.repartitionByRange(parts, "tx_seq", "op_seq").sortWithinPartitions("tx_seq", "op_seq")
        _write(out.toLocalIterator(), writer)
    summary.transactions_published, summary.rows_published = n_tx, n_rows
    for df in (rows, kept, txns, starts):
        df.unpersist()


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
