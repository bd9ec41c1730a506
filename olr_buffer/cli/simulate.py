"""``olr-buffer simulate``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from .common import DIR, StartTime, clean_errors
from .group import main
from .progress import progress_line, progress_options, with_progress


def _simulate_figures(p, elapsed: float) -> tuple[int, int, str]:
    return (
        p.transactions_ended,
        p.transactions_total,
        (
            f"{p.transactions_ended:,} of {p.transactions_total:,} transactions ended  "
            f"{p.records:,} records written ({p.records / elapsed:,.0f}/s)"
        ),
    )


@main.command()
@click.argument("out_dir", type=DIR)
@click.option("--threads", type=click.IntRange(1, 64), default=3, show_default=True, help="RAC redo threads.")
@click.option(
    "--transactions",
    type=click.IntRange(min=1),
    default=2000,
    show_default=True,
    help="Regular transactions to write (a few without begin and, with --large-tx-rows, a large one come on top).",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of the random workload: the same seed, options and --start-time give the same files.",
)
@click.option(
    "--records-per-file",
    type=click.IntRange(min=1),
    default=5000,
    show_default=True,
    help="Log switch after this many records of a thread.",
)
@click.option(
    "--large-tx-rows",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Add one transaction with this many rows.",
)
@click.option("--no-compress", is_flag=True, help="Write archived sequences as plain .jsonl too.")
@click.option(
    "--start-time",
    "start_tm",
    type=StartTime(),
    default="now",
    show_default=True,
    help="Start of the workload's clock: 'now', an ISO-8601 time (UTC without an offset), or nanoseconds "
    "since the epoch. A record's tm is this plus 1 ms per SCN after the first.",
)
@click.option("--overwrite", is_flag=True, help="Delete the redo log files OUT_DIR already holds first.")
@click.option("--rolling-restarts", is_flag=True, help="Close each thread in turn and open it again (close records).")
@click.option(
    "--close-thread-at",
    type=click.FloatRange(0, 1),
    default=None,
    help="Close the highest thread for good once this share of the transactions started (e.g. 0.5).",
)
@progress_options
@clean_errors
def simulate(
    out_dir,
    threads,
    transactions,
    seed,
    records_per_file,
    large_tx_rows,
    no_compress,
    start_tm,
    overwrite,
    rolling_restarts,
    close_thread_at,
    progress,
    progress_interval,
) -> None:
    """Write a seeded RAC workload in the input format to OUT_DIR."""
    from ..simulate import simulate as run_simulate

    bar = progress_line(progress, progress_interval, _simulate_figures)
    stats = with_progress(
        bar,
        lambda: run_simulate(
            out_dir,
            threads=threads,
            transactions=transactions,
            seed=seed,
            records_per_file=records_per_file,
            compress_archived=not no_compress,
            large_tx_rows=large_tx_rows,
            start_tm=start_tm,
            overwrite=overwrite,
            rolling_restarts=rolling_restarts,
            close_thread_at=close_thread_at,
            on_progress=bar,
        ),
    )
    click.echo(f"wrote {out_dir}: {stats.describe()}")
    click.echo(f"clock started at {_iso(start_tm)} (--start-time {start_tm})")


def _iso(nanos: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC, to the microsecond."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=nanos // 1000)
    return moment.isoformat().replace("+00:00", "Z")
