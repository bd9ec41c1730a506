"""Riding out a store outage (olr_buffer/store/retry.py): a call that does not return is an
outage once the timeout has passed, said and counted while it still waits."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from olr_buffer.store import OutageRetry, StoreUnreachableError


def wait_until(condition, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


@pytest.fixture
def stop():
    event = threading.Event()
    yield event
    event.set()  # (ends the watchdog)


def test_a_call_that_does_not_return_is_an_outage_while_it_waits(stop, caplog):
    caplog.set_level(logging.INFO, "olr_buffer.store.retry")
    retry = OutageRetry(stop, timeout=0.2)

    def hung() -> str:  # answers only once the outage has been said
        wait_until(lambda: retry.outages == 1, "no outage while the call waits")
        assert retry.outage_seconds() > 0
        return "answer"

    assert retry.call(hung, "publish part-x") == "answer"
    assert retry.outages == 1 and retry.outage_seconds() == 0 and retry.retries == 0
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith("the changefeed's store cannot be reached (no answer to publish part-x for ")
    assert said[0].endswith("retrying to publish part-x, every 30 s at most")
    assert said[1].startswith("the changefeed's store answers again after ")
    assert retry.call(lambda: "quick", "read") == "quick" and retry.outages == 1  # a call in time: none


def test_a_hung_call_that_then_fails_is_one_outage(stop):
    """The watchdog starts the outage; the call's own time-out then fails it, and the
    retry that answers ends it: one outage, one retry."""
    retry = OutageRetry(stop, timeout=0.2, first=0.01)
    tries = []

    def hung_then_timed_out() -> str:
        tries.append(1)
        if len(tries) == 1:
            wait_until(lambda: retry.outages == 1, "no outage while the call waits")
            raise StoreUnreachableError("s3://b/cf/x: cannot read: did not answer (read timed out)")
        return "answer"

    assert retry.call(hung_then_timed_out, "read x") == "answer"
    assert (retry.outages, retry.retries, retry.outage_seconds()) == (1, 1, 0)


def test_a_call_inside_another_is_timed_from_the_outer_one(stop):
    retry = OutageRetry(stop, timeout=0.2)

    def outer() -> str:
        retry.call(lambda: None, "look")  # returns at once: the outer one still waits
        wait_until(lambda: retry.outages == 1, "the outer call's wait is not an outage")
        return "answer"

    assert retry.call(outer, "publish") == "answer" and retry.outage_seconds() == 0
