"""``olr-buffer run``: the service."""

from __future__ import annotations

import signal
import threading

import click

from .common import (
    DIR,
    ByteSize,
    changefeed_option,
    clean_errors,
    config_option,
    log_format_option,
    log_level_option,
    metrics_options,
    pipeline_options,
    pipeline_settings,
    queue_option,
    run_recording_failure,
    start_logging,
    start_metrics,
)
from .group import ENV_PREFIX, main
from .signals import EARLY_SIGTERM, stop_on_signals


class StartScn(click.ParamType):
    """An SCN (0 to 2^64-2) or ``now``: OpenLogReplicator's ``Scn::none()`` (2^64-1)."""

    name = "SCN|now"

    def convert(self, value, param, ctx) -> int:
        from ..olr_protocol import SCN_NOW

        if isinstance(value, int):
            return value
        text = str(value).strip().lower()
        if text == "now":
            return SCN_NOW
        try:
            scn = int(text)
        except ValueError:
            self.fail(f"{value!r} is neither an SCN nor 'now'", param, ctx)
        if not 0 <= scn < SCN_NOW:
            self.fail(f"{value} is outside 0 to {SCN_NOW - 1} (give 'now' for now)", param, ctx)
        return scn


def _threads(ctx, param, value):
    if value is None or value == "":
        return None
    try:
        threads = sorted({int(t) for t in str(value).split(",") if t.strip()})
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a list of thread numbers like 1,2", ctx=ctx, param=param) from None
    if not threads or threads[0] <= 0:
        raise click.BadParameter("thread numbers are positive integers", ctx=ctx, param=param)
    return threads


@main.command()
@click.argument("input_dir", required=False, type=DIR, envvar=f"{ENV_PREFIX}_RUN_INPUT")
@config_option
@queue_option()
@changefeed_option()
@click.option(
    "--threads", callback=_threads, help="Redo threads in play, e.g. 1,2 (default: those with files at start)."
)
@click.option(
    "--flush-interval",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Publish safe transactions at least this often (seconds): the latency a Spark stream sees.",
)
@click.option(
    "--poll-interval",
    type=click.FloatRange(min=0.001),
    default=0.1,
    show_default=True,
    help="How often an idle reader looks for new lines and files (seconds); at most half of "
    "--flush-interval (but not below 0.01). At 0.05 or less, a reader that just found lines looks again sooner.",
)
@click.option(
    "--stall-warning",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Warn once about a thread in play that wrote nothing for this many seconds and is not closed, "
    "while a commit waits for it.",
)
@pipeline_options
@metrics_options
@log_level_option
@log_format_option
@click.option(
    "--log-summary-interval",
    type=click.FloatRange(min=0),
    default=60.0,
    show_default=True,
    help="Seconds between two INFO lines of what was published (files, transactions, rows, the "
    "changefeed's position, the lag), when something was; 0: none. Each file is a DEBUG line.",
)
@click.option(
    "--store-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="A call to the changefeed's store (S3) that has not returned after this many seconds counts as "
    "an outage: logged and in the metrics at once, like a refused connection; while the service stops, "
    "it is given up (what is not published stays in the queue).",
)
@click.option(
    "--health-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="/health answers 503 once the service's loop has not turned for this many seconds.",
)
@click.option(
    "--standby",
    is_flag=True,
    help="Stand by while another service (its own queue, the same source and changefeed) writes the "
    "changefeed; take it over when its lease ends, reading the source from what the changefeed "
    "published (as --adopt-changefeed). Without a holder, start at once (docs/operations.md, Standby).",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=15.0,
    show_default=True,
    help="Length of the changefeed's lease (on object storage): a standby takes over this long (plus "
    "--lease-clock-skew) after the writer's last renewal.",
)
@click.option(
    "--lease-renew-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Renew the lease this often (seconds; default: a third of --lease-seconds); less than "
    "half of --lease-seconds.",
)
@click.option(
    "--lease-clock-skew",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    help="Difference between the machines' clocks allowed for: a lease is taken over only this long after it expired.",
)
@click.option(
    "--standby-poll-interval",
    type=click.FloatRange(min=0.01),
    default=1.0,
    show_default=True,
    help="How often a standby looks at the changefeed's lease (seconds).",
)
@click.option("--slot", default="olr_buffer", show_default=True, help="PostgreSQL source: the replication slot.")
@click.option("--publication", default="olr_buffer", show_default=True, help="PostgreSQL source: the publication.")
@click.option(
    "--no-initial-copy", is_flag=True, help="PostgreSQL source: do not copy the tables when the slot is created."
)
@click.option(
    "--no-streaming",
    is_flag=True,
    help="PostgreSQL source: protocol 1, the server sends transactions only at commit (and spills large ones).",
)
@click.option(
    "--start-scn",
    type=StartScn(),
    default="0",
    show_default=True,
    help="OpenLogReplicator source (olr://): where a new queue asks the sender to START: an SCN, or "
    "'now' (from now on). olr-buffer serve takes 0 as the start of its changefeed; OpenLogReplicator "
    "takes 0 as an SCN like any other, and 'now' as now.",
)
@click.option(
    "--max-message-size",
    type=ByteSize(),
    default=None,
    help="OpenLogReplicator source (olr://): the largest message taken (default 1GiB; one message per "
    "transaction holds a whole one).",
)
@click.option(
    "--accept-gap",
    is_flag=True,
    help="OpenLogReplicator source (olr://): when the sender's confirmed position is ahead of what the "
    "queue holds (it will not send the transactions between again), publish on from there, without "
    "them, instead of stopping.",
)
@clean_errors
def run(
    input_dir,
    queue_dir,
    changefeed_dir,
    threads,
    flush_interval,
    poll_interval,
    stall_warning,
    metrics_port,
    metrics_host,
    log_level,
    log_format,
    log_summary_interval,
    store_timeout,
    health_timeout,
    standby,
    lease_seconds,
    lease_renew_interval,
    lease_clock_skew,
    standby_poll_interval,
    slot,
    publication,
    no_initial_copy,
    no_streaming,
    start_scn,
    max_message_size,
    accept_gap,
    **pipeline,
) -> None:
    """The service: follow the redo logs of INPUT_DIR as they grow and switch, publish each
    transaction once the watermark allows. SIGTERM or SIGINT stops it cleanly (exit 0);
    restarted on the same directories, it resumes from the queue. Stopping, a call to the
    changefeed's store is given --store-timeout seconds (a second SIGTERM or SIGINT: none),
    then what is not published stays in the queue for the next start.

    INPUT_DIR may be a PostgreSQL URI (postgresql://user@host/db): the source is then that
    database's logical replication (see docs/postgresql.md); or olr://HOST:PORT/DATABASE:
    an OpenLogReplicator (or olr-buffer serve) that sends DATABASE over its network
    protocol (see docs/operations.md)."""
    from ..sources import SourceUsageError, locate

    missing = [
        n for n, v in (("INPUT_DIR", input_dir), ("--queue", queue_dir), ("--changefeed", changefeed_dir)) if not v
    ]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)} (on the command line, in the environment or in --config)")
    # the source's own flags (each kind of source takes those it knows: sources/base.py, SourceKind.options)
    source_flags = dict(
        slot=slot,
        publication=publication,
        no_initial_copy=no_initial_copy,
        no_streaming=no_streaming,
        start_scn=start_scn,
        max_message_size=max_message_size,
        accept_gap=accept_gap,
        standby=standby,
    )
    try:  # an unknown scheme, a URI that cannot be parsed: before any directory is made or any server tried
        source = locate(input_dir, flags=source_flags)
        source.check_location()
    except SourceUsageError as exc:
        raise click.BadParameter(exc.message, param_hint="INPUT_DIR") from None
    start_logging(log_level, log_format, "info")
    pipeline["log_summary_seconds"] = log_summary_interval
    pipeline["store_timeout_seconds"] = store_timeout
    renew = lease_renew_interval if lease_renew_interval is not None else lease_seconds / 3
    if renew >= lease_seconds / 2:
        raise click.BadParameter(
            f"{renew:g} s: a lease of {lease_seconds:g} s must be renewed more often than every "
            f"{lease_seconds / 2:g} s",
            param_hint="--lease-renew-interval",
        )
    from ..store import LeaseTiming

    pipeline["lease"] = LeaseTiming(ttl=lease_seconds, renew=renew, skew=lease_clock_skew)
    pipeline["standby"] = standby
    pipeline["standby_poll_seconds"] = standby_poll_interval
    run_recording_failure(
        queue_dir,
        lambda: _serve(
            source,
            queue_dir,
            changefeed_dir,
            threads,
            flush_interval,
            poll_interval,
            stall_warning,
            metrics_port,
            metrics_host,
            pipeline,
            health_timeout,
        ),
    )


def _serve(
    source,
    queue_dir,
    changefeed_dir,
    threads,
    flush_interval,
    poll_interval,
    stall_warning,
    metrics_port,
    metrics_host,
    pipeline,
    health_timeout,
) -> None:

    # before the pipeline's imports (pyarrow takes a while): a stop asked for while the
    # service starts is a clean stop, not a kill; so is one that came before (see signals.py)
    hurry = threading.Event()  # (a second SIGTERM or SIGINT: what does not answer is not waited for)
    stop, on_signal = stop_on_signals("olr_buffer", hurry)
    if EARLY_SIGTERM:
        on_signal(signal.SIGTERM, None)

    from ..runtime import run_service
    from ..service.metrics import Metrics
    from ..service.role import ServiceRole

    role = ServiceRole()
    metrics = None
    if metrics_port is not None:
        metrics = Metrics(stale_after=health_timeout)
        start_metrics(metrics, metrics_host, metrics_port, "olr_buffer")
    opts = pipeline_settings(
        **pipeline,
        threads=threads,
        flush_seconds=flush_interval,
        poll_seconds=poll_interval,
        stall_seconds=stall_warning,
    )
    from ..service.failure import record_running

    started: list[bool] = []

    def on_tick() -> None:
        if not started:  # the queue is ours now: if this run is killed, status says so
            started.append(True)
            record_running(queue_dir)

    run_service(source, queue_dir, changefeed_dir, opts, stop, on_tick=on_tick, role=role, metrics=metrics, hurry=hurry)
