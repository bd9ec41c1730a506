"""Riding out a store outage (olr_buffer/store/retry.py): a call that does not return is an
outage once the timeout has passed, said and counted while it still waits."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from olr_buffer.store import ObjectChangedError, OutageRetry, StoreUnreachableError


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


def test_a_call_of_another_thread_that_does_not_return_is_an_outage(stop, caplog):
    """The lease's keepalive renews in a thread of its own, while the service's loop has
    nothing to publish: its call, watched, that waits past the timeout is an outage; its
    answer ends it."""
    caplog.set_level(logging.INFO, "olr_buffer.store.retry")
    retry = OutageRetry(stop, timeout=0.2)
    answer = threading.Event()

    def keepalive() -> None:
        with retry.watched("renew the changefeed's lease"):
            answer.wait(30)

    thread = threading.Thread(target=keepalive)
    thread.start()
    wait_until(lambda: retry.outages == 1, "a watched call that waits is no outage")
    assert retry.outage_seconds() > 0
    answer.set()
    thread.join()
    assert retry.outage_seconds() == 0
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith("the changefeed's store cannot be reached (no answer to renew the changefeed's lease")
    assert said[1].startswith("the changefeed's store answers again after ")


def test_an_answer_while_another_call_still_waits_does_not_end_the_outage(stop, caplog):
    caplog.set_level(logging.INFO, "olr_buffer.store.retry")
    retry = OutageRetry(stop, timeout=0.2)
    answer = threading.Event()

    def keepalive() -> None:
        with retry.watched("renew the changefeed's lease"):
            answer.wait(30)

    thread = threading.Thread(target=keepalive)
    thread.start()
    wait_until(lambda: retry.outages == 1, "a watched call that waits is no outage")
    assert retry.call(lambda: "quick", "read") == "quick"  # (a call that started after the outage did)
    assert retry.outage_seconds() > 0, "the renewal still waits: the outage goes on"
    answer.set()
    thread.join()
    assert retry.outage_seconds() == 0 and retry.outages == 1
    assert sum("answers again" in r.getMessage() for r in caplog.records) == 1


def test_a_watched_call_that_fails_retryably_starts_an_outage_and_a_refusal_ends_it(stop):
    """A failure that retrying may fix is an outage (counted once) and a retry (the thread
    tries again); a refusal (not found, exists, denied) is an answer of the store: the
    outage is over."""
    retry = OutageRetry(stop, timeout=30)
    with pytest.raises(StoreUnreachableError), retry.watched("renew the changefeed's lease"):
        raise StoreUnreachableError("s3://b/cf/lease.json: cannot write: did not answer (connection refused)")
    assert retry.outages == 1 and retry.outage_seconds() > 0
    with pytest.raises(StoreUnreachableError), retry.watched("renew the changefeed's lease"):
        raise StoreUnreachableError("s3://b/cf/lease.json: cannot write: did not answer (connection refused)")
    assert retry.outages == 1 and retry.retries == 2  # (the keepalive tries again: retries)
    with pytest.raises(ObjectChangedError), retry.watched("renew the changefeed's lease"):
        raise ObjectChangedError("s3://b/cf/lease.json: changed since it was read")
    assert retry.outages == 1 and retry.outage_seconds() == 0


def test_stopping_a_call_that_does_not_return_is_given_up_after_the_timeout(stop):
    """Once ``stop`` is set, a call unanswered ``timeout`` seconds after it started is
    given up (CallGivenUpError, the call left to finish on its own), and every later
    call fails with it untried: a stop does not wait out the client's own timeouts."""
    from olr_buffer.store import CallGivenUpError

    retry = OutageRetry(stop, timeout=0.3)
    answer = threading.Event()  # (never set before the call is given up)
    tried: list[str] = []

    def hung() -> str:
        tried.append("hung")
        answer.wait(60)
        return "late"

    def stop_soon() -> None:
        wait_until(lambda: tried, "the call did not start")
        stop.set()

    threading.Thread(target=stop_soon, daemon=True).start()
    with pytest.raises(CallGivenUpError, match=r"^no answer to publish part-x for [\d.]+ s$") as caught:
        retry.call(hung, "publish part-x")
    assert caught.value.retryable and retry.given_up is caught.value
    with pytest.raises(CallGivenUpError):
        retry.call(lambda: tried.append("later"), "release the lease")
    assert tried == ["hung"]  # (the later call was not tried)
    answer.set()


def test_hurry_gives_a_call_up_at_once_while_stopping(stop):
    """A second stop signal (``hurry``): the call under way is given up without waiting
    for the timeout; before the stop, a call is never given up."""
    from olr_buffer.store import CallGivenUpError

    hurry = threading.Event()
    retry = OutageRetry(stop, timeout=600, hurry=hurry)
    answer = threading.Event()
    outcome: list[object] = []

    def hung() -> str:
        answer.wait(120)
        return "late"

    def call() -> None:
        try:
            outcome.append(retry.call(hung, "stage part-x"))
        except CallGivenUpError as exc:
            outcome.append(exc)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    time.sleep(0.3)  # (not a timing assertion: the call must not end on its own meanwhile)
    stop.set()
    time.sleep(0.3)
    assert caller.is_alive() and not outcome  # stopping: the call has its timeout (600 s)
    hurry.set()
    caller.join(timeout=30)
    assert not caller.is_alive(), "the call was not given up on hurry"
    assert isinstance(outcome[0], CallGivenUpError) and "no answer to stage part-x" in str(outcome[0])
    answer.set()


def test_a_call_that_fails_while_stopping_gives_up_too(stop):
    """Stopping, a call that fails with an error retrying might fix is not tried again,
    and later calls are not tried at all: the stop goes on without the store."""
    retry = OutageRetry(stop, first=0.01, timeout=5)
    stop.set()
    refused = StoreUnreachableError("s3://b/cf/part-x: cannot publish: connection refused")

    def fails() -> None:
        raise refused

    with pytest.raises(StoreUnreachableError) as caught:
        retry.call(fails, "publish part-x")
    assert caught.value is refused and retry.given_up is refused
    with pytest.raises(StoreUnreachableError):
        retry.call(lambda: pytest.fail("tried after the stop gave the store up"), "release the lease")


def test_an_attempt_is_tried_once_and_given_up_as_a_call_is_once_stopped(stop):
    """:meth:`OutageRetry.attempt` (a caller that retries on its own: a standby's look at
    the lease): a failure is raised at once, not retried; once stopped, a try that does
    not return is given up after the timeout, and later ones fail untried."""
    from olr_buffer.store import CallGivenUpError

    retry = OutageRetry(stop, first=0.01, timeout=0.3)
    tries: list[str] = []
    refused = StoreUnreachableError("s3://b/cf/_olr_buffer/lease.json: cannot read: connection refused")

    def fails() -> None:
        tries.append("refused")
        raise refused

    with pytest.raises(StoreUnreachableError) as caught:
        retry.attempt(fails, "look at the changefeed's lease")
    assert caught.value is refused and tries == ["refused"] and retry.given_up is None
    answer = threading.Event()

    def hung() -> str:
        tries.append("hung")
        answer.wait(60)
        return "late"

    def stop_soon() -> None:
        wait_until(lambda: "hung" in tries, "the try did not start")
        stop.set()

    threading.Thread(target=stop_soon, daemon=True).start()
    with pytest.raises(CallGivenUpError, match=r"^no answer to look at the changefeed's lease for [\d.]+ s$"):
        retry.attempt(hung, "look at the changefeed's lease")
    with pytest.raises(CallGivenUpError):
        retry.attempt(lambda: tries.append("later"), "look at the changefeed's lease")
    assert tries == ["refused", "hung"]
    answer.set()


def test_an_attempt_that_does_not_return_is_an_outage_while_it_waits(stop, caplog):
    """A standby's look at the lease (:meth:`OutageRetry.attempt`) that the store does not
    answer is said as an outage once it has waited the timeout, while it still waits
    (not after the client's own time-outs), naming what waits and how it is tried again;
    a failed look is an outage too, and a retry; the answer ends the outage."""
    caplog.set_level(logging.INFO, "olr_buffer.store.retry")
    retry = OutageRetry(stop, timeout=0.2)

    def hung() -> str:  # answers only once the outage has been said
        wait_until(lambda: retry.outages == 1, "no outage while the look waits")
        return "holder"

    assert retry.attempt(hung, "look at the changefeed's lease at s3://b/cf", every=1) == "holder"
    assert retry.outages == 1 and retry.outage_seconds() == 0 and retry.retries == 0
    said = [r.getMessage() for r in caplog.records]
    assert said[0].startswith(
        "the changefeed's store cannot be reached (no answer to look at the changefeed's lease at s3://b/cf for "
    ), said
    assert said[0].endswith("retrying to look at the changefeed's lease at s3://b/cf, every 1 s"), said
    assert said[1].startswith("the changefeed's store answers again after "), said
    refused = StoreUnreachableError("s3://b/cf/_olr_buffer/lease.json: cannot read: connection refused")

    def fails() -> None:
        raise refused

    with pytest.raises(StoreUnreachableError):
        retry.attempt(fails, "look at the changefeed's lease at s3://b/cf", every=1)
    assert retry.outages == 2 and retry.retries == 1 and retry.outage_seconds() > 0
    assert retry.attempt(lambda: None, "look at the changefeed's lease at s3://b/cf", every=1) is None
    assert retry.outage_seconds() == 0
