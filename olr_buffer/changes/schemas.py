"""Schema documents: a table's shape as a source knows it, and its version."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import orjson

# -- schema documents ----------------------------------------------------------------------
# A table's shape as a source knows it, in one canonical JSON text that travels in the
# queue on the row that introduces it and is written to the changefeed's metadata
# (docs/formats.md, "Schema documents"). Its version is a hash of that text: the same shape
# gets the same version whenever and however often it is sent, so that a restart writes
# the same documents and names the same versions, and a document is never overwritten.

SCHEMA_FORMAT = 1
SCHEMA_VERSION_LENGTH = 16  # hexadecimal digits of the SHA-256 of the document


@dataclass(frozen=True, slots=True)
class SchemaColumn:
    """One column of a schema document: its name, its type as the source states it, whether
    it may be null (None: unknown), and the Spark type its values read as (a Spark SQL type
    name: ``decimal(12,2)``, ``timestamp``, ``array<bigint>`` ...)."""

    name: str
    type: str
    nullable: bool | None
    spark: str


def schema_document(
    source: str, owner: str, table: str, columns: Iterable[SchemaColumn], key: Iterable[str] = ()
) -> tuple[str, str]:
    """``(version, text)`` of the schema document of ``owner.table`` (``source``: the kind
    of source that states it, ``postgresql`` or ``redo``; ``key``: its key columns, in key
    order)."""
    doc = {
        "format": SCHEMA_FORMAT,
        "source": source,
        "owner": owner,
        "table": table,
        "key": list(key),
        "columns": [{"name": c.name, "type": c.type, "nullable": c.nullable, "spark": c.spark} for c in columns],
    }
    text = orjson.dumps(doc).decode()
    return schema_version(text), text


def schema_version(text: str) -> str:
    """The version of a schema document: the first hexadecimal digits of the SHA-256 of its text."""
    return hashlib.sha256(text.encode()).hexdigest()[:SCHEMA_VERSION_LENGTH]
