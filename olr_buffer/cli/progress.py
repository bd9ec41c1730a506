"""Progress on stderr, for the commands that take a while (replay, simulate, compact)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import click


def progress_options(fn: Callable) -> Callable:
    """``--progress/--no-progress`` and ``--progress-interval`` (replay, simulate, compact)."""
    fn = click.option(
        "--progress-interval",
        type=click.FloatRange(min=0),
        default=10.0,
        show_default=True,
        help="Seconds between two progress lines when stderr is not a terminal. Given (here, in the "
        "environment or in --config), it turns progress on unless --no-progress says otherwise.",
    )(fn)
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Progress on stderr (default: when stderr is a terminal or --progress-interval is given). "
        "On a terminal one line rewritten in place; to a file or a pipe a plain line every "
        "--progress-interval seconds.",
    )(fn)


def progress_line(progress: bool | None, interval: float, figures: Callable) -> ProgressLine | None:
    """The progress display a command asked for, or None."""
    terminal = sys.stderr.isatty()
    if progress is None:
        source = click.get_current_context().get_parameter_source("progress_interval")
        progress = terminal or source is not click.core.ParameterSource.DEFAULT
    return ProgressLine(terminal, interval, figures) if progress else None


class ProgressLine:
    """Progress on stderr: on a terminal, one line rewritten in place; otherwise (a file, a
    pipe) a plain line every ``interval`` seconds, without ``\\r`` or ANSI codes. Both give
    the figures, the share done and an ETA from it. ``figures(p, elapsed)``: (done, total,
    text) of a progress report ``p``."""

    def __init__(self, terminal: bool, interval: float, figures: Callable[[Any, float], tuple[int, int, str]]) -> None:
        self.terminal = terminal
        self.interval = interval
        self.figures = figures
        self.started = time.monotonic()
        self.last_line = self.started
        self.last: Any = None

    def __call__(self, p) -> None:
        self.last = p
        now = time.monotonic()
        if self.terminal:
            sys.stderr.write(f"\r{self._text(p, now)}\x1b[K")
        elif now - self.last_line >= self.interval:
            self.last_line = now
            sys.stderr.write(f"progress: {self._text(p, now)}\n")
        else:
            return
        sys.stderr.flush()

    def _text(self, p, now: float, finished: bool = False) -> str:
        elapsed = max(now - self.started, 1e-9)
        done, total, text = self.figures(p, elapsed)
        pct = 100.0 * done / total if total else 100.0
        if not finished:
            pct = min(pct, 99.9)  # replay: read to the end is not done, the last commits are still published
        if finished:
            eta = f"done in {elapsed:.1f}s"
        elif done and total > done:
            eta = f"ETA {timedelta(seconds=round((total - done) * elapsed / done))}"
        else:
            eta = "ETA -"
        return f"{pct:5.1f}%  {text}  {eta}"

    def done(self) -> None:
        if self.terminal:
            if self.last is not None:
                sys.stderr.write(f"\r{self._text(self.last, time.monotonic(), finished=True)}\x1b[K")
            sys.stderr.write("\n")
        elif self.last is not None:
            sys.stderr.write(f"progress: {self._text(self.last, time.monotonic(), finished=True)}\n")
        sys.stderr.flush()

    def abort(self) -> None:
        """The run failed: end the terminal line, so that the error gets its own."""
        if self.terminal:
            sys.stderr.write("\n")
            sys.stderr.flush()


def with_progress(bar: ProgressLine | None, work: Callable[[], Any]) -> Any:
    """``work()`` with its progress display ended as it ends (done, or cut short)."""
    try:
        result = work()
    except BaseException:
        if bar:
            bar.abort()
        raise
    if bar:
        bar.done()
    return result
