"""``olr-buffer compact``."""

from __future__ import annotations

import json

import click

from .common import DIR, clean_errors, config_option, json_option
from .group import main
from .progress import progress_line, progress_options, with_progress


def _compact_figures(p, elapsed: float) -> tuple[int, int, str]:
    return (
        p.rows_done,
        p.rows_total,
        (f"{p.files_done:,} of {p.files_total:,} files written  {p.rows_done:,} rows ({p.rows_done / elapsed:,.0f}/s)"),
    )


@main.command()
@click.argument("changefeed_dir", type=DIR)
@config_option
@click.option(
    "--output",
    "output_dir",
    type=DIR,
    help="Write the compacted changefeed to this directory (safe while readers run; run again to catch up).",
)
@click.option("--in-place", is_flag=True, help="Replace the files in CHANGEFEED_DIR itself (no reader may run).")
@click.option(
    "--i-know-no-reader-is-running",
    "no_reader_running",
    is_flag=True,
    help="Required by --in-place (but on a Delta or Iceberg changefeed): no Spark query or stream and no producer "
    "uses CHANGEFEED_DIR, and no streaming checkpoint over it will be resumed.",
)
@click.option(
    "--target-rows",
    type=click.IntRange(min=1),
    default=1_000_000,
    show_default=True,
    help="Merge neighbouring files into files of at most this many rows.",
)
@click.option(
    "--full-groups-only",
    is_flag=True,
    help="With --output: leave a last run of files below --target-rows for a later run.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be merged, change nothing.")
@click.option("--no-sync", is_flag=True, help="DURABILITY TRADE-OFF: skip fsync.")
@progress_options
@json_option("the summary")
@clean_errors
def compact(
    changefeed_dir,
    output_dir,
    in_place,
    no_reader_running,
    target_rows,
    full_groups_only,
    dry_run,
    no_sync,
    progress,
    progress_interval,
    as_json,
) -> None:
    """Merge small files of CHANGEFEED_DIR (a directory or s3://BUCKET/PREFIX) into larger
    ones (see docs/spark.md).

    --output DIR writes a new changefeed with the same contract, which readers switch to
    explicitly. --in-place replaces published files, which running readers and streaming
    checkpoints cannot follow, so it needs --i-know-no-reader-is-running; on a Delta
    changefeed it is one Delta commit that deletes no file, safe while readers run (on an
    Iceberg changefeed, one snapshot, the same way).
    """
    from ..sinks.parquet import compact as run_compact

    if output_dir is None and not in_place:
        raise click.UsageError(
            "say where the compacted files go: --output DIR (safe with readers running) or --in-place"
        )
    if output_dir is not None and in_place:
        raise click.UsageError("--output and --in-place exclude each other")
    if full_groups_only and in_place:
        raise click.UsageError("--full-groups-only goes with --output")
    bar = None if dry_run else progress_line(progress, progress_interval, _compact_figures)
    r = with_progress(
        bar,
        lambda: run_compact(
            changefeed_dir,
            output=output_dir,
            in_place=in_place,
            no_reader_running=no_reader_running,
            target_rows=target_rows,
            full_groups_only=full_groups_only,
            durable=not no_sync,
            dry_run=dry_run,
            on_progress=bar,
        ),
    )
    if as_json:
        click.echo(json.dumps(r.as_dict(), indent=2))
        return
    if r.recovered:
        click.echo("finished an interrupted in-place compaction first")
    done = (
        f"{'would write' if r.dry_run else 'wrote'} {r.files_written:,} file(s), {r.rows:,} rows, "
        f"merging {r.files_merged:,} of {r.files_before:,} file(s)"
        if r.files_written
        else "nothing to do"
    )
    click.echo(
        f"{done}; {r.target} {'would hold' if r.dry_run else 'holds'} tx_seq 0..{r.next_tx_seq - 1} "
        f"in {r.files_after:,} file(s)"
    )
