"""SIGTERM while a command starts and while it runs (without click: imported first)."""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from ..errors import Terminated

#: SIGTERMs received while the command started (its imports take 0.1-0.3 s): see keep_early_sigterm.
EARLY_SIGTERM: list[int] = []
#: Commands that SIGTERM stops cleanly (exit 0): their own handler is installed by the command (run.py).
CLEAN_STOP = ("run",)


def keep_early_sigterm() -> None:
    """Keep a SIGTERM that comes while the command starts, instead of dying of it without
    a word: ``run`` then stops cleanly as soon as it can (exit 0, logged), another command
    ends as terminated (exit 143, one line). See ``clean_errors`` (common.py)."""
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, lambda signum, _frame: EARLY_SIGTERM.append(signum))
    except ValueError:  # not the main thread (an embedding program's worker)
        pass


def raise_on_sigterm() -> Any:
    """Make SIGTERM raise :class:`Terminated` in the main thread (``run`` installs its own
    clean stop over it); the handler it replaces, or ``None`` outside the main thread."""

    def terminated(_signum, _frame):
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread (an embedding program's worker)
        return None


class StoppedAtOnce(KeyboardInterrupt):
    """Raised in the main thread by a second SIGTERM or SIGINT while the stop the first one
    asked for is held up (``serve``, ``mirror``: a call to a store that does not answer):
    it unwinds at once, as Ctrl-C does; ``clean_errors`` says so in one line, exit 0."""


def stop_on_signals(
    logger: str, hurry: threading.Event | None = None, *, at_once: bool = False
) -> tuple[threading.Event, Any]:
    """A stop asked for by SIGTERM or SIGINT: the event they set (logged on ``logger`` as
    "received SIGTERM, stopping") and the handler installed for them. A second one while
    the stop goes on stops at once, without waiting for what does not answer: ``hurry``
    is set (``run``: its call to the changefeed's store is given up), or with ``at_once``
    :class:`StoppedAtOnce` is raised in the main thread (what it waits for is left)."""
    stop = threading.Event()

    def on_signal(signum, _frame):
        name = signal.Signals(signum).name
        if hurry is not None and stop.is_set():
            if not hurry.is_set():
                logging.getLogger(logger).warning("received %s again, stopping at once", name)
            hurry.set()
            return
        if at_once and stop.is_set():
            logging.getLogger(logger).warning("received %s again, stopping at once", name)
            raise StoppedAtOnce(name)
        logging.getLogger(logger).info("received %s, stopping", name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop, on_signal
