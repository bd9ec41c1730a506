"""``olr-buffer serve``."""

from __future__ import annotations

import re

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


def _listen_address(ctx, param, value):
    """``HOST:PORT`` (``[::1]:9000`` for IPv6) -> ``(host, port)``."""
    if value is None:
        return None
    host, sep, port = str(value).rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise click.BadParameter(f"{value!r} is not HOST:PORT (127.0.0.1:9000, [::1]:9000)", ctx=ctx, param=param)
    return host.removeprefix("[").removesuffix("]"), int(port)


@main.command()
@click.argument("changefeed_dir", type=click.Path(file_okay=False))
@config_option
@click.option(
    "--listen",
    "listen",
    required=True,
    callback=_listen_address,
    help="HOST:PORT to listen on for the receiver (0.0.0.0:9000 on every IPv4 address).",
)
@click.option(
    "--database",
    required=True,
    help="The database name receivers ask for (their database_name); also the messages' db.",
)
@click.option(
    "--state",
    "state_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Directory of the receiver's confirmed position (default: CHANGEFEED/_olr_buffer/serve).",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.01),
    default=0.2,
    show_default=True,
    help="Seconds between two looks for newly published files once the receiver has everything.",
)
@click.option(
    "--stall-timeout",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Close the connection of a receiver whose machine takes no byte of the stream for this many "
    "seconds while some wait for it (a slow but steady reader is kept).",
)
@click.option(
    "--takeover-after",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="A new connection takes over from the connected receiver when that one has made no progress "
    "(no request, no byte of the stream taken) for this many seconds; before, it is refused.",
)
@metrics_options
@log_level_option
@log_format_option
@click.option(
    "--no-sync",
    is_flag=True,
    help="DURABILITY TRADE-OFF: store confirmed positions without fsync; a machine crash may lose the last.",
)
@clean_errors
def serve(
    changefeed_dir,
    listen,
    database,
    state_dir,
    poll_interval,
    stall_timeout,
    takeover_after,
    metrics_port,
    metrics_host,
    log_level,
    log_format,
    no_sync,
) -> None:
    """Serve CHANGEFEED_DIR over OpenLogReplicator's network protocol: a receiver written for
    OpenLogReplicator (SynchDB, Debezium's OpenLogReplicator adapter) reads its committed
    transactions, confirms positions, and resumes after its last one. Follows the changefeed
    while `run` publishes; one receiver at a time. SIGTERM or SIGINT stops it (exit 0).
    See docs/operations.md."""

    from ..store import is_remote

    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", changefeed_dir) and not is_remote(changefeed_dir):
        raise click.BadParameter(
            "serve reads a changefeed directory or s3://BUCKET/PREFIX", param_hint="CHANGEFEED_DIR"
        )
    if is_remote(changefeed_dir) and state_dir is None:
        raise click.UsageError(
            "serve keeps the receiver's confirmed position in a local changefeed directory: "
            "with s3://BUCKET/PREFIX give --state DIR, a local directory for it"
        )
    start_logging(log_level, log_format, "info")
    stop, _ = stop_on_signals("olr_buffer.serve", at_once=True)  # (a second signal: at once)
    from ..serve import ServeOptions, StreamServer

    server = StreamServer(
        ServeOptions(
            changefeed_dir,
            listen[0],
            listen[1],
            database,
            state_dir=state_dir,
            poll_seconds=poll_interval,
            stall_seconds=stall_timeout,
            takeover_seconds=takeover_after,
            durable=not no_sync,
        )
    )
    if metrics_port is not None:
        from ..serve.metrics import ServeMetrics

        start_metrics(ServeMetrics(server), metrics_host, metrics_port, "olr_buffer.serve")
    server.run(stop)
