"""A sender whose confirmed position is ahead of what the queue holds sends only what
follows it (OpenLogReplicator drops what was confirmed: WriterStream's CONFIRM, its
CONTINUE from the confirmed position): the transactions between would never reach the
changefeed. ``run olr://`` stops with one line naming both positions, unless told
``--accept-gap``. Its own confirms never look like such a gap: a checkpoint it confirms
while idle (ahead of the last transaction) is stored before the sender hears of it."""

from __future__ import annotations

import random
import socket
import threading

import pytest

from olr_buffer.olr_protocol import RedoRequest, RequestCode, frame
from olr_buffer.sources.olr import OlrReceiver, parse_location
from olr_buffer.sources.olr.state import load_state
from olr_buffer.testing import MemoryQueue
from tests.contract_model import assert_changefeed_equal
from tests.sources.olr.processes import error_line, run_once, service_log, start_run, stop
from tests.sources.olr.service import changefeed, transactions, wait_for
from tests.sources.olr.standin import StandIn, position_of
from tests.sources.olr.streams import FORMS, expected_rows, messages, workload

pytestmark = pytest.mark.e2e


def commit_positions(msgs: list[bytes]) -> list[tuple[int, int]]:
    return [position_of(m) for m in msgs if b'"op":"commit"' in m]


def confirm_as_another_receiver(sender: StandIn, pos: tuple[int, int]) -> None:
    """Another receiver of the same sender (database ORCL) confirms ``pos``."""
    with socket.create_connection(("127.0.0.1", sender.port), timeout=30) as s:
        s.sendall(frame(RedoRequest(RequestCode.CONFIRM, "ORCL", c_scn=pos[0], c_idx=pos[1]).encode()))
        wait_for(lambda: sender.confirmed == pos, 30, "the other receiver's confirm")


def test_a_sender_confirmed_ahead_of_the_queue_stops_run_naming_both_positions(tmp_path):
    txs = workload(random.Random(38), 12)
    form = FORMS["per-row"]
    msgs = messages(txs, form)
    commits = commit_positions(msgs)
    hold = msgs.index(next(m for m in msgs if position_of(m) > commits[4]))  # the 6th transaction waits
    with StandIn(msgs, hold_at=hold) as sender:
        svc = start_run(sender.uri, tmp_path)
        try:
            wait_for(
                lambda: transactions(tmp_path / "cf") == 5 and commits[4] in sender.confirms(),
                120,
                "five transactions published and confirmed",
            )
        finally:
            assert stop(svc) == 0, service_log(tmp_path)
        confirm_as_another_receiver(sender, commits[8])  # it took transactions 6 to 9 away
        sender.release()
        proc = run_once(sender.uri, tmp_path)
        assert proc.returncode == 1, proc.stderr
        line = error_line(
            proc,
            f"the sender's confirmed position, c_scn {commits[8][0]} c_idx {commits[8][1]}",
            f"what this queue holds, c_scn {commits[4][0]} c_idx {commits[4][1]}",
            "--accept-gap",
        )
        assert "will not send the transactions between again" in line
        assert transactions(tmp_path / "cf") == 5, "nothing published past the gap"
        # told otherwise: on from the sender's position, and said
        svc = start_run(sender.uri, tmp_path, "--accept-gap")
        try:
            wait_for(lambda: transactions(tmp_path / "cf") == 8 or svc.poll() is not None, 120, "the rest")
        finally:
            assert stop(svc) == 0, service_log(tmp_path)
    log = service_log(tmp_path)
    assert any(
        "WARNING" in line and "--accept-gap" in line and f"c_scn {commits[8][0]} c_idx {commits[8][1]}" in line
        for line in log.splitlines()
    ), log
    assert_changefeed_equal(changefeed(tmp_path / "cf"), expected_rows(txs[:5] + txs[9:], form))


def test_a_checkpoint_confirmed_while_idle_is_stored_before_the_sender_hears_of_it_and_is_no_gap(tmp_path):
    """The receiver confirms OpenLogReplicator's checkpoints while every transaction is
    published, so the sender's position moves past the last transaction: the queue must
    say so before the CONFIRM leaves (a kill between would otherwise look like a gap), and
    a restart from there goes on without complaint."""
    txs = workload(random.Random(39), 6)
    msgs = messages(txs, FORMS["per-row-all"])  # a checkpoint message after every third transaction
    last_chkpt = position_of(msgs[-1])
    assert b"chkpt" in msgs[-1] and last_chkpt > commit_positions(msgs)[-1]
    queue = MemoryQueue()
    seen: dict = {}

    def on_confirm(pos):  # what the queue says at the moment the CONFIRM arrives
        st = load_state(queue.meta_items(b"olr/"))
        seen[pos] = st.idle_confirmed if st is not None else None

    published: dict = {}
    stop_event = threading.Event()
    with StandIn(msgs, on_confirm=on_confirm, hold_at=len(msgs) - 1) as sender:
        r = OlrReceiver(
            queue,
            parse_location(sender.uri),
            published=lambda: published.get("pos"),
            stop=stop_event,
            status_interval=0.05,
        )
        t = threading.Thread(target=r.run, daemon=True)
        t.start()
        try:
            wait_for(lambda: r.last_commit == commit_positions(msgs)[-1], 60, "every commit appended")
            published["pos"] = commit_positions(msgs)[-1]
            wait_for(lambda: sender.confirmed == published["pos"], 60, "the last commit confirmed")
            sender.release()  # the checkpoint comes while every transaction is published
            wait_for(lambda: sender.confirmed == last_chkpt, 60, "the last checkpoint confirmed")
        finally:
            stop_event.set()
            t.join(30)
    assert seen[last_chkpt] is not None and seen[last_chkpt] >= last_chkpt, seen
    # run, as a process, on a queue and changefeed whose sender is at that checkpoint: no gap
    with StandIn(msgs, hold_at=len(msgs) - 1) as sender:
        svc = start_run(sender.uri, tmp_path)
        try:
            wait_for(
                lambda: sender.confirmed == commit_positions(msgs)[-1] or svc.poll() is not None,
                120,
                "everything published and confirmed",
            )
            sender.release()
            wait_for(
                lambda: sender.confirmed == last_chkpt or svc.poll() is not None,
                120,
                "the checkpoint confirmed (by the receiver's process, once its parent stored it)",
            )
        finally:
            assert stop(svc) == 0, service_log(tmp_path)
        svc = start_run(sender.uri, tmp_path)
        try:
            wait_for(
                lambda: (
                    "streaming from after" in service_log(tmp_path).split("stopped cleanly")[-1]
                    or svc.poll() is not None
                ),
                120,
                "the restart streaming",
            )
        finally:
            assert stop(svc) == 0, service_log(tmp_path)
    assert "ahead of what this queue holds" not in service_log(tmp_path)
    assert transactions(tmp_path / "cf") == len(txs)
