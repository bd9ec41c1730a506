"""``make demo``: simulate a RAC workload, replay it through olr-buffer, read it with Spark.

Usage: ``python -m olr_buffer.demo [DIR]`` (default ``demo-data``). DIR/input, DIR/queue
and DIR/changefeed are recreated on every run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def _banner(text: str) -> None:
    print(f"\n=== {text}", flush=True)


def _olr_buffer(*args: str) -> None:
    cmd = [sys.executable, "-m", "olr_buffer.cli", *args]
    print("$ olr-buffer " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True)


def simulate_and_replay(root: str, transactions: int = 5000) -> str:
    """Steps 1 and 2: simulate a workload into ROOT/input, replay it (twice) into
    ROOT/changefeed; the changefeed's path."""
    inp, queue, cf = (os.path.join(root, d) for d in ("input", "queue", "changefeed"))
    for d in (inp, queue, cf):
        shutil.rmtree(d, ignore_errors=True)

    _banner("1. simulate a 3-thread RAC workload (redo-op log files)")
    _olr_buffer("simulate", inp, "--threads", "3", "--transactions", str(transactions), "--seed", "42")
    print("files:", ", ".join(sorted(os.listdir(inp))[:6]), "...")

    _banner("2. replay it through the disk-backed queue into the changefeed")
    _olr_buffer("replay", inp, "--queue", queue, "--changefeed", cf)
    print(
        "(replay's records are simulate's begins, rows and ends: the lwn heartbeats, which belong to no "
        "transaction, are not counted; it published the transactions simulate said the changefeed must hold)"
    )
    _olr_buffer("replay", inp, "--queue", queue, "--changefeed", cf)
    print("(the second replay published nothing: exactly once)")
    return cf


def main(root: str = "demo-data") -> None:
    cf = simulate_and_replay(root)

    _banner("3. read the changefeed with PySpark")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from olr_buffer.spark import read_changefeed

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("olr-buffer-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = read_changefeed(spark, cf)
        df.printSchema()
        print("first rows, in changefeed order:")
        df.orderBy("tx_seq", "op_seq").select(
            "tx_seq", "op_seq", "c_scn", "xid", "op", "thread", "owner", "table", "rid", "after"
        ).show(8, truncate=40)
        print("rows by operation:")
        df.groupBy("op").count().orderBy("op").show()
        print("rows by table:")
        df.groupBy("owner", "table").count().orderBy(F.desc("count")).show(10, truncate=False)
        n_tx = df.select("tx_seq").distinct().count()
        bounds = df.agg(F.min("tx_seq"), F.max("tx_seq")).first()
        print(
            f"{df.count():,} rows in {n_tx:,} transactions, tx_seq {bounds[0]}..{bounds[1]} "
            f"(gapless: {bounds[1] - bounds[0] + 1 == n_tx})"
        )
        multi = df.groupBy("tx_seq").agg(F.countDistinct("thread").alias("threads")).filter("threads > 1").count()
        print(f"{multi:,} transactions have rows from more than one RAC thread")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:2])
