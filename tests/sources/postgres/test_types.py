"""The PostgreSQL type mapping: a column's type OID and modifier (from a Relation message),
and a TypeInfo name for a type that is not built in, give the type as ``format_type``
writes it and the Spark type its values read as (docs/postgresql.md, "Types in Spark")."""

from __future__ import annotations

import pytest

from olr_buffer.sources.postgres import protocol as p
from olr_buffer.sources.postgres.types import column_type, decimal_type, numeric_modifier


def numeric(precision: int, scale: int) -> int:
    """atttypmod of numeric(precision, scale), as the server computes it."""
    return ((precision << 16) | (scale & 0x7FF)) + 4


@pytest.mark.parametrize(
    "oid, typmod, name, spark",
    [
        (21, -1, "smallint", "smallint"),
        (23, -1, "integer", "int"),
        (20, -1, "bigint", "bigint"),
        (26, -1, "oid", "bigint"),
        (700, -1, "real", "float"),
        (701, -1, "double precision", "double"),
        (1700, -1, "numeric", "decimal(38,18)"),
        (1700, numeric(12, 2), "numeric(12,2)", "decimal(12,2)"),
        (1700, numeric(38, 9), "numeric(38,9)", "decimal(38,9)"),
        (1700, numeric(10, 0), "numeric(10,0)", "decimal(10,0)"),
        (1700, numeric(5, -2), "numeric(5,-2)", "decimal(7,0)"),
        (1700, numeric(2, 5), "numeric(2,5)", "decimal(5,5)"),
        (1700, numeric(50, 10), "numeric(50,10)", "decimal(38,10)"),
        (16, -1, "boolean", "boolean"),
        (25, -1, "text", "string"),
        (1043, 14, "character varying(10)", "string"),
        (1043, -1, "character varying", "string"),
        (1042, 5, "character(1)", "string"),
        (1082, -1, "date", "date"),
        (1083, -1, "time without time zone", "string"),
        (1266, 3, "time(3) with time zone", "string"),
        (1114, -1, "timestamp without time zone", "timestamp_ntz"),
        (1114, 6, "timestamp(6) without time zone", "timestamp_ntz"),
        (1184, -1, "timestamp with time zone", "timestamp"),
        (1184, 3, "timestamp(3) with time zone", "timestamp"),
        (1186, -1, "interval", "string"),
        (17, -1, "bytea", "binary"),
        (114, -1, "json", "string"),
        (3802, -1, "jsonb", "string"),
        (2950, -1, "uuid", "string"),
        (1007, -1, "integer[]", "array<int>"),
        (1016, -1, "bigint[]", "array<bigint>"),
        (1022, -1, "double precision[]", "array<double>"),
        (1000, -1, "boolean[]", "array<boolean>"),
        (1231, numeric(8, 3), "numeric(8,3)[]", "array<decimal(8,3)>"),
        (1009, -1, "text[]", "string"),
        (1185, -1, "timestamp with time zone[]", "string"),
    ],
)
def test_built_in_types(oid, typmod, name, spark):
    assert column_type(oid, typmod) == (name, spark)


def test_types_named_by_typeinfo_messages():
    """Enums and other user types are strings under their qualified name; a domain is
    named by its base type (what TypeInfo sends), whose Spark type it reads as."""
    names = {
        50001: ("public", "mood"),
        50002: ("pg_catalog", "numeric"),
        50003: ("pg_catalog", "_int4"),
        50004: ("public", "_mood"),
        50005: ("pg_catalog", "int8"),
        50006: ("shop", "money2"),
    }
    assert column_type(50001, -1, names) == ("public.mood", "string")
    assert column_type(50002, -1, names) == ("numeric", "decimal(38,18)")
    assert column_type(50003, -1, names) == ("integer[]", "array<int>")
    assert column_type(50004, -1, names) == ("public._mood", "string")
    assert column_type(50005, -1, names) == ("bigint", "bigint")
    assert column_type(50006, -1, names) == ("shop.money2", "string")
    assert column_type(50007, -1, names) == ("unknown (type OID 50007)", "string")


def test_numeric_modifiers():
    assert numeric_modifier(numeric(12, 2)) == (12, 2)
    assert numeric_modifier(numeric(5, -2)) == (5, -2)
    assert numeric_modifier(numeric(1000, 1000)) == (1000, 1000)
    assert decimal_type(40, 45) == "decimal(38,38)"
    assert decimal_type(38, -5) == "decimal(38,0)"


def test_a_relation_message_carries_each_columns_modifier():
    body = (
        b"R"
        + (16384).to_bytes(4, "big")
        + b"public\0t\0d"
        + (2).to_bytes(2, "big")
        + b"\x01id\0"
        + (23).to_bytes(4, "big")
        + (-1).to_bytes(4, "big", signed=True)
        + b"\x00amount\0"
        + (1700).to_bytes(4, "big")
        + numeric(12, 2).to_bytes(4, "big", signed=True)
    )
    msg = p.decode_message(body)
    assert msg.columns == (p.Column("id", 23, True, -1), p.Column("amount", 1700, False, numeric(12, 2)))
