"""``olr-buffer mirror``."""

from __future__ import annotations

import click

from .common import (
    clean_errors,
    config_option,
    log_format_option,
    log_level_option,
    metrics_options,
    start_logging,
    start_metrics,
)
from .group import main
from .signals import stop_on_signals


def _mirror_tables(ctx, param, value):
    if value is None:
        return None
    tables = set()
    for item in value.split(","):
        owner, dot, table = item.strip().partition(".")
        if not dot or not owner or not table:
            raise click.BadParameter(f"{item.strip()!r}: give OWNER.TABLE, names as in the changefeed")
        tables.add((owner, table))
    return tables


@main.command()
@click.argument("changefeed_dir")
@config_option
@click.option(
    "--target", required=True, help="Directory or s3://BUCKET/PREFIX of the mirror tables (TARGET/OWNER/TABLE/)."
)
@click.option("--tables", callback=_mirror_tables, help="Only these tables: OWNER.TABLE,... (default: every table).")
@click.option(
    "--until-caught-up", is_flag=True, help="Exit 0 once every table holds the changefeed's last transaction."
)
@click.option(
    "--history", is_flag=True, help="Also keep TARGET/OWNER/TABLE__history/: every version of each row (SCD type 2)."
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="Seconds between two looks for newly published files.",
)
@click.option(
    "--batch-rows",
    type=click.IntRange(min=1),
    default=200_000,
    show_default=True,
    help="Changefeed rows read into one batch (whole files), applied by one commit per table.",
)
@metrics_options
@log_level_option
@log_format_option
@clean_errors
def mirror(
    changefeed_dir,
    target,
    tables,
    until_caught_up,
    history,
    poll_interval,
    batch_rows,
    metrics_port,
    metrics_host,
    log_level,
    log_format,
) -> None:
    """Keep each source table of CHANGEFEED_DIR (a directory or s3://BUCKET/PREFIX, plain or
    Delta) as a typed Delta table at TARGET/OWNER/TABLE/: one row per key, exactly once.
    Follows the changefeed; SIGTERM or SIGINT stops it (exit 0). See docs/mirror.md."""

    from ..mirror import Mirror, MirrorMetrics, MirrorOptions

    start_logging(log_level, log_format, "info")
    stop, _ = stop_on_signals("olr_buffer.mirror", at_once=True)  # (a second signal: at once)
    service = Mirror(MirrorOptions(changefeed_dir, target, tables, until_caught_up, poll_interval, batch_rows, history))
    if metrics_port is not None:
        start_metrics(MirrorMetrics(service), metrics_host, metrics_port, "olr_buffer.mirror")
    result = service.run(stop)
    if until_caught_up:
        click.echo(
            f"mirrored up to tx_seq {result.last_tx_seq}: {result.transactions} transaction(s), "
            f"{result.changes} change(s), {result.commits} table commit(s)"
        )
