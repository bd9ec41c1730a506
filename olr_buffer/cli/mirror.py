"""``olr-buffer mirror``."""

from __future__ import annotations

import logging

import click

from .common import LOG_FORMAT, clean_errors, command_log_level, config_option
from .group import LOG_LEVELS, main
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
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="Serve Prometheus metrics and /health on this port (off by default).",
)
@click.option(
    "--metrics-host", default="127.0.0.1", show_default=True, help="Address for the metrics (loopback by default)."
)
@click.option("--log-level", type=LOG_LEVELS, default=None, help="Log level (default: the group's, else info).")
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one object per line (ts ISO-8601, level, logger, msg, and facts as fields).",
)
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
    from ..service.logs import setup_logging
    from ..service.metrics_http import serve_metrics

    setup_logging(command_log_level(log_level, "info"), log_format)
    click.get_current_context().meta[LOG_FORMAT] = log_format
    stop, _ = stop_on_signals("olr_buffer.mirror")
    service = Mirror(MirrorOptions(changefeed_dir, target, tables, until_caught_up, poll_interval, batch_rows, history))
    if metrics_port is not None:
        http = serve_metrics(MirrorMetrics(service), metrics_host, metrics_port)
        logging.getLogger("olr_buffer.mirror").info(
            "metrics on http://%s:%d/metrics",
            metrics_host,
            http.server_address[1],
            extra={"metrics_port": http.server_address[1]},
        )
    result = service.run(stop)
    if until_caught_up:
        click.echo(
            f"mirrored up to tx_seq {result.last_tx_seq}: {result.transactions} transaction(s), "
            f"{result.changes} change(s), {result.commits} table commit(s)"
        )
