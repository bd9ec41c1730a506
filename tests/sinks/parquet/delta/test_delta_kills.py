"""Real writer processes on a Delta changefeed (local and S3): SIGKILLed between publishing
a file and committing it, just before and just after a commit, and at random moments,
then restarted; and two writers committing to one table at once. Every transaction ends
up in the table exactly once, read back by deltalake."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from olr_buffer.sinks.parquet.delta import DeltaChangefeed
from olr_buffer.sinks.parquet.schema import ARROW_SCHEMA, parse_part_name
from olr_buffer.store import open_store
from tests.sinks.parquet.delta.test_delta_table import expected, tx_seqs_read

ROOT = Path(__file__).resolve().parents[4]
APP = "queue-kills"
LAST = 24

pytestmark = pytest.mark.slow


def run(uri: str, *args: str, fault: str | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    env.pop("OLR_BUFFER_FAULT", None)
    if fault:
        env["OLR_BUFFER_FAULT"] = fault
    return subprocess.Popen(
        [sys.executable, "-m", "tests.sinks.parquet.delta.commit_loop", uri, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def test_killed_writers_commit_every_transaction_once(store_uri):
    kills = ["after_part_published:2", "after_delta_commit:2", "before_delta_commit:3", "after_part_published:1"]
    for fault in kills:
        code, out, err = finish(run(store_uri, APP, str(LAST), fault=fault))
        assert code == -signal.SIGKILL, (fault, code, err[-2000:])
    # and killed at a moment the test does not choose: after its third commit line
    proc = run(store_uri, APP, str(LAST))
    seen = 0
    for line in proc.stdout:
        seen += line.startswith("committed")
        if seen == 3:
            proc.send_signal(signal.SIGKILL)
            break
    finish(proc)
    code, out, err = finish(run(store_uri, APP, str(LAST)))
    assert code == 0, err[-2000:]
    store = open_store(store_uri)
    assert tx_seqs_read(store) == expected(0, LAST)
    dc = DeltaChangefeed(store, ARROW_SCHEMA, app_id=APP)
    assert dc.last_committed() == LAST
    published = [o.name for o in store.list("part-") if parse_part_name(o.name)]
    assert sorted(dc.files()) == sorted(published)  # every published file is in the table


def test_two_writers_at_once_never_both_commit_a_range(store_uri):
    a = run(store_uri, "queue-a", str(LAST), "race")
    b = run(store_uri, "queue-b", str(LAST), "race")
    results = [finish(a), finish(b)]
    for code, _, err in results:
        assert code == 0, err[-2000:]
    committed = sorted(tuple(map(int, line.split()[1:])) for _, out, _ in results for line in out.splitlines())
    assert [t for first, last in committed for t in range(first, last + 1)] == list(range(LAST + 1))
    assert tx_seqs_read(open_store(store_uri)) == expected(0, LAST)
