"""The changefeed as the mirror reads it: its published files in ``tx_seq`` order (listed
with the changefeed's own listing, every footer checked: a gapless chain; of a Delta
changefeed the files of its table and those published after them), their rows a table
at a time, and the schema documents the rows name."""

from __future__ import annotations

import logging

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..sinks.parquet import (
    ChangefeedCorruptError,
    Location,
    PublishedFile,
    chain_names,
    list_files,
    read_manifest,
    read_schema_document,
)

log = logging.getLogger(__name__)

#: The changefeed columns the mirror reads.
COLUMNS = ["tx_seq", "op_seq", "c_scn", "c_tm", "op", "owner", "table", "before", "after", "schema_version"]


class Feed:
    """The published files of the changefeed at ``path`` (a directory or
    ``s3://BUCKET/PREFIX``)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.location = Location(path)
        self.files: list[PublishedFile] = []
        self._documents: dict[str, dict] = {}

    @property
    def last_tx_seq(self) -> int:
        """The last transaction listed (-1: none)."""
        return self.files[-1].last if self.files else -1

    def refresh(self) -> int:
        """List the files published since the last call; returns how many there are. A
        changefeed compacted in place since (its chain starts over with merged files) is
        listed again whole."""
        start = self.last_tx_seq + 1
        names = chain_names(self.location)
        try:
            new = list_files(self.location, start=start, names=names)
            if not new and self.files and not self._still_there(self.files[-1].name, names):
                raise ChangefeedCorruptError(f"{self.location.where(self.files[-1].name)}: gone")
        except ChangefeedCorruptError:
            if not self.files:
                raise
            # merged with files after it: the changefeed's files are listed again
            log.info("%s: the changefeed's files changed (compaction): listing them again", self.location.uri)
            listed = list_files(self.location, names=chain_names(self.location))
            if not listed or listed[-1].last < self.last_tx_seq:
                raise
            self.files = listed
            return len(listed)
        self.files.extend(new)
        return len(new)

    def _still_there(self, name: str, names: set[str] | None) -> bool:
        if names is not None:
            return name in names
        return any(obj.name == name for obj in self.location.list_top())

    def queue_id(self) -> str | None:
        """The id of the queue that writes the changefeed (the files' footers, else its
        manifest), which names the mirror's application transactions."""
        for f in self.files[:1]:
            if f.owner is not None:
                return f.owner.queue_id
        manifest = read_manifest(self.location) or {}
        queue_id = manifest.get("queue_id")
        return queue_id if isinstance(queue_id, str) else None

    def files_after(self, tx_seq: int) -> list[PublishedFile]:
        """The files that hold a transaction after ``tx_seq``."""
        return [f for f in self.files if f.last > tx_seq]

    def read(self, f: PublishedFile, tables: set[tuple[str, str]] | None) -> pa.Table:
        """The rows of ``f`` (the mirror's columns), of ``tables`` only when given."""
        with self.location.open_input(f.name) as fh:
            rows = pq.read_table(fh, columns=COLUMNS)
        return _selected(rows, tables)

    def read_part(
        self, f: PublishedFile, tables: set[tuple[str, str]] | None, after: int, rows: int
    ) -> tuple[pa.Table, int]:
        """Of a file too large for one batch: its rows after ``after`` in whole
        transactions, about ``rows`` of them (more when one transaction has more), read a
        row group at a time (their ``tx_seq`` statistics skip those before); and the last
        ``tx_seq`` they cover (``f.last`` at the file's end)."""
        with self.location.open_input(f.name) as fh:
            pf = pq.ParquetFile(fh)
            meta = pf.metadata
            column = pf.schema_arrow.get_field_index("tx_seq")
            parts: list[pa.Table] = []
            count = 0
            for i in range(meta.num_row_groups):
                stats = meta.row_group(i).column(column).statistics
                if stats is not None and stats.has_min_max and stats.max <= after:
                    continue
                part = pf.read_row_group(i, columns=COLUMNS)
                part = part.filter(pc.greater(part["tx_seq"], after))
                parts.append(part)
                count += part.num_rows
                if count < rows or i == meta.num_row_groups - 1:
                    continue
                # the last transaction read may go on in the next row group: up to the one before it
                table = pa.concat_tables(parts)
                top = table["tx_seq"][-1].as_py()
                done = table.filter(pc.less(table["tx_seq"], top))
                if done.num_rows:
                    return _selected(done, tables), top - 1
            table = pa.concat_tables(parts) if parts else pf.schema_arrow.empty_table().select(COLUMNS)
        return _selected(table, tables), f.last

    def document(self, version: str) -> dict:
        """The schema document ``version`` (parsed; kept)."""
        doc = self._documents.get(version)
        if doc is None:
            doc = self._documents[version] = orjson.loads(read_schema_document(self.location, version))
        return doc


def _selected(rows: pa.Table, tables: set[tuple[str, str]] | None) -> pa.Table:
    if tables is not None and rows.num_rows:
        wanted = pa.array(sorted(f"{o}\x00{t}" for o, t in tables))
        names = pc.binary_join_element_wise(rows["owner"].cast(pa.string()), rows["table"].cast(pa.string()), "\x00")
        rows = rows.filter(pc.is_in(names, value_set=wanted))
    return rows
