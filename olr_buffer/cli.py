"""The ``olr-buffer`` command line: wiring only."""

from __future__ import annotations

import functools
import json
import logging
import re
import sys
from typing import Any, Callable

import click

from . import __version__
from .errors import OlrBufferError

_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class ByteSize(click.ParamType):
    """``64MiB``, ``512k``, ``1g``, ``4096``."""

    name = "size"

    def convert(self, value: Any, param, ctx) -> int:
        if isinstance(value, int):
            return value
        m = _SIZE.match(str(value))
        if not m:
            self.fail(f"{value!r} is not a size like 64MiB", param, ctx)
        unit = (m.group(2) or "").lower().rstrip("b").rstrip("i")
        return int(m.group(1)) * _UNITS[unit]


def clean_errors(fn: Callable) -> Callable:
    """Turn olr-buffer's errors into one line on stderr and their exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except OlrBufferError as exc:
            click.echo(f"olr-buffer: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("olr-buffer: interrupted", err=True)
            sys.exit(130)

    return wrapper


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="olr-buffer")
@click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
    default="warning",
    show_default=True,
)
def main(log_level: str) -> None:
    """olr-buffer: a disk-backed transaction buffer for Oracle change data capture."""
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")


@main.command()
@click.argument("input_dir", type=click.Path(file_okay=False))
@click.option("--queue", "queue_dir", required=True, type=click.Path(file_okay=False), help="Queue directory.")
@click.option("--changefeed", "changefeed_dir", required=True, type=click.Path(file_okay=False), help="Changefeed directory.")
@click.option("--segment-size", type=ByteSize(), default="64MiB", show_default=True, help="Queue segment size (roll point).")
@click.option("--file-rows", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Publish a changefeed file once it holds this many rows (never splitting a transaction).")
@click.option("--no-sync", is_flag=True,
              help="DURABILITY TRADE-OFF: skip fsync of queue and changefeed; a machine crash may lose recent work.")
@click.option("--progress/--no-progress", default=None, help="Progress line on stderr (default: when stderr is a terminal).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@clean_errors
def replay(input_dir, queue_dir, changefeed_dir, segment_size, file_rows, no_sync, progress, as_json) -> None:
    """Replay archived redo logs of INPUT_DIR into the changefeed, offline, then exit.

    Run again on the same directories after a kill or a crash, it finishes what was left
    undone and publishes no duplicate.
    """
    from .pipeline import ReplayOptions
    from .pipeline import replay as run_replay

    show = sys.stderr.isatty() if progress is None else progress
    opts = ReplayOptions(segment_bytes=segment_size, file_rows=file_rows, durable=not no_sync)
    bar = _ProgressLine() if show else None
    try:
        summary = run_replay(input_dir, queue_dir, changefeed_dir, opts, on_progress=bar)
    finally:
        if bar:
            bar.done()
    if as_json:
        click.echo(json.dumps(summary.as_dict(), indent=2))
        return
    s = summary
    rate = s.records_read / s.seconds if s.seconds > 0 else 0.0
    click.echo(
        f"replayed {s.records_read:,} records from {len(s.threads)} thread(s) in {s.seconds:.2f}s ({rate:,.0f} records/s)\n"
        f"published {s.transactions_published:,} transactions ({s.rows_published:,} rows); "
        f"changefeed now holds tx_seq 0..{s.next_tx_seq - 1} in {s.files_published} file(s)\n"
        f"rolled back {s.rolled_back:,}; partial (no begin, not published) {s.no_begin:,}; "
        f"empty after compensation {s.empty:,}; compensations {s.compensations:,} "
        f"({s.unmatched_compensations:,} matched nothing); already published before {s.already_published:,}\n"
        f"late records ignored {s.late_records:,}; extra end records {s.extra_end_records:,}; "
        f"still open {s.open_transactions:,}; queue {s.queue_segments} segment(s), {s.queue_bytes / 1e6:,.1f} MB"
    )


class _ProgressLine:
    """One line on stderr, rewritten in place."""

    def __call__(self, p) -> None:
        pct = 100.0 * p.bytes_read / p.bytes_total if p.bytes_total else 100.0
        sys.stderr.write(
            f"\r{pct:5.1f}%  {p.records:,} records  {p.published:,} transactions published  "
            f"{p.open_transactions:,} open\x1b[K"
        )
        sys.stderr.flush()

    def done(self) -> None:
        sys.stderr.write("\n")
        sys.stderr.flush()


@main.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--threads", type=click.IntRange(1, 64), default=3, show_default=True, help="RAC redo threads.")
@click.option("--transactions", type=click.IntRange(min=1), default=2000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--records-per-file", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Log switch after this many records of a thread.")
@click.option("--large-tx-rows", type=click.IntRange(min=0), default=0, show_default=True,
              help="Add one transaction with this many rows.")
@click.option("--no-compress", is_flag=True, help="Write archived sequences as plain .jsonl too.")
@clean_errors
def simulate(out_dir, threads, transactions, seed, records_per_file, large_tx_rows, no_compress) -> None:
    """Write a seeded RAC workload in the input format to OUT_DIR."""
    from .simulate import simulate as run_simulate

    stats = run_simulate(
        out_dir,
        threads=threads,
        transactions=transactions,
        seed=seed,
        records_per_file=records_per_file,
        compress_archived=not no_compress,
        large_tx_rows=large_tx_rows,
    )
    click.echo(f"wrote {out_dir}: {stats}")


if __name__ == "__main__":  # pragma: no cover
    main()
