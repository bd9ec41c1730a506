"""``olr-buffer replay``."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from .common import (
    DIR,
    changefeed_option,
    clean_errors,
    config_option,
    json_option,
    log_format_option,
    pipeline_options,
    pipeline_settings,
    queue_option,
    run_recording_failure,
    start_logging,
)
from .group import main
from .progress import progress_line, progress_options, with_progress

if TYPE_CHECKING:
    from ..dispatcher import ReplayFigures


@main.command()
@click.argument("input_dir", type=DIR)
@config_option
@queue_option(required=True)
@changefeed_option(required=True)
@pipeline_options
@progress_options
@click.option(
    "--engine",
    type=click.Choice(["process", "spark"]),
    default="process",
    show_default=True,
    help="process: this process; spark: a Spark job (pip install 'olr-buffer[spark]'), the same changefeed "
    "(docs/spark.md).",
)
@click.option(
    "--master",
    default=None,
    help="--engine spark: the Spark master URL (default: spark-submit's, else local[*]).",
)
@click.option(
    "--until-watermark",
    is_flag=True,
    help="--engine spark: the logs go on (run takes over): publish only the commits every thread's files are "
    "past; the rest is left for run --adopt-changefeed.",
)
@click.option(
    "--spark-staging",
    "staging",
    default=None,
    metavar="DIR|s3://BUCKET/PREFIX",
    help="--engine spark: where the executors leave the sorted rows for the driver to publish; on a cluster, "
    "a place every executor and the driver reach (default: QUEUE/staging).",
)
@json_option("the summary")
@log_format_option
@clean_errors
def replay(
    input_dir,
    queue_dir,
    changefeed_dir,
    progress,
    progress_interval,
    engine,
    master,
    until_watermark,
    staging,
    as_json,
    log_format,
    **pipeline,
) -> None:
    """Replay archived redo logs of INPUT_DIR into the changefeed, offline, then exit.

    Run again on the same directories after a kill or a crash, it finishes what was left
    undone and publishes no duplicate.
    """
    from ..dead_letters import whole_lines_end
    from ..runtime import replay as run_replay

    start_logging(None, log_format, "warning")
    opts = pipeline_settings(**pipeline)
    if engine != "spark":
        for name, given in (
            ("--until-watermark", until_watermark),
            ("--master", master is not None),
            ("--spark-staging", staging is not None),
        ):
            if given:
                raise click.UsageError(f"{name} goes with --engine spark")
    else:
        _refuse_queue_options()
        _replay_on_spark(
            input_dir, queue_dir, changefeed_dir, opts, master, until_watermark, staging, progress, as_json
        )
        return
    dead_letter = opts.dead_letter
    bar = progress_line(progress, progress_interval, _replay_figures)
    dead_letter_start = whole_lines_end(dead_letter)
    # status: the state of this queue is that of this replay (failed, or not)
    summary = with_progress(
        bar,
        lambda: run_recording_failure(
            queue_dir, lambda: run_replay(input_dir, queue_dir, changefeed_dir, opts, on_progress=bar)
        ),
    )
    bad_lines = _dead_letters_since(dead_letter, dead_letter_start) if summary.quarantined else []
    if as_json:
        click.echo(json.dumps({**summary.as_dict(), "quarantined_lines": bad_lines}, indent=2))
        return
    s = summary
    rate = s.records_read / s.seconds if s.seconds > 0 else 0.0
    click.echo(
        f"replayed {s.records_read:,} records (lwn heartbeats and close records aside) from {len(s.threads)} thread(s) "
        f"in {s.seconds:.2f}s ({rate:,.0f} records/s)\n"
        + _published_lines(s)
        + "\n"
        + (
            f"abandoned by the retention limit {s.abandoned_transactions:,} ({s.abandoned_rows:,} rows not published); "
            f"their later records {s.abandoned_records:,}\n"
            if s.abandoned_transactions or s.abandoned_records
            else ""
        )
        + f"queue {s.queue_segments} segment(s), {s.queue_bytes / 1e6:,.1f} MB; "
        f"{s.checkpoints} checkpoint(s), {s.segments_deleted} segment(s) cleaned up"
        + (f"\nquarantined {s.quarantined:,} bad record(s) in {dead_letter}:" if s.quarantined else "")
        + "".join(f"\n  {b['file']}:{b['line']}: {b['reason']}" for b in bad_lines)
    )


#: replay's options that --engine spark has no use for: the queue's (the Spark job keeps no
#: queue: Spark shuffles the records), retention (the job sees the whole input at once), the
#: periodic progress line (the job prints a line per step)
_NOT_ON_SPARK = (
    "segment_size",
    "block_records",
    "checkpoint_interval",
    "retain_segments",
    "retain_age",
    "transaction_retention",
    "transaction_retention_scn",
    "progress_interval",
)


def _refuse_queue_options() -> None:
    """--engine spark with an option given (command line, environment, --config) that it
    would not honour: a usage error naming it, rather than an option silently ignored."""
    ctx = click.get_current_context()
    params = {p.name: p for p in ctx.command.params}
    for name in _NOT_ON_SPARK:
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            flag = params[name].opts[0]
            raise click.UsageError(f"{flag} does not apply to --engine spark (docs/spark.md, Replay on Spark)")


def _replay_on_spark(
    input_dir, queue_dir, changefeed_dir, opts, master, until_watermark, staging, progress, as_json
) -> None:
    """``--engine spark``: the replay as a Spark job of a session on ``master``."""
    import os
    import sys
    import time

    from ..spark import replay_on_spark
    from ..spark_sink.reading import needs_pyspark
    from .pandas_probe import allow_pandas

    allow_pandas()  # the Spark driver hands pandas objects to pyarrow
    start = time.monotonic()
    show = progress is not False

    @needs_pyspark
    def session():
        from pyspark.sql import SparkSession

        # Spark's console progress bar off: with progress, the steps' lines stand in its place
        # (it would rewrite itself over them); with --no-progress, the user asked for none,
        # and a slow stage rewrites the bar every 200 ms into a log file or a pipe.
        builder = SparkSession.builder.appName("olr-buffer replay").config("spark.ui.showConsoleProgress", "false")
        if master is not None:
            builder = builder.master(master)
        if master is None or master.startswith("local"):
            # the Python workers of a local master: this interpreter, which has olr-buffer
            os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return builder.getOrCreate()  # without --master: spark-submit's, else local[*]

    def on_stage(name: str) -> None:
        if show:
            click.echo(f"[{time.monotonic() - start:7.1f}s] {name}", err=True)

    spark = session()
    try:
        s = replay_on_spark(
            spark,
            input_dir,
            queue_dir,
            changefeed_dir,
            file_rows=opts.file_rows,
            table_format=opts.table_format,
            dead_letter=opts.dead_letter,
            durable=opts.durable,
            until_watermark=until_watermark,
            changefeed_mode=opts.changefeed_mode,
            iceberg_catalog=opts.iceberg_catalog,
            iceberg_table=opts.iceberg_table,
            adopt_changefeed=opts.adopt_changefeed,
            staging=staging,
            on_stage=on_stage,
        )
    finally:
        spark.stop()
    if as_json:
        click.echo(json.dumps(s.as_dict(), indent=2))
        return
    rate = s.records_read / s.seconds if s.seconds > 0 else 0.0
    click.echo(
        f"replayed {s.records_read:,} records (lwn heartbeats and close records aside) from "
        f"{len(s.threads)} thread(s), {s.files_read} file(s), on Spark in {s.seconds:.2f}s ({rate:,.0f} records/s)\n"
        + _published_lines(s)
        + (
            f"; ended above the watermark {s.watermark} {s.held_for_run:,} (left for run --adopt-changefeed)"
            if until_watermark
            else ""
        )
        + (
            "\nrun needs the files from: "
            + ", ".join(f"thread {t} sequence {q}" for t, q in sorted(s.run_from.items()))
            if s.run_from
            else ""
        )
        + (f"\nquarantined {s.quarantined:,} bad record(s) in {opts.dead_letter}" if s.quarantined else "")
    )


def _published_lines(s: ReplayFigures) -> str:
    """The lines of a replay's summary that every engine's has: what was published, what
    the transaction rules set aside, what is still open (no line break at the end)."""
    return (
        f"published {s.transactions_published:,} transactions ({s.rows_published:,} rows); "
        f"changefeed now holds tx_seq 0..{s.next_tx_seq - 1} in {s.changefeed_files} file(s)\n"
        f"rolled back {s.rolled_back:,}; partial (no begin, not published) {s.no_begin:,}; "
        f"empty after compensation {s.empty:,}; compensations {s.compensations:,} "
        f"({s.unmatched_compensations:,} matched nothing); already published before {s.already_published:,}\n"
        f"late records ignored {s.late_records:,}; extra end records {s.extra_end_records:,}; "
        f"still open {s.open_transactions:,}"
    )


def _dead_letters_since(path: str, offset: int) -> list[dict]:
    """``file``, ``line``, ``reason`` of each record written to the dead-letter file from
    ``offset`` on (this run's), in the order written."""
    with open(path, "rb") as fh:
        fh.seek(offset)
        return [
            {k: doc[k] for k in ("file", "line", "reason")}
            for doc in (json.loads(text) for text in fh.read().splitlines() if text.strip())
            if "kind" not in doc  # an abandoned transaction, not a bad record
        ]


def _replay_figures(p, elapsed: float) -> tuple[int, int, str]:
    return (
        p.bytes_read,
        p.bytes_total,
        (
            f"{p.records:,} records ({p.records / elapsed:,.0f}/s)  "
            f"{p.published:,} transactions published  {p.open_transactions:,} open"
        ),
    )
