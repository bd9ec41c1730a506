"""docs/spark.md, "On S3, and as a Delta table", names jars that fit the Spark the install
brings: its row of the versions table has the Scala and Hadoop versions of the jars that
pyspark ships, the S3 example asks for that hadoop-aws, the command it gives to find the
Hadoop version prints it, and every delta-spark artifact of the page is built for the
Scala version its Spark row says. No Spark session: the versions are read from the jars."""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def installed() -> tuple[str, str, str]:
    """(Spark major.minor, Scala binary version, Hadoop version) of the installed pyspark."""
    import pyspark

    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    (scala,) = [re.search(r"scala-library-(\d+\.\d+)\.", p).group(1) for p in glob.glob(f"{jars}/scala-library-*.jar")]
    (hadoop,) = [
        re.search(r"hadoop-client-api-([\d.]+)\.jar", p).group(1) for p in glob.glob(f"{jars}/hadoop-client-api-*.jar")
    ]
    return ".".join(pyspark.__version__.split(".")[:2]), scala, hadoop


def section() -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index("## On S3, and as a Delta table")
    return text[start : text.index("\n## ", start + 1)]


def versions_table() -> dict[str, list[str]]:
    """Spark version -> the other cells of its row."""
    rows = [line for line in section().splitlines() if re.match(r"\| \d\.\d", line)]
    return {row.split("|")[1].split()[0]: [c.strip() for c in row.split("|")[2:-1]] for row in rows}


def test_the_installed_spark_has_its_row_with_the_jars_it_ships():
    spark, scala, hadoop = installed()
    table = versions_table()
    assert spark in table, f"no row for Spark {spark}: {sorted(table)}"
    row_scala, row_hadoop_aws, _delta = table[spark]
    assert row_scala == scala
    assert row_hadoop_aws == f"`org.apache.hadoop:hadoop-aws:{hadoop}`"
    # the S3 example asks for it
    assert f'.config("spark.jars.packages", "org.apache.hadoop:hadoop-aws:{hadoop}")' in section()


def test_spark_3_5_has_its_scala_and_hadoop():
    row = versions_table()["3.5"]
    assert row[:2] == ["2.12", "`org.apache.hadoop:hadoop-aws:3.3.4`"] and "delta-spark_2.12:3." in row[2]


def test_every_delta_artifact_is_built_for_the_scala_of_its_spark():
    table = versions_table()
    for spark, (scala, _aws, delta) in table.items():
        for artifact in re.findall(r"io\.delta:delta-spark_([\d._]+):", delta):
            assert artifact.endswith(scala), (spark, artifact)
            if artifact.count("_"):  # delta-spark_<spark>_<scala>: built for that Spark
                assert artifact.split("_")[0] == spark, (spark, artifact)
    for artifact in re.findall(r"io\.delta:delta-spark_([\d._]+):(\d)", section()):
        # Delta 3.x is Spark 3.5's, Scala 2.12; Delta 4.x Spark 4's, Scala 2.13
        assert artifact[0].endswith("2.12" if artifact[1] == "3" else "2.13"), artifact


def test_the_command_that_finds_the_hadoop_version_prints_it():
    spark, _scala, hadoop = installed()
    command = re.search(r'```\npython -c "(.*?)"\n```', section()).group(1)
    out = subprocess.run([sys.executable, "-c", command], capture_output=True, text=True, check=True).stdout
    assert f"hadoop-client-api-{hadoop}.jar" in out and out.startswith(spark)
