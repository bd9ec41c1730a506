"""PUT throughput of Parquet-sized objects: the local store against S3 on moto's server.

    python bench/store_put.py [--sizes 1,8,32,128] [--mib-per-size 256] [--repeat 3]

Each object is created the way the changefeed writer publishes a file: from a complete
local file it has just written, with create-if-absent (local: fsync, a hard link into
place, fsync of the folder, no copy; S3: one PUT with If-None-Match, a multipart upload
above ``--multipart-mib``); only the publication is timed, not the writing of the file.
The local store is also measured from bytes (written, fsynced and linked). moto's
server runs here, on 127.0.0.1, started by this program: it is a Python server that keeps
objects in memory, so its figures bound the client's and the protocol's cost, not S3's.

Run by hand; the figures go to docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.benchlib import machine_busy, machine_info, print_json, wait_quiet  # noqa: E402
from olr_buffer.store import open_store  # noqa: E402
from olr_buffer.store.local import LocalStore  # noqa: E402
from olr_buffer.store.s3 import S3Store  # noqa: E402
from tests.s3_server import start_moto  # noqa: E402


def measure(put, count: int) -> float:
    """Seconds for ``count`` calls of ``put(i)``, each of which returns the seconds of its
    timed part."""
    return sum(put(i) for i in range(count))


def timed(call) -> float:
    t = time.perf_counter()
    call()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1,8,32,128", help="object sizes in MiB")
    ap.add_argument("--mib-per-size", type=int, default=256, help="MiB written per size and store")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each case (the median is kept)")
    ap.add_argument("--multipart-mib", type=int, default=5 * 1024, help="S3: multipart upload above this size")
    ap.add_argument("--work", default=None, help="folder for the local store and the source files")
    ap.add_argument(
        "--max-wait",
        type=float,
        default=30.0,
        help="seconds to wait before each run for the machine to be quiet (then measured anyway)",
    )
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="store-put-", dir=args.work))
    server = start_moto(work)
    os.environ.update(server.env())
    results: dict = {"machine": machine_info(str(work)), "cases": []}
    try:
        for size in sizes:
            src = work / f"src-{size}.parquet"
            data = os.urandom(size << 20)  # incompressible, as a zstd Parquet file nearly is
            src.write_bytes(data)
            count = max(2, args.mib_per_size // size)
            cases = {
                "local, from a file just written": lambda r, data=data: _local_file(work, r, data),
                "local, from bytes (write, fsync, link)": lambda r, data=data: _local_bytes(work, r, data),
                "s3 (moto), from file": lambda r, src=src: _s3_file(server, r, src, args.multipart_mib),
            }
            for name, make in cases.items():
                runs: list[float] = []
                busy: list[float] = []
                for r in range(args.repeat):
                    put = make(f"{size}-{r}-{len(runs)}")
                    wait_quiet(max_wait=args.max_wait, quiet=True)
                    busy.append(machine_busy(0.5))
                    runs.append(measure(put, count))
                seconds = statistics.median(runs)
                row = {
                    "case": name,
                    "object_mib": size,
                    "objects": count,
                    "seconds": round(seconds, 3),
                    "mib_per_s": round(count * size / seconds, 1),
                    "objects_per_s": round(count / seconds, 1),
                    "runs": [round(x, 3) for x in runs],
                    "cpu_busy_before": [round(b, 2) for b in busy],
                }
                results["cases"].append(row)
                print(
                    f"{name:40s} {size:4d} MiB x {count:4d}: {row['mib_per_s']:8.1f} MiB/s "
                    f"{row['objects_per_s']:7.1f} objects/s",
                    file=sys.stderr,
                    flush=True,
                )
            src.unlink()
    finally:
        server.stop()
    print_json(results)


def _local_file(work: Path, run: str, data: bytes):
    store = LocalStore(work / f"local-file-{run}")
    (work / f"local-file-{run}").mkdir()

    def put(i: int) -> float:
        # the writer's temporary file, just written (in the page cache, not yet on disk);
        # timed: what publishing it costs (fsync, link, fsync of the folder)
        tmp = work / f"local-file-{run}" / f".tmp-{i}"
        tmp.write_bytes(data)
        seconds = timed(lambda: store.create_from_file(f"part-{i:06d}.parquet", tmp))
        tmp.unlink()
        return seconds

    return put


def _local_bytes(work: Path, run: str, data: bytes):
    store = LocalStore(work / f"local-bytes-{run}")
    return lambda i: timed(lambda: store.create(f"part-{i:06d}.parquet", data))


def _s3_file(server, run: str, src: Path, multipart_mib: int):
    bucket = server.new_bucket()
    store = open_store(f"s3://{bucket}/cf")
    assert isinstance(store, S3Store)
    store.multipart_threshold = min(store.multipart_threshold, multipart_mib << 20)

    return lambda i: timed(lambda: store.create_from_file(f"part-{i:06d}.parquet", src))


if __name__ == "__main__":
    main()
