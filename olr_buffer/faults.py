"""Crash points: the product's named instants where the crash tests kill the process.

``OLR_BUFFER_FAULT=NAME[:N]`` makes the N-th time (default 1st) the process reaches
``fault_point(NAME)`` kill it with SIGKILL, as a crash at that exact instant would;
``OLR_BUFFER_FAULT=NAME[:N]:stop`` stops it there with SIGSTOP instead (a process paused
at that instant: a long GC, a frozen VM), to be woken by SIGCONT. The stop waits until no
other thread of the process is inside a section marked :func:`no_stop_inside` (a local
store's compare-and-swap, under its ``flock``: a process paused inside it holds up every
other writer of the store until it wakes, a limit of its own, tested apart; the pause of
a fault point is the pause of that instant of its thread).
Unset (always, in production), ``fault_point`` is one global lookup. The hook is part of
the product (its modules call it); the tests only set the variable.

Points: ``after_append`` (a reader's block and position are committed),
``after_row_group`` (a row group is in the changefeed file being written, which has no
footer yet), ``after_tmp_written`` (a changefeed file is complete under its temporary name),
``after_rename`` (published, not yet in the manifest), ``before_checkpoint`` (the sink
flushed, the dispatcher's checkpoint not yet written), ``during_cleanup`` (between the
deletion of two segment files), ``before_delta_commit`` and ``after_delta_commit``
(around the Delta commit of published files), ``before_iceberg_commit``,
``iceberg_manifests_written`` (the snapshot's manifests written, the catalog not yet
told) and ``after_iceberg_commit`` (around the Iceberg commit), ``after_compaction_publish``
(``compact`` published a merged file; the files it replaces are still there); a fenced
publication (docs/failure-scenarios.md, "A paused writer and its standby"): ``before_stage``
(the lease checked, nothing sent), ``after_stage`` (the file is in the store, invisible, not
decided), ``after_decide`` (the manifest records it as pending: decided, not yet visible);
``after_take_over`` (a leased writer took the lease and fenced, before it reads the changefeed).
"""

from __future__ import annotations

import os
import signal
import threading
from contextlib import AbstractContextManager, nullcontext

_SPEC = os.environ.get("OLR_BUFFER_FAULT") or None
_counts: dict[str, int] = {}
_lock = threading.Lock()
_no_stop = threading.RLock()  # held inside the sections a stop waits for


def _parse(spec: str) -> tuple[str, int, bool]:
    """(point, which time it fires, whether it stops the process rather than kills it)."""
    parts = spec.split(":")
    stop = len(parts) > 1 and parts[-1] == "stop"
    if stop:
        parts = parts[:-1]
    return parts[0], int(parts[1]) if len(parts) > 1 and parts[1] else 1, stop


def disable() -> None:
    """No fault point fires in this process from now on (a child whose parent owns the
    faults: the parent kills itself after its own append)."""
    global _SPEC
    _SPEC = None


def fault_point(name: str) -> None:
    if _SPEC is None:
        return
    target, nth, stop = _parse(_SPEC)
    if name != target:
        return
    with _lock:
        _counts[name] = _counts.get(name, 0) + 1
        fire = _counts[name] == nth
    if not fire:
        return
    if stop:
        with _no_stop:  # (no other thread inside a section that must not be paused)
            os.kill(os.getpid(), signal.SIGSTOP)
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def no_stop_inside() -> AbstractContextManager:
    """Around a section that a ``:stop`` fault of another thread must not pause (it
    waits for the section to end); unset (production): nothing."""
    return _no_stop if _SPEC is not None else nullcontext()
