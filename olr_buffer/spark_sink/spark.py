"""PySpark helpers to read the changefeed. PySpark is imported only when these are used."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType


def changefeed_schema() -> "StructType":
    """The changefeed's columns (contract §2) as a Spark ``StructType``."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from .schema import ARROW_SCHEMA

    spark_type = {"int64": LongType(), "int32": IntegerType(), "string": StringType()}
    return StructType(
        [StructField(f.name, spark_type[str(f.type)], nullable=f.nullable) for f in ARROW_SCHEMA]
    )


def read_changefeed(spark: "SparkSession", path: str) -> "DataFrame":
    """The whole changefeed as a DataFrame (Spark skips ``_olr_buffer/`` and temporary files)."""
    return spark.read.schema(changefeed_schema()).parquet(path)


def __getattr__(name: str):  # CHANGEFEED_SCHEMA, built on first use
    if name == "CHANGEFEED_SCHEMA":
        return changefeed_schema()
    raise AttributeError(name)
