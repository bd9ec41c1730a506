"""The service of ``olr-buffer run olr://...`` in a thread of the test process, and what
the tests read of its changefeed and queue."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pyarrow.parquet as pq

from olr_buffer.runtime import PipelineOptions, run_service
from tests.cli.conftest import status_json
from tests.contract_model import changefeed_files, load_changefeed


@contextmanager
def service(uri: str, tmp: Path, *, processes: bool = False, **source_options):
    """``run_service`` of ``uri`` into ``tmp/q`` and ``tmp/cf`` in a thread; stopped (and
    its error raised) at the end of the block. Yields a dict that holds ``error``."""
    stop = threading.Event()
    box: dict = {}
    opts = PipelineOptions(flush_seconds=0.05, checkpoint_seconds=0.5, reader_processes=processes, durable=False)

    def body():
        try:
            box["summary"] = run_service(
                uri, str(tmp / "q"), str(tmp / "cf"), opts, stop, source_options=source_options
            )
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc

    t = threading.Thread(target=body, name="service", daemon=True)
    t.start()
    box["thread"] = t
    try:
        yield box
    finally:
        stop.set()
        t.join(60)
        assert not t.is_alive(), "the service did not stop"
    if "error" in box and not box.get("error_expected"):
        raise box["error"]


def transactions(cf: Path) -> int:
    """The number of transactions the changefeed holds (from the file names)."""
    try:
        files = changefeed_files(cf)
    except FileNotFoundError:
        return 0
    return int(files[-1].name.split("-")[2].split(".")[0]) + 1 if files else 0


def wait_for(predicate, timeout: float = 60.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached after {timeout}s")


def wait_transactions(cf: Path, n: int, timeout: float = 60.0, box: dict | None = None) -> None:
    def done():
        if box is not None and "error" in box:
            raise box["error"]
        return transactions(cf) >= n

    wait_for(done, timeout, f"{n} transactions in {cf}")


def changefeed(cf: Path) -> list[dict]:
    return load_changefeed(cf)


def raw_column(cf: Path, column: str) -> list[str | None]:
    """A column of the changefeed as stored (JSON text unparsed), in (tx_seq, op_seq) order."""
    out = []
    for path in changefeed_files(cf):
        t = pq.read_table(path, columns=["tx_seq", "op_seq", column]).to_pylist()
        out.extend(t)
    out.sort(key=lambda r: (r["tx_seq"], r["op_seq"]))
    return [r[column] for r in out]


def status(queue: Path) -> dict:
    return status_json(queue)
