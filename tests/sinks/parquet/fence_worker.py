"""A leased changefeed writer in a process of its own, for the fencing tests.

    python -m tests.sinks.parquet.fence_worker CF QUEUE_ID --total T --per-file K
        [--format parquet|delta|iceberg] [--iceberg-catalog URI] [--ttl SECONDS]

It takes the changefeed's lease (waiting while another writer holds it), adopts the
changefeed, and publishes transactions ``next_tx_seq .. T-1`` of one deterministic stream
(transaction ``i``: xid ``x<i>``, commit SCN ``100 + i``, one row), ``K`` to a file, as a
service resuming from what the changefeed published would. Lines on stdout:
``OPEN <next_tx_seq>`` once it holds the lease, ``DONE`` at the end. An olr-buffer error:
its one line on stderr (as the CLI prints it), exit 1. With ``OLR_BUFFER_FAULT=POINT:stop``
it stops itself at that point of its first publication (SIGSTOP), to be woken by SIGCONT.
"""

from __future__ import annotations

import argparse
import sys
import time

from olr_buffer.changes import Commit, CommitKey
from olr_buffer.errors import OlrBufferError
from olr_buffer.sinks.base import ChangefeedOwner
from olr_buffer.sinks.parquet import ChangefeedWriter, IcebergSettings
from olr_buffer.store import LeaseHeldError

SCN0 = 100


def transaction(i: int) -> tuple[Commit, list]:
    scn = SCN0 + i
    row = [2, scn, 0, 1, scn, None, "O", "T", None, f"R{i}", None, f'{{"I":{i}}}', None]
    return Commit(f"x{i}", CommitKey(scn, 1, 1, i), None), row


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("cf")
    ap.add_argument("queue_id")
    ap.add_argument("--total", type=int, required=True)
    ap.add_argument("--per-file", type=int, required=True)
    ap.add_argument("--format", default="parquet")
    ap.add_argument("--iceberg-catalog")
    ap.add_argument("--ttl", type=float, default=2.0)
    args = ap.parse_args()
    deadline = time.monotonic() + 120
    try:
        while True:
            try:
                writer = ChangefeedWriter(
                    args.cf,
                    file_rows=args.per_file,
                    durable=False,
                    table_format=args.format,
                    iceberg=IcebergSettings(args.iceberg_catalog) if args.iceberg_catalog else None,
                    lease=True,
                    lease_owner=args.queue_id,
                    lease_options={"ttl": args.ttl, "skew": 0.0},
                )
                break
            except LeaseHeldError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        writer.open(ChangefeedOwner(args.queue_id, None), None, queue=args.queue_id, adopt=True)
        print(f"OPEN {writer.next_tx_seq}", flush=True)
        for i in range(writer.next_tx_seq, args.total):
            commit, row = transaction(i)
            writer.write_transaction(commit, [(1, [row])])
        writer.close()
    except OlrBufferError as exc:
        print(f"olr-buffer: error: {exc}", file=sys.stderr, flush=True)
        return 1
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
