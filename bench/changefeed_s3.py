"""Replay throughput with the changefeed on S3 (moto's server) side by side with a local
changefeed, each as plain Parquet, as a Delta table and as an Iceberg table.

    python bench/changefeed_s3.py [--transactions 20000] [--file-rows 100000] [--repeat 3]

Each case is one ``olr-buffer replay`` from scratch (empty queue and changefeed) of the
same simulated input, in a child process (wall time, CPU, peak RSS); the median of
``--repeat`` runs is kept. The queue is local in every case; only the changefeed moves.
``--file-rows`` sets how many files are published (one PUT each on S3, one Delta commit
each with ``--table-format delta``, one Iceberg snapshot each with ``--table-format
iceberg``: its catalog a SQLite file beside a local changefeed, and in the run's folder
for one on S3). ``commit_ms`` is what a table format adds a file: its time less plain
Parquet's in the same place, over the files published. moto's server runs here, on 127.0.0.1, started by
this program: a Python server that keeps objects in memory, so the S3 figures bound the
client's and the protocol's cost, not S3's latency (tens of ms a request).

Run by hand; the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.benchlib import (  # noqa: E402
    count_lines,
    fresh_dir,
    machine_info,
    prepare_input,
    print_json,
    run_measured,
    wait_quiet,
    warm_cache,
)
from tests.s3_server import start_moto  # noqa: E402


def replay_cmd(input_dir: str, work: str, changefeed: str, table_format: str, file_rows: int) -> list[str]:
    catalog = []
    if table_format == "iceberg" and changefeed.startswith("s3://"):
        catalog = ["--iceberg-catalog", f"sqlite:///{os.path.join(os.path.abspath(work), 'catalog.db')}"]
    return [
        sys.executable,
        "-m",
        "olr_buffer.cli",
        "replay",
        input_dir,
        "--queue",
        os.path.join(work, "queue"),
        "--changefeed",
        changefeed,
        "--table-format",
        table_format,
        "--file-rows",
        str(file_rows),
        *catalog,
        "--json",
        "--no-progress",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=20_000)
    ap.add_argument("--file-rows", type=int, default=100_000, help="rows per published file")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case (the median is kept)")
    ap.add_argument("--work", default=None, help="folder for the input, queues and local changefeeds")
    ap.add_argument(
        "--max-wait",
        type=float,
        default=60.0,
        help="seconds to wait before each run for the machine to be quiet (then measured anyway)",
    )
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="changefeed-s3-"))
    input_dir = str(work / "input")
    desc = prepare_input(input_dir, transactions=args.transactions)
    records = count_lines(input_dir)
    server = start_moto(work)
    env = {**os.environ, **server.env()}
    results: dict = {"machine": machine_info(str(work)), "input": desc, "file_rows": args.file_rows, "cases": []}
    try:
        for where in ("local", "s3 (moto)"):
            for table_format in ("parquet", "delta", "iceberg"):
                runs = []
                for r in range(args.repeat):
                    run_dir = str(work / "runs" / f"{where[:5]}-{table_format}-{r}")
                    fresh_dir(run_dir)
                    if where == "local":
                        changefeed = os.path.join(run_dir, "changefeed")
                    else:
                        os.environ.update(server.env())
                        changefeed = f"s3://{server.new_bucket()}/changefeed"
                    warm_cache(input_dir)
                    wait_quiet(max_wait=args.max_wait, quiet=True)
                    m = run_measured(
                        replay_cmd(input_dir, run_dir, changefeed, table_format, args.file_rows), env=env
                    ).check()
                    summary = m.last_json()
                    runs.append(
                        {
                            "wall": m.wall,
                            "cpu": m.user + m.sys,
                            "peak_rss_mib": m.peak_rss / 2**20,
                            "files": summary["files_published"],
                            "other_cpu": m.other_cpu,
                        }
                    )
                wall = statistics.median(r["wall"] for r in runs)
                row = {
                    "changefeed": where,
                    "table_format": table_format,
                    "seconds": round(wall, 2),
                    "records_per_s": round(records / wall),
                    "files": runs[0]["files"],
                    "cpu_seconds": round(statistics.median(r["cpu"] for r in runs), 2),
                    "peak_rss_mib": round(max(r["peak_rss_mib"] for r in runs)),
                    "runs": [round(r["wall"], 2) for r in runs],
                    "other_cpu": [round(r["other_cpu"], 1) for r in runs],
                }
                plain = next(
                    (c for c in results["cases"] if c["changefeed"] == where and c["table_format"] == "parquet"), None
                )
                if plain is not None and table_format != "parquet" and row["files"]:
                    row["commit_ms"] = round(1000 * (row["seconds"] - plain["seconds"]) / row["files"], 1)
                results["cases"].append(row)
                print(
                    f"{where:10s} {table_format:8s} {row['seconds']:7.2f} s {row['records_per_s']:>9,} records/s "
                    f"{row['files']:4d} files  cpu {row['cpu_seconds']:.1f} s  rss {row['peak_rss_mib']} MiB"
                    + (f"  commit {row['commit_ms']} ms" if "commit_ms" in row else ""),
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        server.stop()
    print_json(results)


if __name__ == "__main__":
    main()
