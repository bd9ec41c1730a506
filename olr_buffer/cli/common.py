"""What the commands share: option types, the options of several commands, the --config
file, the log level, and how an error ends a command (one line, its exit code)."""

from __future__ import annotations

import functools
import logging
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import click

from ..errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, OlrBufferError, Terminated
from .group import LOG_LEVELS, main
from .signals import CLEAN_STOP, EARLY_SIGTERM, StoppedAtOnce, raise_on_sigterm

#: In the context's meta: the command's --log-format (``json``: its error is a JSON line too).
LOG_FORMAT = "olr_buffer.log_format"


#: A directory argument: whether it can be read or written is the command's to say (one
#: line, exit 1: the environment), not click's (exit 2: usage).
DIR = click.Path(file_okay=False, readable=False)

_SIZE = re.compile(r"^\s*([0-9]+)\s*([kmgt]?i?b?)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class DirMode(click.ParamType):
    """An octal directory mode such as ``0750``; the owner keeps rwx."""

    name = "mode"

    def convert(self, value: Any, param, ctx) -> int:
        try:
            mode = value if isinstance(value, int) else int(str(value), 8)
        except ValueError:
            self.fail(f"{value!r} is not an octal mode like 0750", param, ctx)
        if not 0 <= mode <= 0o777 or mode & 0o700 != 0o700:
            self.fail(f"{value!r}: a mode from 0700 to 0777 (the owner needs rwx)", param, ctx)
        return mode


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


class StartTime(click.ParamType):
    """``now``, an ISO-8601 time (``2024-06-01T00:00:00Z``; UTC if it has no offset), or
    nanoseconds since the epoch."""

    name = "time"

    def convert(self, value: Any, param, ctx) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip()
        if text.lower() == "now":
            return time.time_ns()
        if text.lstrip("-").isdigit():
            return int(text)
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{value!r} is not 'now', an ISO-8601 time or nanoseconds since the epoch", param, ctx)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def clean_errors(fn: Callable) -> Callable:
    """Turn olr-buffer's errors into one line on stderr and their exit code: with
    ``--log-format json``, a JSON log line with the error's facts as fields."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context(silent=True)
        # run keeps the early handler until its own clean stop takes over (see run.py)
        clean_stop = ctx is not None and ctx.info_name in CLEAN_STOP
        previous = None if clean_stop else raise_on_sigterm()
        try:
            if EARLY_SIGTERM and not clean_stop:
                raise Terminated()
            return fn(*args, **kwargs)
        except OlrBufferError as exc:
            ctx = click.get_current_context(silent=True)
            if ctx is not None and ctx.meta.get(LOG_FORMAT) == "json":
                logging.getLogger("olr_buffer").critical(
                    "error: %s",
                    exc,
                    extra={**exc.facts, "error": type(exc).__name__, "hint": exc.hint, "exit_code": exc.exit_code},
                )
            else:
                click.echo(f"olr-buffer: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except StoppedAtOnce as exc:
            click.echo(f"olr-buffer: stopped at once ({exc} again): what it waited for is left undone", err=True)
            sys.exit(0)
        except Terminated:
            ctx = click.get_current_context(silent=True)
            resumes = ctx is not None and ctx.info_name in ("replay", "compact")
            click.echo(
                "olr-buffer: terminated (SIGTERM)" + ("; run the same command again: it resumes" if resumes else ""),
                err=True,
            )
            sys.exit(EXIT_TERMINATED)
        except KeyboardInterrupt:
            click.echo("olr-buffer: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            # source processes ran (the module is imported only then): reap their fork server
            runner = sys.modules.get("olr_buffer.sources.runner")
            if runner is not None:
                runner.stop_fork_server()

    return wrapper


def command_log_level(own: str | None, default: str) -> str:
    """A command's --log-level, else the group's, else ``default``."""
    return own or click.get_current_context().meta.get("olr_buffer.log_level") or default


_CONFIG_ALIASES = {"input": "input_dir", "queue": "queue_dir", "changefeed": "changefeed_dir", "state": "state_dir"}


def _load_config(ctx: click.Context, param, value):
    """--config FILE: its keys become the defaults of the command's options (flags and
    environment variables given win). Keys of another command are ignored, so that one
    file serves them all; a key no command knows is an error."""
    if value:
        from ..service.config import load_config

        try:
            cfg = load_config(value)
        except OlrBufferError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        known = {p.name for p in ctx.command.params}
        anywhere = {p.name for c in main.commands.values() for p in c.params}
        cfg = {_CONFIG_ALIASES.get(k, k): v for k, v in cfg.items()}
        unknown = sorted(set(cfg) - anywhere)
        if unknown:
            raise click.BadParameter(f"{value}: unknown key(s) {', '.join(unknown)}", ctx=ctx, param=param)
        cfg = {k: v for k, v in cfg.items() if k in known}
        if isinstance(cfg.get("threads"), list):
            cfg["threads"] = ",".join(str(t) for t in cfg["threads"])
        _check_config_values(ctx, value, cfg)
        ctx.default_map = {**(ctx.default_map or {}), **cfg}
    return value


def _check_config_values(ctx: click.Context, path: str, cfg: dict[str, Any]) -> None:
    """A bad value in the file is reported against the file and its key (``FILE: key
    'flush_interval': reason``), not against the option and its environment variable."""
    keys = {v: k for k, v in _CONFIG_ALIASES.items()}
    for param in ctx.command.params:
        if param.name in cfg:
            try:
                checked = param.type_cast_value(ctx, cfg[param.name])
                if param.callback is not None:
                    param.callback(ctx, param, checked)
            except click.BadParameter as exc:
                raise click.UsageError(
                    f"{path}: key '{keys.get(param.name, param.name)}': {exc.message}", ctx=ctx
                ) from None


def config_option(fn: Callable) -> Callable:
    """``--config FILE``: a TOML file with any of the command's options."""
    return click.option(
        "--config",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load_config,
        help="TOML file with any of these options (input, queue, changefeed, threads, flush_interval, ...); "
        "the command line and OLR_BUFFER_* environment variables win.",
    )(fn)


def queue_option(required: bool = False) -> Callable[[Callable], Callable]:
    """``--queue QUEUE_DIR``."""
    return click.option("--queue", "queue_dir", required=required, type=DIR, help="Queue directory.")


def changefeed_option(required: bool = False) -> Callable[[Callable], Callable]:
    """``--changefeed CHANGEFEED_DIR``: where a command that reads input publishes (replay, run)."""
    return click.option(
        "--changefeed",
        "changefeed_dir",
        required=required,
        type=DIR,
        help="Changefeed directory, or s3://BUCKET/PREFIX (AWS variables: docs/operations.md).",
    )


def json_option(what: str) -> Callable[[Callable], Callable]:
    """``--json``: print ``what`` (the summary, the status) as JSON."""
    return click.option("--json", "as_json", is_flag=True, help=f"Print {what} as JSON.")


def metrics_options(fn: Callable) -> Callable:
    """``--metrics-port`` and ``--metrics-host`` (run, serve, mirror): see :func:`start_metrics`."""
    fn = click.option(
        "--metrics-host", default="127.0.0.1", show_default=True, help="Address for the metrics (loopback by default)."
    )(fn)
    return click.option(
        "--metrics-port",
        type=click.IntRange(0, 65535),
        default=None,
        help="Serve Prometheus metrics and /health on this port (off by default).",
    )(fn)


def log_level_option(fn: Callable) -> Callable:
    """A command's own ``--log-level`` (see :func:`command_log_level`)."""
    return click.option(
        "--log-level", type=LOG_LEVELS, default=None, help="Log level (default: the group's, else info)."
    )(fn)


def log_format_option(fn: Callable) -> Callable:
    """``--log-format text|json`` (see :func:`start_logging`)."""
    return click.option(
        "--log-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="json: one object per line (ts ISO-8601, level, logger, msg, and facts as fields), the fatal error too.",
    )(fn)


def start_logging(log_level: str | None, log_format: str, default: str) -> None:
    """Log at the command's level (else the group's, else ``default``) in ``log_format``;
    with ``json``, the error that ends the command is a JSON line too (:func:`clean_errors`)."""
    from ..service.logs import setup_logging

    setup_logging(command_log_level(log_level, default), log_format)
    click.get_current_context().meta[LOG_FORMAT] = log_format


def start_metrics(metrics: Any, host: str, port: int, logger: str) -> Any:
    """Serve ``metrics`` (``/metrics``, ``/health``) on ``host:port`` and say where on ``logger``."""
    from ..service.metrics_http import serve_metrics

    server = serve_metrics(metrics, host, port)
    logging.getLogger(logger).info(
        "metrics on http://%s:%d/metrics",
        host,
        server.server_address[1],
        extra={"metrics_port": server.server_address[1]},
    )
    return server


#: Where an Iceberg changefeed's table is (replay, run, compact, status, serve): recorded in
#: the changefeed when given, so later commands need them only to override.
ICEBERG_OPTIONS = [
    click.option(
        "--iceberg-catalog",
        metavar="URI",
        default=None,
        help="An Iceberg changefeed's catalog: sqlite:////PATH/catalog.db (or another SQLAlchemy URL) for a SQL "
        "catalog, http(s)://... for a REST catalog (default: the one the changefeed records, else the SQLite "
        "file _iceberg/catalog.db beside a local changefeed; one on s3:// needs this).",
    ),
    click.option(
        "--iceberg-table",
        metavar="NS.NAME",
        default=None,
        help="An Iceberg changefeed's table name (default: the one the changefeed records, else "
        "olr_buffer.changefeed).",
    ),
]


def iceberg_options(fn: Callable) -> Callable:
    """--iceberg-catalog and --iceberg-table, for the commands that read a changefeed."""
    for option in reversed(ICEBERG_OPTIONS):
        fn = option(fn)
    return fn


_PIPELINE_OPTIONS = [
    click.option(
        "--segment-size", type=ByteSize(), default="64MiB", show_default=True, help="Queue segment size (roll point)."
    ),
    click.option(
        "--file-rows",
        type=click.IntRange(min=1),
        default=1_000_000,
        show_default=True,
        help="Publish a changefeed file once it holds this many rows (never splitting a transaction).",
    ),
    click.option(
        "--block-records",
        type=click.IntRange(min=1),
        default=4096,
        show_default=True,
        help="Records per queue block (the unit of I/O and compression).",
    ),
    click.option(
        "--checkpoint-interval",
        type=click.FloatRange(min=0),
        default=5.0,
        show_default=True,
        help="Seconds between checkpoints (publish, store the dispatcher's state, clean up segments).",
    ),
    click.option(
        "--retain-segments",
        type=click.IntRange(min=0),
        default=0,
        show_default=True,
        help="Keep this many segments that cleanup could delete (audit, re-derivation).",
    ),
    click.option(
        "--retain-age",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        help="Keep segments written within this many seconds, even when nobody needs them.",
    ),
    click.option(
        "--dead-letter",
        type=click.Path(dir_okay=False, readable=False),
        default=None,
        help="Write bad records to this JSON Lines file and go on, instead of stopping (off by default).",
    ),
    click.option(
        "--transaction-retention",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="DATA LOSS BY CHOICE: abandon a transaction without an end (not published; its queue segments "
        "freed) once it began more than this many seconds before the source's clock: the median tm of the "
        "last 5 commits and rollbacks (off by "
        "default; like Debezium's log.mining.transaction.retention.ms, in seconds).",
    ),
    click.option(
        "--transaction-retention-scn",
        type=click.IntRange(min=1),
        default=None,
        help="DATA LOSS BY CHOICE: abandon a transaction without an end once it began more than this many "
        "SCNs below the watermark (off by default).",
    ),
    click.option(
        "--changefeed-mode",
        type=DirMode(),
        default="0700",
        show_default=True,
        help="Mode of the changefeed directory; its files get it without the x bits (0750: a lake group reads them).",
    ),
    click.option(
        "--table-format",
        type=click.Choice(["parquet", "delta", "iceberg"]),
        default=None,
        help="delta: the changefeed is also a Delta Lake table, each published file added by a Delta commit; "
        "iceberg: an Apache Iceberg table, one snapshot a file "
        "(default: the changefeed's own format, recorded in it; parquet for a new one).",
    ),
    *ICEBERG_OPTIONS,
    click.option(
        "--adopt-changefeed",
        is_flag=True,
        help="RECOVERY: let this queue take over a changefeed written by another queue (a lost queue "
        "rebuilt from the same input); commits already in it are skipped (docs/failure-scenarios.md).",
    ),
    click.option(
        "--no-sync",
        is_flag=True,
        help="DURABILITY TRADE-OFF: skip fsync of queue and changefeed; a machine crash may lose recent work.",
    ),
]


def pipeline_options(fn: Callable) -> Callable:
    """The options `replay` and `run` share (queue, changefeed, checkpoints, bad input)."""
    for option in reversed(_PIPELINE_OPTIONS):
        fn = option(fn)
    return fn


def pipeline_settings(
    *,
    segment_size,
    file_rows,
    block_records,
    checkpoint_interval,
    retain_segments,
    retain_age,
    dead_letter,
    transaction_retention,
    transaction_retention_scn,
    changefeed_mode,
    table_format,
    iceberg_catalog,
    iceberg_table,
    adopt_changefeed,
    no_sync,
    **service,
):
    from ..runtime import PipelineOptions

    return PipelineOptions(
        segment_bytes=segment_size,
        file_rows=file_rows,
        block_records=block_records,
        durable=not no_sync,
        checkpoint_seconds=checkpoint_interval,
        retain_segments=retain_segments,
        retain_seconds=retain_age,
        dead_letter=dead_letter,
        transaction_retention_seconds=transaction_retention,
        transaction_retention_scn=transaction_retention_scn,
        changefeed_mode=changefeed_mode,
        table_format=table_format,
        iceberg_catalog=iceberg_catalog,
        iceberg_table=iceberg_table,
        adopt_changefeed=adopt_changefeed,
        **service,
    )


def run_recording_failure(queue_dir: str, serve: Callable[[], Any]) -> Any:
    """Run the service (or a replay); an error that stops it is recorded in the queue
    directory for ``status`` (``failed``), unless another process owns the queue."""
    from ..service.failure import clear_failure, record_failure
    from ..txbuffer import LmdbQueue, QueueLockedError

    if os.path.isdir(queue_dir) and LmdbQueue.owner_pid(queue_dir) is None:
        clear_failure(queue_dir)  # (not the record of a service that runs: this one will be refused)
    try:
        result = serve()
        clear_failure(queue_dir)  # stopped cleanly: no longer the record of a run that is killed
        return result
    except QueueLockedError:
        raise
    except OlrBufferError as exc:
        if os.path.isdir(queue_dir):
            record_failure(queue_dir, exc, exc.exit_code)
        raise
    except Exception as exc:
        if os.path.isdir(queue_dir):
            record_failure(queue_dir, exc, EXIT_ERROR)
        if click.get_current_context().meta.get(LOG_FORMAT) != "json":
            raise
        logging.getLogger("olr_buffer").critical(
            "stopped by an unexpected error: %s",
            exc,
            exc_info=True,
            extra={"error": type(exc).__name__, "exit_code": EXIT_ERROR},
        )
        sys.exit(EXIT_ERROR)
