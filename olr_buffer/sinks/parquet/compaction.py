"""Compaction: merge runs of small published files into larger ones.

Readers of a changefeed remember file *names*: Spark's streaming file source keeps the
names it has read in its checkpoint, and a batch query lists the directory once and then
opens the files it listed. Replacing published files with a merged one therefore breaks
readers: a stream reads the merged file as new (every row again), a batch query that
lists while old and merged files are both there reads rows twice, one that lists in
between reads a gap, and one that listed before the old files went away fails on a
missing file. No order of renames and deletes avoids all of these, since a directory
listing is not one atomic view of several names. Hence two modes (docs/spark.md):

``output`` (safe while anything runs)
    The merged files go to another directory, a changefeed of its own with the same
    contract (names, order, footers, ``_olr_buffer/`` manifest), published one file at a
    time like the writer does (temporary file in ``_olr_buffer/tmp/``, fsync, rename,
    fsync the directory). Run
    again later, it appends what the source published since, so the output's readers see
    it grow like any changefeed. Readers switch to it explicitly.

``in place`` (only when no reader, stream or producer uses the directory; a Delta
changefeed: at any time, see below)
    Per run of files: the merged file is written and fsynced in ``_olr_buffer/tmp/``
    (out of every reader's sight); the intent (merged name, the files it replaces) goes to
    ``_olr_buffer/compaction.json``; the merged file is renamed to its ``part-`` name;
    the replaced files are deleted; the intent is removed. Rows are never missing from
    the visible files at any instant (the merged file is visible before the old ones go).
    A crash before the rename leaves the old files as they were (the temporary file is
    deleted by the next compaction or by the writer); a crash after it leaves the merged
    file overlapping the old ones, which the writer refuses to open: running the same
    compaction again finishes the job from the intent.

Both modes take the lock of the directory they write (``_olr_buffer/LOCK``, see
:mod:`.layout`), as the writer does: an in-place compaction is refused while ``replay``
or ``run`` writes the changefeed, and a second compaction while one runs.

A **Delta changefeed** is compacted in place as its readers expect of a Delta table:
the merged files are published beside the old ones and ONE Delta commit replaces them
(remove + add, ``dataChange = false``: streaming readers skip it, the rows do not
change). No file is deleted (a reader of an older version may need it: ``VACUUM`` is
the user's), so a plain Parquet reader of the directory reads those rows twice; Delta
readers (Spark with Delta, deltalake, DuckDB, Polars) read each once. Its readers need
no promise that none runs. Interrupted before the commit, it left merged files that no
table version holds; run again, it commits them as they are.

Both modes work on object storage (``s3://BUCKET/PREFIX``): the temporary files are local,
a file is published by one conditional PUT, the lock is the changefeed's lease.

Merged files keep the changefeed's naming (``part-<first>-<last>.parquet``), row order,
row groups of up to 65,536 rows and the footer metadata the writer recovers from
(``olr_buffer.first_tx_seq``, ``last_tx_seq``, ``last_commit`` of the last transaction,
``rows``, and ``schemas``: the schema versions that changed in the files it merges), and
an output directory gets the schema documents its rows name, so
:class:`~olr_buffer.sinks.parquet.ChangefeedWriter` reopens the result and continues at the
same ``next_tx_seq``.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import EXIT_USAGE
from ...faults import fault_point
from ...fsutil import fsync_file
from ...store import Lease, StoreError, is_remote
from . import tables
from .errors import ChangefeedCorruptError, ChangefeedError
from .fencing import ManifestHead, fence_previous_writers
from .layout import (  # noqa: F401  (read_footer: a public name of this module too)
    DEFAULT_MODE,
    META_DIR,
    ChangefeedLock,
    Location,
    PublishedFile,
    append_line,
    apply_mode,
    as_location,
    compact_tmp_basename,
    compact_tmp_name,
    copy_schema_documents,
    create_file,
    current_schemas,
    damaged,
    file_mode,
    footer_metadata,
    list_files,
    local_tmp_dir,
    log_published,
    manifest_document,
    manifest_owner,
    manifest_run_from,
    manifest_table_format,
    prepare_dir,
    prepare_tmp_dir,
    publish,
    read_footer,
    read_manifest,
    remove_own_temporaries,
    write_manifest,
)
from .schema import ARROW_SCHEMA, parquet_writer, parse_part_name, part_name, with_timestamps
from .writer import DEFAULT_ROW_GROUP_ROWS

log = logging.getLogger(__name__)

DEFAULT_TARGET_ROWS = 1_000_000
INTENT = "compaction.json"
COMPACTION_LOG = "compactions.jsonl"
META_COMPACTED = b"olr_buffer.compacted_files"  # how many published files a merged file replaces


class CompactionError(ChangefeedError):
    """Compaction cannot run as asked (another one runs, the output is not this changefeed's)."""


class CompactionRefused(CompactionError):
    """In place without the promise that no reader runs: a usage error (exit 2), as a
    missing option is, but worded as the one-line error it is."""

    exit_code = EXIT_USAGE


@dataclass
class CompactionProgress:
    """What a progress display of ``compact`` shows: files written of those to write, and
    their rows."""

    files_done: int = 0
    files_total: int = 0
    rows_done: int = 0
    rows_total: int = 0


class _Progress:
    """Calls ``on_progress`` as files are written, every ``every`` seconds, and at the end."""

    def __init__(self, on_progress, groups: list[list[PublishedFile]], every: float = 0.5) -> None:
        self.on_progress = on_progress
        self.every = every
        self.last = time.monotonic()
        self.p = CompactionProgress(0, len(groups), 0, sum(f.rows for g in groups for f in g))

    def wrote(self, group: list[PublishedFile]) -> None:
        self.p.files_done += 1
        self.p.rows_done += sum(f.rows for f in group)
        if self.on_progress and time.monotonic() - self.last >= self.every:
            self.last = time.monotonic()
            self.on_progress(self.p)

    def done(self) -> None:
        if self.on_progress:
            self.on_progress(self.p)


@dataclass
class CompactionResult:
    """What a compaction did (or, with ``dry_run``, would do)."""

    mode: str  # "output" or "in-place"
    source: str
    target: str
    files_before: int = 0  # files of the source considered
    files_written: int = 0  # files written (merged, or copied as they are into the output)
    files_merged: int = 0  # source files that went into a merged file of two or more
    files_after: int = 0  # part files in the target afterwards
    rows: int = 0  # rows written
    next_tx_seq: int = 0  # the target holds tx_seq 0 .. next_tx_seq - 1
    recovered: bool = False  # an interrupted in-place compaction was finished first
    dry_run: bool = False
    groups: list[list[str]] = field(default_factory=list)  # source file names per written file
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


# -- reading a changefeed's files ------------------------------------------------------


def published_files(path: str | Location) -> list[PublishedFile]:
    """The ``part-`` files of the changefeed at ``path`` with their footers, checked: a
    gapless chain from tx_seq 0, each footer agreeing with its name. A Delta changefeed:
    the files of its table (and those published after them)."""
    loc = as_location(path)
    return list_files(
        loc,
        hint="if an in-place compaction was interrupted, run it again to finish it",
        names=tables.chain_names(loc),
    )


# -- planning -----------------------------------------------------------------------------


def plan_groups(files: list[PublishedFile], target_rows: int) -> list[list[PublishedFile]]:
    """Consecutive runs of files, each of at most ``target_rows`` rows (a file bigger than
    that stands alone): the fewest files a merge of neighbours can give, in order."""
    if target_rows < 1:
        raise ValueError("target_rows must be >= 1")
    groups: list[list[PublishedFile]] = []
    rows = 0
    for f in files:
        if groups and rows + f.rows <= target_rows:
            groups[-1].append(f)
            rows += f.rows
        else:
            groups.append([f])
            rows = f.rows
    return groups


# -- the two modes ------------------------------------------------------------------------


def compact(
    changefeed_dir: str | os.PathLike[str],
    *,
    output: str | os.PathLike[str] | None = None,
    in_place: bool = False,
    no_reader_running: bool = False,
    target_rows: int = DEFAULT_TARGET_ROWS,
    full_groups_only: bool = False,
    row_group_rows: int = DEFAULT_ROW_GROUP_ROWS,
    compression: str = "zstd",
    durable: bool = True,
    dry_run: bool = False,
    on_progress: Callable[[CompactionProgress], None] | None = None,
) -> CompactionResult:
    """Merge small published files; see the module doc for the two modes.

    ``output``: write the compacted changefeed there (created, or continued if an earlier
    compaction of the same changefeed wrote it). ``in_place`` needs ``no_reader_running``:
    the caller states that no Spark query (batch or streaming) and no producer uses the
    directory while this runs, and that no streaming checkpoint over it will be resumed.
    ``full_groups_only`` (output mode): leave a last run of files that does not reach
    ``target_rows`` for a later run, instead of writing it as a smaller file. ``on_progress``:
    called about every half second while files are written, and once at the end.
    """
    src = os.fspath(changefeed_dir)
    if (output is None) == (not in_place):
        raise CompactionError(
            "compact: say where the compacted files go: an output directory, or in place",
            hint="--output DIR is safe while readers run; --in-place is not",
        )
    if in_place and not no_reader_running and not tables.table_format(Location(src)):
        # (a Delta or Iceberg changefeed's readers read a snapshot of its table: they need no promise)
        raise CompactionRefused(
            f"{src}: refusing to compact in place: running readers would read rows twice or miss "
            "rows, and streaming checkpoints over it would read every merged row again",
            hint="use --output DIR (readers switch to it explicitly), or stop every reader and "
            "producer and pass --i-know-no-reader-is-running",
        )
    if target_rows < 1 or row_group_rows < 1:
        raise ValueError("target_rows and row_group_rows must be >= 1")
    t0 = time.monotonic()
    opts = _WriteOptions(row_group_rows, compression, durable)
    if in_place:
        result = _compact_in_place(src, target_rows, opts, dry_run, on_progress)
    else:
        assert output is not None
        result = _compact_to_output(src, os.fspath(output), target_rows, full_groups_only, opts, dry_run, on_progress)
    result.seconds = time.monotonic() - t0
    return result


@dataclass
class _Target:
    """Where merged files go: the changefeed's :class:`Location`, and the local directory
    of their temporary files (a local changefeed's ``_olr_buffer/tmp/``; for one on
    object storage a staging directory of this run)."""

    loc: Location
    tmp_dir: str

    def tmp_path(self, first: int, last: int) -> str:
        return os.path.join(self.tmp_dir, compact_tmp_basename(first, last))


@contextmanager
def _target(loc: Location) -> Iterator[_Target]:
    if loc.path is not None:
        yield _Target(loc, local_tmp_dir(loc.path))
        return
    staging = tempfile.mkdtemp(prefix="olr-buffer-compact-")
    try:
        yield _Target(loc, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@dataclass(frozen=True)
class _WriteOptions:
    row_group_rows: int
    compression: str
    durable: bool


def _compact_to_output(
    src: str,
    dst: str,
    target_rows: int,
    full_groups_only: bool,
    opts: _WriteOptions,
    dry_run: bool,
    on_progress: Callable[[CompactionProgress], None] | None = None,
) -> CompactionResult:
    _check_apart(src, dst)
    src_loc = Location(src)
    result = CompactionResult("output", src, dst, dry_run=dry_run)
    if dry_run:
        dst_loc = Location(dst)
        existing = published_files(dst_loc) if dst_loc.exists() else []
        groups = _plan_output(src_loc, dst, existing, target_rows, full_groups_only, result)
        result.files_after = len(existing) + len(groups)
        result.next_tx_seq = groups[-1][-1].last + 1 if groups else (existing[-1].last + 1 if existing else 0)
        return result
    mode = _dir_mode(src_loc)
    dst_loc = Location(dst, mode=mode, durable=opts.durable)
    if dst_loc.path is not None:
        prepare_dir(dst, mode)
    with _locked(dst_loc, fence=False), _target(dst_loc) as target:
        if dst_loc.path is not None:
            apply_mode(dst, mode)
            remove_own_temporaries(dst)  # the output's leftovers of an interrupted run
        else:
            dst_loc.store.clear_staging()
        written = published_files(dst_loc) if dst_loc.exists() else []
        groups = _plan_output(src_loc, dst, written, target_rows, full_groups_only, result)
        progress = _Progress(on_progress, groups)
        if groups:
            copy_schema_documents(src_loc, dst_loc, opts.durable)  # the rows it copies name them
        for group in groups:
            if len(group) == 1:
                merged = _copy_file(src_loc, group[0], target, file_mode(mode))
            else:
                merged = _write_merged(src_loc, group, target, opts, file_mode(mode))
            _publish(target, merged, opts)
            written.append(merged)
            if dst_loc.path is not None:  # the audit log: a local changefeed's
                log_published(dst, merged, opts.durable)
            write_manifest(dst_loc, len(written), merged, merged.owner, opts.durable, table_format="parquet")
            progress.wrote(group)
        progress.done()
    result.files_after = len(written)
    result.next_tx_seq = written[-1].last + 1 if written else 0
    return result


def _plan_output(
    src: Location,
    dst: str,
    existing: list[PublishedFile],
    target_rows: int,
    full_groups_only: bool,
    result: CompactionResult,
) -> list[list[PublishedFile]]:
    files = published_files(src)
    start = _continue_at(src.uri, dst, files, existing)
    todo = [f for f in files if f.first >= start]
    groups = plan_groups(todo, target_rows)
    if full_groups_only and groups and sum(f.rows for f in groups[-1]) < target_rows:
        groups.pop()
    result.files_before = len(todo)
    result.groups = [[f.name for f in g] for g in groups]
    result.files_written = len(groups)
    result.files_merged = sum(len(g) for g in groups if len(g) > 1)
    result.rows = sum(f.rows for g in groups for f in g)
    return groups


def _check_apart(src: str, dst: str) -> None:
    """Neither directory may hold the other: Spark lists subdirectories too."""
    if is_remote(src) or is_remote(dst):
        a, b = (as_location(x).uri.rstrip("/") if is_remote(x) else os.path.realpath(x) for x in (src, dst))
        sep = "/"
    else:
        a, b = os.path.realpath(src), os.path.realpath(dst)
        sep = os.sep
    if a == b:
        raise CompactionError(f"{dst}: the output must be another directory than the changefeed")
    if b.startswith(a + sep) or a.startswith(b + sep):
        raise CompactionError(
            f"{dst}: the output must not be inside the changefeed, nor hold it: Spark would read the subdirectory too",
            hint="use a sibling directory",
        )


def _continue_at(src: str, dst: str, files: list[PublishedFile], existing: list[PublishedFile]) -> int:
    """Where an earlier compaction into ``dst`` stopped; checks that ``dst`` holds this
    changefeed: its last file must end where a source file ends, with the same commit."""
    if not existing:
        return 0
    last = existing[-1]
    by_last = {f.last: f for f in files}
    mine = by_last.get(last.last)
    if mine is None or mine.last_commit != last.last_commit:
        raise CompactionError(
            f"{dst}: holds tx_seq 0..{last.last}, which is not a compaction of {src} "
            f"(no file of it ends at tx_seq {last.last} with the same last commit)",
            hint="compact into a new or empty directory (also after the source was compacted in place)",
        )
    return last.last + 1


def _compact_in_place(
    src: str,
    target_rows: int,
    opts: _WriteOptions,
    dry_run: bool,
    on_progress: Callable[[CompactionProgress], None] | None = None,
) -> CompactionResult:
    result = CompactionResult("in-place", src, src, dry_run=dry_run)
    loc = Location(src, durable=opts.durable)
    if loc.path is not None and not os.path.isdir(os.path.join(src, META_DIR)):
        raise ChangefeedError(f"{src}: not a changefeed directory (no {META_DIR}/)")
    if loc.path is None and not loc.list(f"{META_DIR}/"):
        raise ChangefeedError(f"{src}: not a changefeed (no {META_DIR}/ under the prefix)", uri=loc.uri)
    if loc.path is not None:
        loc = Location(src, mode=_dir_mode(loc), durable=opts.durable)
    with _locked(loc, fence=not dry_run) as head, _target(loc) as target:
        kind = tables.table_format(loc)  # delta, iceberg: one commit replaces the files
        if not dry_run and not kind:
            result.recovered = recover_in_place(target, opts.durable)
        files = published_files(loc)
        groups = plan_groups(files, target_rows)
        merges = [g for g in groups if len(g) > 1]
        result.files_before = len(files)
        result.groups = [[f.name for f in g] for g in merges]
        result.files_written = len(merges)
        result.files_merged = sum(len(g) for g in merges)
        result.rows = sum(f.rows for g in merges for f in g)
        result.files_after = len(groups)
        result.next_tx_seq = files[-1].last + 1 if files else 0
        if dry_run:
            return result
        if loc.path is not None:
            prepare_tmp_dir(src)
            remove_own_temporaries(src, compaction_only=True)
        fmode = file_mode(loc.mode)
        progress = _Progress(on_progress, merges)
        if kind:
            _compact_table(kind, target, merges, opts, fmode, head.lease if head is not None else None)
        else:
            for group in merges:
                merged = _write_merged(loc, group, target, opts, fmode)
                _swap_in(target, merged, group, opts)
                progress.wrote(group)
        progress.done()
        if merges:
            files = published_files(loc)
            manifest = read_manifest(loc)
            owner = manifest_owner(manifest) or files[-1].owner
            table_format = kind or manifest_table_format(manifest)
            iceberg = manifest.get("iceberg") if manifest and kind == "iceberg" else None
            run_from = manifest_run_from(manifest)  # (the same commits: still where a new queue reads from)
            if head is not None:  # conditional: a writer that took the changefeed over meanwhile wins
                head.write(
                    manifest_document(
                        len(files), files[-1], owner, table_format=table_format, iceberg=iceberg, run_from=run_from
                    )
                )
            else:
                write_manifest(
                    loc,
                    len(files),
                    files[-1],
                    owner,
                    opts.durable,
                    table_format=table_format,
                    iceberg=iceberg,
                    run_from=run_from,
                )
    return result


def _compact_table(
    kind: str,
    target: _Target,
    merges: list[list[PublishedFile]],
    opts: _WriteOptions,
    fmode: int,
    lease: Lease | None = None,
) -> None:
    """A Delta (Iceberg) changefeed: each run of files merged into one published file,
    then ONE Delta commit (Iceberg snapshot) removes the runs and adds the merged files
    (Delta: ``dataChange = false``; Iceberg: an overwrite of the same rows, stamped with
    the table's last tx_seq). No file is deleted: a reader of an older version of the
    table may still need it (``VACUUM``, snapshot expiry, are the user's). A merged file an
    interrupted compaction published, but never committed, is committed as it is. Under
    ``lease``, the commit carries its generation (a later take-over fences it)."""
    if not merges:
        return
    loc = target.loc
    glue = tables.glue(kind)
    owner = manifest_owner(read_manifest(loc))  # the queue that writes it: its id on the commit too
    table = glue.open_table(
        loc,
        app_id=owner.queue_id if owner else None,
        writer={"compaction": True, "pid": os.getpid(), **_lease_facts(lease)},
        create=False,
    )
    pairs = []
    for group in merges:
        merged = _merge_of(group)
        if loc.size(merged.name) is not None:
            existing = read_footer(loc, merged.name)
            if (existing.first, existing.last, existing.rows) != (merged.first, merged.last, merged.rows):
                raise ChangefeedCorruptError(
                    f"{loc.where(merged.name)}: is not the merge of {group[0].name}..{group[-1].name}",
                    path=loc.where(merged.name),
                )
            log.info("%s: published by an interrupted compaction, committed as it is", loc.where(merged.name))
        else:
            merged = _write_merged(loc, group, target, opts, fmode)
            _publish(target, merged, opts)
            fault_point("after_compaction_publish")
        pairs.append(([glue.part_file(loc, f) for f in group], glue.part_file(loc, merged)))
    version = table.compact_many(pairs)
    glue.apply_log_modes(loc)
    log.info(
        "%s: compaction committed as %s %d: %d files replaced by %d; none deleted",
        loc.uri,
        "Iceberg snapshot" if kind == "iceberg" else "Delta version",
        version,
        sum(len(g) for g in merges),
        len(merges),
    )


def _lease_facts(lease: Lease | None) -> dict:
    return {"writer": lease.writer_id, "lease_generation": lease.generation} if lease is not None else {}


def _swap_in(target: _Target, merged: PublishedFile, replaced: list[PublishedFile], opts: _WriteOptions) -> None:
    """Intent, publish the merged file, delete what it replaces, drop the intent."""
    intent = {
        "merged": merged.name,
        "tmp": compact_tmp_name(merged.first, merged.last),
        "replaces": [f.name for f in replaced],
        "rows": merged.rows,
        "started": time.time(),
    }
    target.loc.replace_meta(INTENT, orjson.dumps(intent))
    _publish(target, merged, opts)
    fault_point("after_compaction_publish")
    _finish_swap(target.loc, intent, opts.durable)


def _finish_swap(loc: Location, intent: dict, durable: bool) -> None:
    for name in intent["replaces"]:
        loc.delete(name)
    if loc.path is not None:  # the compaction log: a local changefeed's
        append_line(
            os.path.join(loc.path, META_DIR, COMPACTION_LOG),
            {"file": intent["merged"], "replaces": intent["replaces"], "rows": intent["rows"], "time": time.time()},
            durable,
        )
    loc.delete_meta(INTENT)


def recover_in_place(target: _Target | str, durable: bool = True) -> bool:
    """Finish or undo an interrupted in-place compaction; True if there was one.

    Before the merged file is published the old files are intact: the temporary file is
    dropped. After it the merged file is complete and visible: the files it replaces are
    deleted.
    """
    if not isinstance(target, _Target):
        loc = Location(target, durable=durable)
        target = _Target(loc, local_tmp_dir(loc.path) if loc.path is not None else tempfile.gettempdir())
    loc = target.loc
    data = loc.read_meta(INTENT, "read the compaction's intent")
    if data is None:
        return False
    intent_path = loc.where(f"{META_DIR}/{INTENT}")
    intent = orjson.loads(data)
    if loc.size(intent["merged"]) is not None:
        merged = read_footer(loc, intent["merged"])  # complete: it was fsynced before it was published
        first = parse_part_name(intent["replaces"][0])
        last = parse_part_name(intent["replaces"][-1])
        if first is None or last is None or (merged.first, merged.last) != (first[0], last[1]):
            raise ChangefeedCorruptError(f"{intent_path}: the intent does not match {merged.name}")
        log.warning("finishing an interrupted compaction into %s", merged.name)
        _finish_swap(loc, intent, durable)
    else:
        log.warning("undoing an interrupted compaction into %s (not yet visible)", intent["merged"])
        if loc.path is not None:
            tmp = os.path.join(loc.path, intent["tmp"])
            if os.path.exists(tmp):
                os.unlink(tmp)
        loc.delete_meta(INTENT)
    return True


# -- writing files ------------------------------------------------------------------------


def _dir_mode(loc: Location) -> int:
    """A changefeed's mode is its directory's: merged files and an output follow it (on
    object storage, the default)."""
    return os.stat(loc.path).st_mode & 0o777 if loc.path is not None else DEFAULT_MODE


def _merge_of(group: list[PublishedFile]) -> PublishedFile:
    """The file that merges ``group`` (neighbouring files, in order): its name, range, rows,
    last commit and owner, and the schema versions its files changed."""
    return PublishedFile(
        part_name(group[0].first, group[-1].last),
        group[0].first,
        group[-1].last,
        sum(f.rows for f in group),
        group[-1].last_commit,
        group[-1].owner,
        tuple((o, t, v) for (o, t), v in current_schemas(group).items()),  # the files' changes, in order
    )


def _write_merged(
    src: Location, group: list[PublishedFile], target: _Target, opts: _WriteOptions, mode: int
) -> PublishedFile:
    """Rows of ``group``'s files, in order, into one local temporary file (fsynced)."""
    merged = _merge_of(group)
    tmp = target.tmp_path(merged.first, merged.last)
    create_file(tmp, mode)
    writer = parquet_writer(tmp, opts.compression)
    try:
        pending: list[pa.RecordBatch] = []
        pending_rows = 0
        n = 0
        for f in group:
            # A file written before c_ts/ts existed gets them: merged files have every column.
            for batch in _read_verified(src, f.name, opts.row_group_rows):
                batch = with_timestamps(batch)
                pending.append(batch)
                pending_rows += batch.num_rows
                n += batch.num_rows
                while pending_rows >= opts.row_group_rows:
                    pending, pending_rows = _write_row_group(writer, pending, opts.row_group_rows)
        if pending_rows:
            _write_row_group(writer, pending, pending_rows)
        if n != merged.rows:
            raise ChangefeedCorruptError(
                f"{src.uri}: files {group[0].name}..{group[-1].name} hold {n} rows, their footers say {merged.rows}"
            )
        meta = footer_metadata(merged)
        meta[META_COMPACTED] = str(len(group))
        writer.add_key_value_metadata(meta)
    except BaseException:
        writer.close()
        os.unlink(tmp)
        raise
    writer.close()
    if opts.durable:
        fsync_file(tmp)
    return merged


def _read_verified(src: Location, name: str, batch_size: int) -> Iterator[pa.RecordBatch]:
    """The batches of a published file, every page's checksum verified: a damaged file
    raises :class:`ChangefeedCorruptError` naming it, instead of going into a merged file
    under new checksums."""
    full = src.where(name)
    try:
        with src.open_input(name) as f:
            pf = pq.ParquetFile(f, page_checksum_verification=True)
            yield from pf.iter_batches(batch_size=batch_size, columns=_present(pf))
    except (ChangefeedError, StoreError):
        raise
    except OSError as exc:
        if isinstance(exc, FileNotFoundError) or exc.errno is not None:
            raise
        raise damaged(full, exc) from None
    except (pa.ArrowException, ValueError) as exc:
        raise damaged(full, exc) from None


def _present(pf: pq.ParquetFile) -> list[str]:
    """The changefeed's columns that ``pf`` holds."""
    names = set(pf.schema_arrow.names)
    return [name for name in ARROW_SCHEMA.names if name in names]


def _write_row_group(
    writer: pq.ParquetWriter, pending: list[pa.RecordBatch], rows: int
) -> tuple[list[pa.RecordBatch], int]:
    """Write the first ``rows`` pending rows as one row group; return what is left."""
    table = pa.Table.from_batches(pending, schema=ARROW_SCHEMA)
    writer.write_table(table.slice(0, rows), row_group_size=rows)
    rest = table.slice(rows)
    return rest.combine_chunks().to_batches() if rest.num_rows else [], rest.num_rows


def _copy_file(src: Location, f: PublishedFile, target: _Target, mode: int) -> PublishedFile:
    """A file of the source as it is, into a local temporary file (fsynced)."""
    tmp = target.tmp_path(f.first, f.last)
    create_file(tmp, mode)
    with src.open_input(f.name) as fin, open(tmp, "wb") as out:
        while chunk := fin.read(8 << 20):
            out.write(chunk)
        if target.loc.durable:
            out.flush()
            os.fsync(out.fileno())
    return f


def _publish(target: _Target, f: PublishedFile, opts: _WriteOptions) -> None:
    """The complete temporary file becomes ``part-<first>-<last>.parquet``."""
    publish(target.loc, target.tmp_path(f.first, f.last), f.name)


@contextmanager
def _locked(loc: Location, fence: bool) -> Iterator[ManifestHead | None]:
    """The changefeed's lock, as its writer takes it: one process writes a changefeed, be
    it a writer or a compaction. A local changefeed: ``_olr_buffer/LOCK``; one written
    under a lease (on object storage always; a local one that has ``_olr_buffer/lease.json``,
    written by ``run --standby``): its lease, refused while a service holds it. With the
    lease and ``fence``, the compaction takes the changefeed over as a writer does
    (:func:`.fencing.fence_previous_writers`): yields the head through which it writes the
    manifest, conditionally, stamped with its generation."""
    lease = Lease(loc.store, info={"changefeed": loc.uri, "compaction": True})
    if loc.path is not None and loc.size(lease.name) is None:  # a local changefeed written under the lock
        lock = ChangefeedLock(loc.path, writer=False)
        try:
            yield None
        finally:
            lock.release()
        return
    try:
        lease.acquire()
        lease.start_keepalive()
        yield fence_previous_writers(loc, lease) if fence else None
    finally:
        lease.release()
