"""The part files a changefeed's table commits, whatever its format (Delta:
:mod:`.delta.commits`, Iceberg: :mod:`.iceberg.commits`): what each format checks of
them before a commit, and which of the files published after a kill follow the table.

A table's files are a chain of ``tx_seq`` ranges: each file's first is one past the
last of the file before it. The checks raise the format's own error type (``error``, a
subclass of :class:`~olr_buffer.errors.OlrBufferError`), naming the file and, where it
helps, the table (``table``: "the Delta table").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

from ...errors import OlrBufferError
from ...store import ObjectNotFoundError, Store


class TablePart(Protocol):
    """A published part file as a table commits it."""

    @property
    def name(self) -> str: ...  # relative to the changefeed's root
    @property
    def size(self) -> int: ...
    @property
    def first_tx_seq(self) -> int: ...
    @property
    def last_tx_seq(self) -> int: ...
    @property
    def rows(self) -> int: ...


P = TypeVar("P", bound=TablePart)


def following_parts(
    published: Sequence[P], next_tx_seq: int, store: Store, *, table: str, error: type[OlrBufferError]
) -> list[P]:
    """Of the ``published`` files (what a listing found), those that follow a table that
    holds up to ``next_tx_seq - 1``, in order: published before a kill but never
    committed. Files the table holds already (or that a compaction replaced) are left
    out; one that does not continue the chain is an ``error``."""
    pending = []
    expected = next_tx_seq
    for f in sorted(published, key=lambda f: f.first_tx_seq):
        if f.last_tx_seq < next_tx_seq:
            continue  # committed (or replaced by a compaction)
        if f.first_tx_seq != expected:
            raise error(
                f"{store.location(f.name)}: tx_seq {f.first_tx_seq}..{f.last_tx_seq} does not follow "
                f"{table}, which holds up to tx_seq {expected - 1}",
                hint="files were written by another writer, or removed",
                uri=store.location(f.name),
            )
        pending.append(f)
        expected = f.last_tx_seq + 1
    return pending


def check_chain(files: Sequence[TablePart], store: Store, error: type[OlrBufferError]) -> None:
    """``files`` (in order) follow each other, each with a range and rows."""
    for a, b in zip(files, files[1:]):
        if b.first_tx_seq != a.last_tx_seq + 1:
            raise error(
                f"{store.location(b.name)}: tx_seq {b.first_tx_seq}..{b.last_tx_seq} does not follow "
                f"{a.name} ({a.first_tx_seq}..{a.last_tx_seq})",
                uri=store.location(b.name),
            )
    for f in files:
        if f.last_tx_seq < f.first_tx_seq or f.rows <= 0:
            raise error(f"{store.location(f.name)}: an empty or reversed range", uri=store.location(f.name))


def check_published(files: Sequence[TablePart], store: Store, error: type[OlrBufferError]) -> None:
    """Each file is in the store with its size (a table adds whatever it is told: a
    missing file would break every reader of the table)."""
    for f in files:
        where = store.location(f.name)
        try:
            size = store.stat(f.name).size
        except ObjectNotFoundError:
            raise error(f"{where}: not published: cannot commit it", uri=where) from None
        if size != f.size:
            raise error(f"{where}: {size} bytes published, {f.size} to commit", uri=where)


def commit_parts(files: Sequence[P], store: Store, error: type[OlrBufferError]) -> list[P]:
    """The files of one commit, in order, checked: they follow each other, each is
    published with its size (:func:`check_chain`, :func:`check_published`)."""
    files = sorted(files, key=lambda f: f.first_tx_seq)
    check_chain(files, store, error)
    check_published(files, store, error)
    return files


def check_merge(removed: Sequence[P], added: TablePart, store: Store, error: type[OlrBufferError]) -> list[P]:
    """A compaction's merge: ``removed`` (files of the table) follow each other and
    ``added``, published, holds the same transactions in as many rows. Returns
    ``removed`` in order."""
    removed = sorted(removed, key=lambda f: f.first_tx_seq)
    check_chain(removed, store, error)
    check_published([added], store, error)
    rows = sum(f.rows for f in removed)
    if (added.first_tx_seq, added.last_tx_seq) != (removed[0].first_tx_seq, removed[-1].last_tx_seq) or (
        added.rows != rows
    ):
        where = store.location(added.name)
        raise error(
            f"{where}: holds tx_seq {added.first_tx_seq}..{added.last_tx_seq} in {added.rows} rows; the files it "
            f"replaces hold {removed[0].first_tx_seq}..{removed[-1].last_tx_seq} in {rows} rows",
            uri=where,
        )
    return removed
