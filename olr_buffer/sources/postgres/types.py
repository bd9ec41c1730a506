"""PostgreSQL column types: their names, and the Spark type each one's values read as.

A Relation message gives each column's type OID and modifier (``atttypmod``); a TypeInfo
message the name of a type that is not built in (for a domain: its base type's name). From
them :func:`column_type` gives the type as ``format_type`` writes it (``numeric(12,2)``,
``timestamp with time zone``, ``integer[]``) and its Spark type (docs/postgresql.md, "Types
in Spark"): the schema documents of the changefeed hold both.
"""

from __future__ import annotations

# Spark's JDBC reader takes an unconstrained numeric as decimal(38,18): so does olr-buffer
UNCONSTRAINED_NUMERIC = "decimal(38,18)"
MAX_PRECISION = 38  # Spark's decimals

# built-in types: OID -> (internal name, format_type's name, Spark type); "numeric" is
# decided by its modifier
_BUILTIN: dict[int, tuple[str, str, str]] = {
    16: ("bool", "boolean", "boolean"),
    17: ("bytea", "bytea", "binary"),
    18: ("char", '"char"', "string"),
    19: ("name", "name", "string"),
    20: ("int8", "bigint", "bigint"),
    21: ("int2", "smallint", "smallint"),
    23: ("int4", "integer", "int"),
    25: ("text", "text", "string"),
    26: ("oid", "oid", "bigint"),  # unsigned 32 bits: beyond int
    114: ("json", "json", "string"),
    142: ("xml", "xml", "string"),
    650: ("cidr", "cidr", "string"),
    700: ("float4", "real", "float"),
    701: ("float8", "double precision", "double"),
    774: ("macaddr8", "macaddr8", "string"),
    790: ("money", "money", "string"),  # the server's text is formatted by lc_monetary
    829: ("macaddr", "macaddr", "string"),
    869: ("inet", "inet", "string"),
    1042: ("bpchar", "character", "string"),
    1043: ("varchar", "character varying", "string"),
    1082: ("date", "date", "date"),
    1083: ("time", "time without time zone", "string"),  # Spark has no time of day
    1114: ("timestamp", "timestamp without time zone", "timestamp_ntz"),
    1184: ("timestamptz", "timestamp with time zone", "timestamp"),
    1186: ("interval", "interval", "string"),  # months, days and microseconds: no Spark interval holds all three
    1266: ("timetz", "time with time zone", "string"),
    1560: ("bit", "bit", "string"),
    1562: ("varbit", "bit varying", "string"),
    1700: ("numeric", "numeric", UNCONSTRAINED_NUMERIC),
    2950: ("uuid", "uuid", "string"),
    3614: ("tsvector", "tsvector", "string"),
    3615: ("tsquery", "tsquery", "string"),
    3802: ("jsonb", "jsonb", "string"),
}
# built-in array types: OID -> element OID
_ARRAYS: dict[int, int] = {
    199: 114,
    143: 142,
    651: 650,
    775: 774,
    791: 790,
    1000: 16,
    1001: 17,
    1002: 18,
    1003: 19,
    1005: 21,
    1007: 23,
    1009: 25,
    1014: 1042,
    1015: 1043,
    1016: 20,
    1021: 700,
    1022: 701,
    1028: 26,
    1040: 829,
    1041: 869,
    1115: 1114,
    1182: 1082,
    1183: 1083,
    1185: 1184,
    1187: 1186,
    1231: 1700,
    1270: 1266,
    1561: 1560,
    1563: 1562,
    2951: 2950,
    3643: 3614,
    3645: 3615,
    3807: 3802,
}
_BY_NAME = {internal: oid for oid, (internal, _, _) in _BUILTIN.items()}
# element types whose arrays read as Spark arrays (their text form never quotes an element)
_ARRAY_ELEMENTS = frozenset(("boolean", "smallint", "int", "bigint", "float", "double"))
VARHDRSZ = 4


def is_builtin(oid: int) -> bool:
    """Whether :func:`column_type` names the type of ``oid`` without a TypeInfo message."""
    return oid in _BUILTIN or oid in _ARRAYS


def column_type(oid: int, typmod: int, names: dict[int, tuple[str, str]] | None = None) -> tuple[str, str]:
    """``(type, spark)`` of a column of type ``oid`` with modifier ``typmod`` (-1: none);
    ``names``: OID -> (schema, name) of the types that are not built in, from TypeInfo
    messages (a domain has its base type's name there, which decides its Spark type)."""
    if oid in _ARRAYS:
        element, spark = _scalar(_ARRAYS[oid], typmod)
        return f"{element}[]", _array(spark)
    if oid in _BUILTIN:
        return _scalar(oid, typmod)
    schema, name = (names or {}).get(oid, ("", ""))
    if not name:
        return f"unknown (type OID {oid})", "string"
    if schema == "pg_catalog":
        if name in _BY_NAME:
            return _scalar(_BY_NAME[name], -1)  # a domain over a built-in type: its modifier is the domain's
        if name.startswith("_") and name[1:] in _BY_NAME:
            element, spark = _scalar(_BY_NAME[name[1:]], -1)
            return f"{element}[]", _array(spark)
        return name, "string"
    return f"{schema}.{name}", "string"  # enums, composite and range types, extensions' types


def _scalar(oid: int, typmod: int) -> tuple[str, str]:
    _, name, spark = _BUILTIN[oid]
    if typmod < 0:
        return name, spark
    if oid == 1700:
        precision, scale = numeric_modifier(typmod)
        return f"numeric({precision},{scale})", decimal_type(precision, scale)
    if oid in (1042, 1043, 1560, 1562):  # character(n), character varying(n), bit(n)
        n = typmod - VARHDRSZ if oid in (1042, 1043) else typmod
        return f"{name}({n})", spark
    if oid in (1083, 1114, 1184, 1266):  # time and timestamp (p)
        word, _, rest = name.partition(" ")
        return f"{word}({typmod}) {rest}", spark
    return name, spark


def numeric_modifier(typmod: int) -> tuple[int, int]:
    """``(precision, scale)`` of a numeric's modifier (a negative scale: PostgreSQL 15+)."""
    value = typmod - VARHDRSZ
    return (value >> 16) & 0xFFFF, ((value & 0x7FF) ^ 1024) - 1024


def decimal_type(precision: int, scale: int) -> str:
    """The Spark decimal that holds every value of ``numeric(precision, scale)``, or as
    many as a decimal of 38 digits can: a negative scale rounds to tens, hundreds ...
    (``numeric(5,-2)`` holds 7-digit integers); a scale above the precision has leading
    zeros (``numeric(2,5)`` holds 0.00099)."""
    if scale < 0:
        return f"decimal({min(precision - scale, MAX_PRECISION)},0)"
    digits = max(precision, scale)
    if digits > MAX_PRECISION:
        return f"decimal({MAX_PRECISION},{min(scale, MAX_PRECISION)})"
    return f"decimal({digits},{scale})"


def _array(element_spark: str) -> str:
    if element_spark in _ARRAY_ELEMENTS or element_spark.startswith("decimal("):
        return f"array<{element_spark}>"
    return "string"  # the server's text form: its elements may be quoted
