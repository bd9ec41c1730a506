"""``run --standby`` on an OpenLogReplicator source (the test's stand-in, in a process
with its confirmed position kept in a file): two services, each with its own queue, on
one changefeed on S3; the active one is SIGKILLed; the standby takes the changefeed over
and asks the sender to CONTINUE from what the changefeed published. Every transaction
exactly once, in order."""

from __future__ import annotations

import random
import signal

import pytest

from tests.contract_model import assert_changefeed_equal
from tests.sources.olr.processes import SenderProcess, free_port
from tests.sources.olr.streams import FORMS, expected_rows, messages, workload, write_stream
from tests.test_changefeed_s3 import plain_rows, wait_published
from tests.test_standby import TAKEN_OVER, WAITING, fenced, standby, wait_more

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_an_olr_standby_takes_over_from_the_confirmed_position(tmp_path, s3_uri, how):
    """``kill``: SIGKILL; ``stop``: SIGSTOP past the lease, then SIGCONT: the old one stops
    with one line, and its connection with it (the sender serves one receiver: the
    standby's waits until then)."""
    txs = workload(random.Random(42), 200)
    form = FORMS["per-row-all"]
    msgs = messages(txs, form)
    write_stream(tmp_path / "stream.jsonl", msgs)
    port = free_port()
    uri = f"olr://127.0.0.1:{port}/ORCL"
    sender = SenderProcess(tmp_path / "stream.jsonl", port, tmp_path / "sender-state.json", rate=len(msgs) / 12)
    a = standby(uri, tmp_path / "qa", s3_uri)
    b = None
    try:
        a.wait_line("active now, lease generation 1")
        b = standby(uri, tmp_path / "qb", s3_uri)
        assert int(b.wait_line(WAITING).group(2)) == a.proc.pid
        wait_more(s3_uri, 20)
        if how == "kill":
            a.stop(signal.SIGKILL)
        else:
            a.proc.send_signal(signal.SIGSTOP)
        assert int(b.wait_line(TAKEN_OVER, timeout=120).group(1)) == 2
        if how == "stop":
            a.proc.send_signal(signal.SIGCONT)
            fenced(a)
        b.wait_line(r"streaming from after c_scn \d+", timeout=120)  # what the changefeed published
        a = standby(uri, tmp_path / "qa", s3_uri)
        assert int(a.wait_line(WAITING).group(2)) == b.proc.pid
        wait_published(s3_uri, len(txs), timeout=180)
        assert a.stop() == 0, "\n".join(a.lines[-30:])
        assert b.stop() == 0, "\n".join(b.lines[-30:])
    finally:
        sender.kill()
        for s in (a, b):
            if s is not None and s.proc.poll() is None:
                s.proc.send_signal(signal.SIGCONT)
                s.stop(signal.SIGKILL)
    assert_changefeed_equal(plain_rows(s3_uri), expected_rows(txs, form))
