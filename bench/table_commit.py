"""The cost of one table commit of a changefeed: a Delta commit and an Iceberg snapshot,
each adding one published part file, locally and on S3 (moto's server on 127.0.0.1).

    python bench/table_commit.py [--transactions 4000] [--rows 1000]

The part files are written once (a simulated input replayed into a plain changefeed,
about ``--rows`` rows a file), copied to a fresh local changefeed and a fresh bucket for each case, then
committed one by one with the table's committer (``DeltaChangefeed.commit``,
``IcebergChangefeed.commit``), in this process; the median wall and CPU time of a commit
is kept (the first commit, which creates the table, is left out). The Iceberg catalog is
the SQLite file beside the changefeed, and a SQLite file in the work folder on S3.

Run by hand; the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.benchlib import machine_info, print_json  # noqa: E402
from tests.s3_server import start_moto  # noqa: E402


def write_parts(work: Path, transactions: int, rows: int) -> list[str]:
    """Part files of about ``rows`` rows each: a simulated input replayed into a plain
    changefeed ``work/parts``."""
    from olr_buffer.runtime import PipelineOptions, replay
    from olr_buffer.simulate import simulate

    simulate(work / "input", threads=2, transactions=transactions, seed=7)
    replay(
        str(work / "input"), str(work / "queue"), str(work / "parts"), PipelineOptions(file_rows=rows, durable=False)
    )
    return sorted(p.name for p in (work / "parts").glob("part-*.parquet"))


def committer(kind: str, uri: str, catalog: str | None):
    from olr_buffer.sinks.parquet.delta import DeltaChangefeed
    from olr_buffer.sinks.parquet.iceberg import IcebergChangefeed, IcebergSettings
    from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA
    from olr_buffer.store import open_store

    store = open_store(uri)
    if kind == "delta":
        return store, DeltaChangefeed(store, ARROW_SCHEMA, app_id="bench")
    local = None if uri.startswith("s3://") else uri
    return store, IcebergChangefeed(store, ARROW_SCHEMA, IcebergSettings(catalog), app_id="bench", local_root=local)


def part(kind: str, store, name: str):
    from olr_buffer.sinks.parquet.delta import PartFile
    from olr_buffer.sinks.parquet.iceberg import IcebergPart
    from olr_buffer.sinks.parquet.schema import parse_part_name

    first, last = parse_part_name(name)
    cls = PartFile if kind == "delta" else IcebergPart
    return cls.from_store(store, name, first, last)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transactions", type=int, default=4000, help="transactions of the simulated input")
    ap.add_argument("--rows", type=int, default=1000, help="rows per part file, about")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="table-commit-"))
    names = write_parts(work, args.transactions, args.rows)
    server = start_moto(work)
    os.environ.update(server.env())
    results: dict = {"machine": machine_info(str(work)), "files": len(names), "rows": args.rows, "cases": []}
    try:
        for where in ("local", "s3 (moto)"):
            for kind in ("delta", "iceberg"):
                catalog = None
                if where == "local":
                    uri = str(work / f"cf-{kind}")
                    shutil.copytree(work / "parts", uri, ignore=shutil.ignore_patterns("_*"))
                else:
                    uri = f"s3://{server.new_bucket()}/cf"
                    catalog = f"sqlite:///{work / f'catalog-{kind}.db'}"
                    client = server.client()
                    bucket, prefix = uri[5:].split("/", 1)
                    for name in names:
                        client.upload_file(str(work / "parts" / name), bucket, f"{prefix}/{name}")
                store, table = committer(kind, uri, catalog)
                walls, cpus = [], []
                for name in names:
                    p = part(kind, store, name)
                    w, c = time.perf_counter(), time.process_time()
                    table.commit([p])
                    walls.append(time.perf_counter() - w)
                    cpus.append(time.process_time() - c)
                row = {
                    "changefeed": where,
                    "table_format": kind,
                    "commit_ms": round(1000 * statistics.median(walls[1:]), 1),
                    "commit_cpu_ms": round(1000 * statistics.median(cpus[1:]), 1),
                    "last_commit_ms": round(1000 * walls[-1], 1),
                }
                results["cases"].append(row)
                print(
                    f"{where:10s} {kind:8s} commit {row['commit_ms']:7.1f} ms (CPU {row['commit_cpu_ms']:.1f} ms), "
                    f"the {len(names)}th {row['last_commit_ms']:.1f} ms",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        server.stop()
    print_json(results)


if __name__ == "__main__":
    main()
