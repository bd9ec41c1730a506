"""``olr-buffer replay``."""

from __future__ import annotations

import json

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


@main.command()
@click.argument("input_dir", type=DIR)
@config_option
@queue_option(required=True)
@changefeed_option(required=True)
@pipeline_options
@progress_options
@json_option("the summary")
@log_format_option
@clean_errors
def replay(input_dir, queue_dir, changefeed_dir, progress, progress_interval, as_json, log_format, **pipeline) -> None:
    """Replay archived redo logs of INPUT_DIR into the changefeed, offline, then exit.

    Run again on the same directories after a kill or a crash, it finishes what was left
    undone and publishes no duplicate.
    """
    from ..dead_letters import whole_lines_end
    from ..runtime import replay as run_replay

    start_logging(None, log_format, "warning")
    opts = pipeline_settings(**pipeline)
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
        f"published {s.transactions_published:,} transactions ({s.rows_published:,} rows); "
        f"changefeed now holds tx_seq 0..{s.next_tx_seq - 1} in {s.changefeed_files} file(s)\n"
        f"rolled back {s.rolled_back:,}; partial (no begin, not published) {s.no_begin:,}; "
        f"empty after compensation {s.empty:,}; compensations {s.compensations:,} "
        f"({s.unmatched_compensations:,} matched nothing); already published before {s.already_published:,}\n"
        f"late records ignored {s.late_records:,}; extra end records {s.extra_end_records:,}; "
        f"still open {s.open_transactions:,}\n"
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
