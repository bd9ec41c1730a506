"""An Iceberg writer for the race test: publishes part files of one to three transactions
and commits each, until the table holds tx_seq 0..LAST.

    python -m tests.sinks.parquet.iceberg.commit_loop CHANGEFEED_DIR APP_ID LAST

Two of them at once, each its own queue, on one local changefeed and its SQLite catalog:
names carry the process id, and a range the other writer committed first is skipped (a
busy catalog is tried again, as ``run`` would). Prints ``committed FIRST LAST`` after each
commit.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from olr_buffer.sinks.parquet.iceberg import IcebergChainError, IcebergChangefeed, IcebergPart, IcebergSettings
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA, part_name
from olr_buffer.store import StoreUnreachableError, open_store
from tests.sinks.parquet.delta.parts import rows, write_local


def main() -> None:
    root, app, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = open_store(root)
    tmp = Path(tempfile.mkdtemp(prefix="iceberg-loop-"))
    table = None
    while table is None:
        try:
            table = IcebergChangefeed(store, ARROW_SCHEMA, IcebergSettings(), app_id=app, local_root=root)
        except StoreUnreachableError:
            continue  # the other one holds the catalog: again
    while (first := table.next_tx_seq) <= last:
        end = min(first + first % 3, last)
        name = f"{part_name(first, end)}.{os.getpid()}"
        local = tmp / name
        write_local(local, rows(first, end))
        part = IcebergPart.from_local(local, name, first, end)
        store.create_from_file(name, local)
        try:
            table.commit([part])
        except IcebergChainError:
            continue  # the other writer committed this range first
        except StoreUnreachableError:
            continue  # the catalog was busy: look again (it may have gone in)
        print("committed", first, end, flush=True)


if __name__ == "__main__":
    main()
