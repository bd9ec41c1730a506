"""Writing the changefeed: whole transactions, atomic publication, recovery on open.

Publication of one file::

    1. rows go to ``.tmp-part-<first>-<pid>.parquet`` (hidden from Spark: leading dot)
    2. the footer gets the file's range and last commit key; close; fsync the file
    3. rename to ``part-<first>-<last>.parquet``; fsync the directory   <- visible, final
    4. record it in ``_olr_buffer/manifest.json`` (write temp, fsync, rename, fsync dir)

On open, temporary files are deleted, and published files that the manifest lacks are
checked (name, footer) and adopted: the files are the truth, the manifest an index.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterable

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..dispatcher.transaction import Commit, CommitKey
from ..faults import fault_point
from ..reader.records import CHANGEFEED_OP
from .errors import ChangefeedCorruptError, ChangefeedError
from .schema import (
    ARROW_SCHEMA, META_FIRST, META_LAST, META_LAST_COMMIT, META_ROWS, nanos_to_timestamp, parquet_writer,
    parse_part_name, part_name,
)

log = logging.getLogger(__name__)

_ROW_NUMBERS: list[pa.Array] = [pa.array([], pa.int64())]


def _row_numbers(n: int) -> pa.Array:
    """0, 1, ... n-1 as an Arrow array (a slice of a cached one)."""
    if len(_ROW_NUMBERS[0]) < n:
        _ROW_NUMBERS[0] = pa.array(range(max(n, 1 << 16)), pa.int64())
    return _ROW_NUMBERS[0].slice(0, n)


# changefeed op by record code (codes index this array)
_OP_NAMES = pa.array([CHANGEFEED_OP.get(code) for code in range(max(CHANGEFEED_OP) + 1)], pa.string())

META_DIR = "_olr_buffer"
MANIFEST = "manifest.json"
PUBLISHED_LOG = "published.jsonl"
DEFAULT_FILE_ROWS = 1_000_000
DEFAULT_ROW_GROUP_ROWS = 65_536


@dataclass(frozen=True, slots=True)
class PublishedFile:
    name: str
    first: int
    last: int
    rows: int
    last_commit: CommitKey


class ChangefeedWriter:
    """Appends whole transactions to the changefeed directory; see the module doc.

    ``file_rows``: a file is published once it holds at least this many rows (at a
    transaction boundary: a transaction is never split). ``flush()`` publishes what is
    buffered whatever its size.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        file_rows: int = DEFAULT_FILE_ROWS,
        row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
        durable: bool = True,
        compression: str = "zstd",
    ) -> None:
        self.path = os.fspath(path)
        self.file_rows = file_rows
        self.row_group_rows = row_group_rows
        self.durable = durable
        self.compression = compression
        self.meta_dir = os.path.join(self.path, META_DIR)
        try:
            os.makedirs(self.path, exist_ok=True)
            os.makedirs(self.meta_dir, mode=0o700, exist_ok=True)
        except OSError as exc:
            raise ChangefeedError(f"{self.path}: cannot create the changefeed directory: {exc.strerror}") from None
        self.next_tx_seq = 0
        self.last_commit: CommitKey | None = None
        self.last_c_scn: int | None = None
        self.files_published = 0
        self._recover()
        # the open file
        self._writer: pq.ParquetWriter | None = None
        self._tmp_path: str | None = None
        self._file_first = self.next_tx_seq
        self._file_rows = 0
        self._file_last_commit: CommitKey | None = None
        # buffered rows of the open file (not yet in a row group)
        self._recs: list[list] = []
        self._threads: list[int] = []
        self._tx: list[tuple[int, int, int, int | None, str, int]] = []  # tx_seq, n, c_scn, c_tm, xid, op_seq0
        self.buffered_since = 0.0  # monotonic time the open file got its first transaction
        self._file_c_tms: list[int | None] = []
        # commit-to-visible latency of recently published transactions, in seconds (from c_tm)
        self.latencies: deque[float] = deque(maxlen=10_000)
        self.transactions_published = 0
        self.rows_published = 0

    # -- recovery ----------------------------------------------------------------------

    def _recover(self) -> None:
        manifest = self._read_manifest()
        parts: list[tuple[int, int, str]] = []
        for name in os.listdir(self.path):
            if name.startswith(".tmp-"):
                log.info("deleting unpublished temporary file %s", name)
                os.unlink(os.path.join(self.path, name))
                continue
            rng = parse_part_name(name)
            if rng is not None:
                parts.append((rng[0], rng[1], name))
        parts.sort()
        expected = 0
        for first, last, name in parts:
            if first != expected or last < first:
                raise ChangefeedCorruptError(
                    f"{os.path.join(self.path, name)}: changefeed has a gap or overlap: expected a file starting at tx_seq {expected}",
                    hint="if an in-place compaction was interrupted, run `olr-buffer compact --in-place "
                    "--i-know-no-reader-is-running` again to finish it; otherwise files were removed or edited by hand",
                )
            expected = last + 1
        self.files_published = len(parts)
        self.next_tx_seq = expected
        if not parts:
            if manifest and manifest.get("next_tx_seq", 0) > 0:
                raise ChangefeedCorruptError(
                    f"{self.path}: the manifest records {manifest['next_tx_seq']} transactions but no file is there",
                    hint="the changefeed files were removed; start with an empty changefeed and queue",
                )
            return
        last_name = parts[-1][2]
        footer = self._footer(last_name)
        self.last_commit = footer.last_commit
        self.last_c_scn = footer.last_commit.scn
        if not manifest or manifest.get("next_tx_seq") != self.next_tx_seq:
            adopted = [p[2] for p in parts if p[0] >= (manifest or {}).get("next_tx_seq", 0)]
            logged = self._last_logged(len(adopted))  # a crash may come between log and manifest
            for name in adopted:
                f = self._footer(name)
                log.info("adopting published file %s missing from the manifest", name)
                if name not in logged:
                    self._log_published(f)
            self._write_manifest(last_name)

    def _footer(self, name: str) -> PublishedFile:
        return read_footer(self.path, name)

    def _read_manifest(self) -> dict | None:
        try:
            with open(os.path.join(self.meta_dir, MANIFEST), "rb") as fh:
                return orjson.loads(fh.read())
        except FileNotFoundError:
            return None
        except orjson.JSONDecodeError:
            log.warning("manifest unreadable, rebuilding it from the published files")
            return None

    def _write_manifest(self, last_file: str | None) -> None:
        doc = {
            "format": 1,
            "next_tx_seq": self.next_tx_seq,
            "files": self.files_published,
            "last_file": last_file,
            "last_commit": list(self.last_commit) if self.last_commit else None,
            "last_c_scn": self.last_c_scn,
            "updated": time.time(),
        }
        _atomic_write(os.path.join(self.meta_dir, MANIFEST), orjson.dumps(doc, option=orjson.OPT_INDENT_2), self.durable)

    def _last_logged(self, n: int) -> set[str]:
        """The file names on the last ``n`` lines of the published log (files are logged in
        order, so a file published but missing from the manifest can only be there)."""
        if not n:
            return set()
        path = os.path.join(self.meta_dir, PUBLISHED_LOG)
        try:
            with open(path, "rb") as fh:
                size = fh.seek(0, os.SEEK_END)
                want = min(size, 1024 * n + 4096)  # a line is ~150 bytes
                fh.seek(size - want)
                lines = fh.read(want).splitlines()
        except FileNotFoundError:
            return set()
        if want < size:
            lines = lines[1:]  # the first one is probably cut
        names = set()
        for line in lines[-n:]:
            try:
                names.add(orjson.loads(line)["file"])
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # a line cut by a crash while it was written
        return names

    def _log_published(self, f: PublishedFile) -> None:
        line = orjson.dumps(
            {"file": f.name, "first": f.first, "last": f.last, "rows": f.rows, "last_commit": list(f.last_commit)}
        )
        with open(os.path.join(self.meta_dir, PUBLISHED_LOG), "ab") as fh:
            fh.write(line + b"\n")
            if self.durable:
                fh.flush()
                os.fsync(fh.fileno())

    # -- writing -----------------------------------------------------------------------

    def write_transaction(self, commit: Commit, rows: Iterable[tuple[int, list]]) -> int:
        tx_seq = self.next_tx_seq
        recs, threads = self._recs, self._threads
        op_seq0 = 0
        n = 0  # rows of this transaction in the buffer
        for thread, rec in rows:
            recs.append(rec)
            threads.append(thread)
            n += 1
            if len(recs) >= self.row_group_rows:
                self._tx.append((tx_seq, n, commit.key.scn, commit.tm, commit.xid, op_seq0))
                self._write_row_group()
                op_seq0 += n
                n = 0
        total = op_seq0 + n
        if not total:
            return 0
        if n:
            self._tx.append((tx_seq, n, commit.key.scn, commit.tm, commit.xid, op_seq0))
        self._end_transaction(commit, total)
        return total

    def write_transactions(self, items: list[tuple[Commit, int, list[list]]]) -> list[int]:
        """Many transactions at once, each ``(commit, thread, rows)`` with all rows of one
        redo thread, in order; same result as :meth:`write_transaction` for each."""
        out = []
        group = self.row_group_rows
        recs, threads, txs = self._recs, self._threads, self._tx
        for commit, thread, rows in items:
            n = len(rows)
            out.append(n)
            if not n:
                continue
            tx_seq = self.next_tx_seq
            done = 0
            while done < n:
                take = rows[done : done + group - len(recs)] if done or len(recs) + n > group else rows
                recs.extend(take)
                threads.extend([thread] * len(take))
                txs.append((tx_seq, len(take), commit.key.scn, commit.tm, commit.xid, done))
                done += len(take)
                if len(recs) >= group:
                    self._write_row_group()
            self._end_transaction(commit, n)
        return out

    def _end_transaction(self, commit: Commit, rows: int) -> None:
        """A transaction of ``rows`` rows (> 0) is in the open file: it took ``next_tx_seq``."""
        if not self._file_rows:
            self.buffered_since = time.monotonic()
        self._file_c_tms.append(commit.tm)
        self.next_tx_seq += 1
        self._file_rows += rows
        self._file_last_commit = commit.key
        if self._file_rows >= self.file_rows:
            self.flush()

    def _write_row_group(self) -> None:
        if not self._recs:
            return
        batch = self._batch()
        if self._writer is None:
            self._tmp_path = os.path.join(self.path, f".tmp-part-{self._file_first:020d}-{os.getpid()}.parquet")
            try:
                self._writer = parquet_writer(self._tmp_path, self.compression)
            except OSError as exc:
                raise ChangefeedError(f"{self._tmp_path}: cannot create: {exc}") from None
        try:
            self._writer.write_batch(batch, row_group_size=len(self._recs))
        except OSError as exc:
            self._io_failed(exc, "writing")
        self._recs.clear()
        self._threads.clear()
        self._tx.clear()

    def _batch(self) -> pa.RecordBatch:
        # The columns of the commit (tx_seq, c_scn, c_tm, xid) hold one value per
        # transaction segment: run-end encoded, then decoded by Arrow, not per row in Python.
        seqs, ns, scns, tms, xids, op0s = zip(*self._tx)
        ends = list(itertools.accumulate(ns))
        total = ends[-1]
        run_ends = pa.array(ends, pa.int32())

        def per_segment(values: tuple, type_: pa.DataType) -> pa.Array:
            return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(run_ends, pa.array(values, type_)))

        # op_seq: the row's place in its transaction = op_seq0 + (row - the segment's first row)
        first_rows = per_segment(tuple(op0 - (end - n) for op0, end, n in zip(op0s, ends, ns)), pa.int64())
        op_seq = pc.add(_row_numbers(total), first_rows)
        code, scn_, sub, _seq, _line, tm_, owner, table, obj, rid, before, after, sql = zip(*self._recs)
        i64, s = pa.int64(), pa.string()
        c_tm, row_tm = per_segment(tms, i64), pa.array(tm_, i64)
        arrays = [
            per_segment(seqs, i64),
            op_seq,
            per_segment(scns, i64),
            c_tm,
            per_segment(xids, s),
            _OP_NAMES.take(pa.array(code, pa.int8())),
            pa.array(scn_, i64),
            pa.array(sub, i64),
            row_tm,
            pa.array(self._threads, pa.int32()),
            pa.array(owner, s),
            pa.array(table, s),
            pa.array(obj, i64),
            pa.array(rid, s),
            pa.array(before, s),
            pa.array(after, s),
            pa.array(sql, s),
            nanos_to_timestamp(c_tm),
            nanos_to_timestamp(row_tm),
        ]
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)

    def flush(self) -> PublishedFile | None:
        """Publish the open file, if it holds any transaction.

        If the disk fails (full, read-only), the temporary file is removed and
        :class:`ChangefeedError` raised: nothing is half-published, and the transactions
        are published again by the next run (the checkpoint does not cover them).
        """
        if not self._file_rows:
            return None
        try:
            return self._publish()
        except OSError as exc:
            self._io_failed(exc, "publishing")

    def _io_failed(self, exc: OSError, doing: str) -> None:
        where = self._tmp_path or self.path
        self.abandon()
        full = getattr(exc, "errno", None) == errno.ENOSPC or "No space left" in str(exc)
        raise ChangefeedError(
            f"{where}: {'no space left on device' if full else 'I/O error'} {doing} the changefeed: "
            f"{str(exc).splitlines()[0]}",
            hint="free disk space, then run the same command again" if full else "check the changefeed directory",
            path=where,
        ) from None

    def _publish(self) -> PublishedFile:
        self._write_row_group()
        first, last = self._file_first, self.next_tx_seq - 1
        last_commit = self._file_last_commit
        assert self._writer is not None and self._tmp_path is not None and last_commit is not None
        self._writer.add_key_value_metadata(
            {
                META_FIRST: str(first),
                META_LAST: str(last),
                META_LAST_COMMIT: ",".join(str(x) for x in last_commit),
                META_ROWS: str(self._file_rows),
            }
        )
        self._writer.close()
        self._writer = None
        name = part_name(first, last)
        final = os.path.join(self.path, name)
        if self.durable:
            _fsync_path(self._tmp_path)
        fault_point("after_tmp_written")
        os.rename(self._tmp_path, final)
        if self.durable:
            _fsync_dir(self.path)
        fault_point("after_rename")
        published = PublishedFile(name, first, last, self._file_rows, last_commit)
        now_ns = time.time_ns()
        self.latencies.extend((now_ns - tm) / 1e9 for tm in self._file_c_tms if tm is not None)
        self._file_c_tms.clear()
        self.transactions_published += last - first + 1
        self.rows_published += self._file_rows
        log.info("published %s: tx_seq %d..%d, %d rows", name, first, last, self._file_rows)
        self.files_published += 1
        self.last_commit = last_commit
        self.last_c_scn = last_commit.scn
        self._log_published(published)
        self._write_manifest(name)
        self._tmp_path = None
        self._file_first = self.next_tx_seq
        self._file_rows = 0
        self._file_last_commit = None
        return published

    @property
    def buffered_rows(self) -> int:
        """Rows handed over but not yet published."""
        return self._file_rows

    def close(self) -> None:
        """Publish what is buffered and release the open file."""
        self.flush()

    def abandon(self) -> None:
        """Drop the unpublished file (its transactions will be published again on restart)."""
        if self._writer is not None:
            try:
                self._writer.close()
            except Exception:  # pragma: no cover - best effort on an error path
                pass
            self._writer = None
        if self._tmp_path and os.path.exists(self._tmp_path):
            os.unlink(self._tmp_path)
        self._recs.clear()
        self._threads.clear()
        self._tx.clear()
        self.next_tx_seq = self._file_first
        self._file_rows = 0
        self._file_last_commit = None
        self._file_c_tms.clear()


def read_footer(path: str, name: str) -> PublishedFile:
    """A published file's range and last commit from its name and footer, checked against
    each other and the row count."""
    full = os.path.join(path, name)
    first, last = parse_part_name(name)  # type: ignore[misc]
    try:
        meta = pq.read_metadata(full)
    except Exception as exc:
        raise ChangefeedCorruptError(f"{full}: unreadable Parquet footer: {exc}") from None
    kv = meta.metadata or {}
    try:
        f_first, f_last = int(kv[META_FIRST]), int(kv[META_LAST])
        scn, thread, seq, line = (int(x) for x in kv[META_LAST_COMMIT].split(b","))
        rows = int(kv[META_ROWS])
    except (KeyError, ValueError):
        raise ChangefeedCorruptError(f"{full}: footer lacks olr-buffer's range metadata") from None
    if (f_first, f_last) != (first, last) or rows != meta.num_rows:
        raise ChangefeedCorruptError(
            f"{full}: footer says tx_seq {f_first}..{f_last} and {rows} rows; "
            f"the name says {first}..{last}, the file holds {meta.num_rows} rows"
        )
    return PublishedFile(name, first, last, rows, CommitKey(scn, thread, seq, line))


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _atomic_write(path: str, data: bytes, durable: bool) -> None:
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, path)
    if durable:
        _fsync_dir(os.path.dirname(path))
