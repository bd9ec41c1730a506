"""A Delta writer for the kill and race tests: publishes part files of one to three
transactions and commits each, until the table holds tx_seq 0..LAST.

    python -m tests.sinks.parquet.delta.commit_loop STORE_URI APP_ID LAST [race]

On start it does what a restarted writer does: clears the store's staging, lists the
published part files, and commits those the table lacks. With ``race`` (two of them at
once, each its own queue), names carry the process id and a range another writer took
first is skipped. Prints ``committed FIRST LAST`` after each commit.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from olr_buffer.faults import fault_point
from olr_buffer.sinks.parquet.delta import DeltaChainError, DeltaChangefeed, PartFile
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA, parse_part_name, part_name
from olr_buffer.store import open_store
from tests.sinks.parquet.delta.parts import publish


def main() -> None:
    uri, app, last = sys.argv[1], sys.argv[2], int(sys.argv[3])
    race = len(sys.argv) > 4 and sys.argv[4] == "race"
    store = open_store(uri)
    tmp = Path(tempfile.mkdtemp(prefix="commit-loop-"))
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=app)
    if not race:
        store.clear_staging()
        listed = [
            PartFile.from_store(store, o.name, *rng)
            for o in store.list("part-")
            if (rng := parse_part_name(o.name)) is not None
        ]
        pending = dc.uncommitted(listed)
        if pending:
            dc.commit(pending)
            print("recovered", pending[0].first_tx_seq, pending[-1].last_tx_seq, flush=True)
    while (first := dc.next_tx_seq) <= last:
        end = min(first + first % 3, last)
        name = f"{part_name(first, end)}.{os.getpid()}" if race else part_name(first, end)
        part = publish(store, tmp, first, end, name=name)
        fault_point("after_part_published")
        try:
            dc.commit([part])
        except DeltaChainError:
            if not race:
                raise
            continue  # the other writer committed this range first
        print("committed", first, end, flush=True)


if __name__ == "__main__":
    main()
