"""What fencing costs a publication on S3 (moto's server): the store requests of one
publication, unfenced against fenced, interleaved in one process.

    python bench/fenced_publish.py [--files 200] [--kib 256]

- unfenced (a writer before fencing): one PUT of the file with ``If-None-Match: *``, one
  PUT of the manifest;
- fenced (:mod:`olr_buffer.sinks.parquet.fencing`): the file staged as a multipart
  upload (create, one part), the manifest written with ``If-Match`` naming it as pending
  (the decision), the upload completed with ``If-None-Match: *``, the manifest written
  with ``If-Match`` again.

Each round publishes one file each way, alternately, from the same local file; the
median and the 90th percentile of the milliseconds a publication takes are printed (as
JSON too). moto is a Python server keeping objects in memory: its figures bound the
client's and the protocol's cost, not S3's latency (tens of ms a request).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.benchlib import machine_info, print_json  # noqa: E402
from olr_buffer.store import open_store  # noqa: E402
from tests.s3_server import start_moto  # noqa: E402

MANIFEST = "_olr_buffer/manifest.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=200, help="publications each way")
    ap.add_argument("--kib", type=int, default=256, help="size of each file")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="fenced-publish-"))
    data = work / "part.parquet"
    data.write_bytes(os.urandom(args.kib << 10))
    server = start_moto(work)
    os.environ.update(server.env())
    try:
        store = open_store(f"s3://{server.new_bucket()}/cf")
        manifest = b'{"next_tx_seq": 0}' * 20
        etag = store.create(MANIFEST, manifest).etag or ""
        times: dict[str, list[float]] = {"unfenced": [], "fenced": []}
        for i in range(args.files):
            t0 = time.perf_counter()
            store.create_from_file(f"a/part-{i:020d}.parquet", data, token=uuid.uuid4().hex)
            store.replace(MANIFEST + ".a", manifest)
            times["unfenced"].append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            name = f"b/part-{i:020d}.parquet"
            staged = store.stage_from_file(name, data, token=uuid.uuid4().hex)
            etag = store.replace_if(MANIFEST, manifest, etag).etag or ""
            store.complete_staged(name, staged)
            etag = store.replace_if(MANIFEST, manifest, etag).etag or ""
            times["fenced"].append(time.perf_counter() - t0)
    finally:
        server.stop()
    out = {"machine": machine_info(str(work)), "files": args.files, "kib": args.kib, "ms": {}}
    for way, ts in times.items():
        ms = sorted(t * 1000 for t in ts)
        out["ms"][way] = {"median": round(statistics.median(ms), 1), "p90": round(ms[int(len(ms) * 0.9)], 1)}
        figures = out["ms"][way]
        print(f"{way:9s} median {figures['median']:6.1f} ms  p90 {figures['p90']:6.1f} ms", file=sys.stderr)
    print_json(out)


if __name__ == "__main__":
    main()
