"""The ``olr-buffer`` command line: wiring only."""

from __future__ import annotations

import functools
import json
import logging
import os
import re
import signal
import sys
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

#: SIGTERMs received while the command started (its imports take 0.1-0.3 s): see _keep_early_sigterm.
_EARLY_SIGTERM: list[int] = []
#: Commands that SIGTERM stops cleanly (exit 0): their own handler is installed by _serve.
_CLEAN_STOP = ("run",)


def _keep_early_sigterm() -> None:
    """Keep a SIGTERM that comes while the command starts, instead of dying of it without
    a word: ``run`` then stops cleanly as soon as it can (exit 0, logged), another command
    ends as terminated (exit 143, one line). See :func:`clean_errors`."""
    try:
        if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
            signal.signal(signal.SIGTERM, lambda signum, _frame: _EARLY_SIGTERM.append(signum))
    except ValueError:  # not the main thread (an embedding program's worker)
        pass


if __name__ == "__main__" or os.path.basename(sys.argv[0]) == "olr-buffer":
    _keep_early_sigterm()  # the program, not a module another one imports: from its first import on

import click

from . import __version__
from .errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED, OlrBufferError, Terminated, printable

#: Environment variables: ``OLR_BUFFER_<OPTION>`` for the group's options,
#: ``OLR_BUFFER_<COMMAND>_<OPTION>`` for a command's (``OLR_BUFFER_RUN_QUEUE``).
ENV_PREFIX = "OLR_BUFFER"
_LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)
_LOG_FORMAT = "olr_buffer.log_format"


#: A directory argument: whether it can be read or written is the command's to say (one
#: line, exit 1: the environment), not click's (exit 2: usage).
_DIR = click.Path(file_okay=False, readable=False)

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


def _raise_on_sigterm() -> Any:
    """Make SIGTERM raise :class:`Terminated` in the main thread (``run`` installs its own
    clean stop over it); the handler it replaces, or ``None`` outside the main thread."""

    def terminated(_signum, _frame):
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread (an embedding program's worker)
        return None


def clean_errors(fn: Callable) -> Callable:
    """Turn olr-buffer's errors into one line on stderr and their exit code: with
    ``--log-format json``, a JSON log line with the error's facts as fields."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        ctx = click.get_current_context(silent=True)
        # run keeps the early handler until its own clean stop takes over (see _serve)
        clean_stop = ctx is not None and ctx.info_name in _CLEAN_STOP
        previous = None if clean_stop else _raise_on_sigterm()
        try:
            if _EARLY_SIGTERM and not clean_stop:
                raise Terminated()
            return fn(*args, **kwargs)
        except OlrBufferError as exc:
            ctx = click.get_current_context(silent=True)
            if ctx is not None and ctx.meta.get(_LOG_FORMAT) == "json":
                logging.getLogger("olr_buffer").critical(
                    "error: %s", exc, extra={**exc.facts, "error": type(exc).__name__, "hint": exc.hint,
                                            "exit_code": exc.exit_code})
            else:
                click.echo(f"olr-buffer: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except Terminated:
            ctx = click.get_current_context(silent=True)
            resumes = ctx is not None and ctx.info_name in ("replay", "compact")
            click.echo("olr-buffer: terminated (SIGTERM)" + ("; run the same command again: it resumes" if resumes else ""),
                       err=True)
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": ENV_PREFIX})
@click.version_option(__version__, prog_name="olr-buffer", allow_from_autoenv=False)
@click.option("--log-level", type=_LOG_LEVELS, default=None,
              help="Log level of every command (default: info for run, warning otherwise); a command's own "
                   "--log-level wins.")
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """olr-buffer: a disk-backed transaction buffer for Oracle change data capture.

    Every option can also be set in the environment: OLR_BUFFER_LOG_LEVEL for the ones
    above, OLR_BUFFER_<COMMAND>_<OPTION> for a command's (OLR_BUFFER_RUN_QUEUE,
    OLR_BUFFER_RUN_METRICS_PORT), and in a --config file. The command line wins over the
    environment, which wins over the file."""
    from .service import setup_logging

    ctx.meta["olr_buffer.log_level"] = log_level
    setup_logging(log_level or "warning", "text")


def _log_level(own: str | None, default: str) -> str:
    """A command's --log-level, else the group's, else ``default``."""
    return own or click.get_current_context().meta.get("olr_buffer.log_level") or default


_CONFIG_ALIASES = {"input": "input_dir", "queue": "queue_dir", "changefeed": "changefeed_dir", "state": "state_dir"}


def _load_config(ctx: click.Context, param, value):
    """--config FILE: its keys become the defaults of the command's options (flags and
    environment variables given win). Keys of another command are ignored, so that one
    file serves them all; a key no command knows is an error."""
    if value:
        from .service import load_config

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
                raise click.UsageError(f"{path}: key '{keys.get(param.name, param.name)}': {exc.message}",
                                       ctx=ctx) from None


def config_option(fn: Callable) -> Callable:
    """``--config FILE``: a TOML file with any of the command's options."""
    return click.option(
        "--config", type=click.Path(dir_okay=False), is_eager=True, expose_value=False, callback=_load_config,
        help="TOML file with any of these options (input, queue, changefeed, threads, flush_interval, ...); "
             "the command line and OLR_BUFFER_* environment variables win.",
    )(fn)


_PIPELINE_OPTIONS = [
    click.option("--segment-size", type=ByteSize(), default="64MiB", show_default=True,
                 help="Queue segment size (roll point)."),
    click.option("--file-rows", type=click.IntRange(min=1), default=1_000_000, show_default=True,
                 help="Publish a changefeed file once it holds this many rows (never splitting a transaction)."),
    click.option("--block-records", type=click.IntRange(min=1), default=4096, show_default=True,
                 help="Records per queue block (the unit of I/O and compression)."),
    click.option("--checkpoint-interval", type=click.FloatRange(min=0), default=5.0, show_default=True,
                 help="Seconds between checkpoints (publish, store the dispatcher's state, clean up segments)."),
    click.option("--retain-segments", type=click.IntRange(min=0), default=0, show_default=True,
                 help="Keep this many segments that cleanup could delete (audit, re-derivation)."),
    click.option("--retain-age", type=click.FloatRange(min=0), default=0.0, show_default=True,
                 help="Keep segments written within this many seconds, even when nobody needs them."),
    click.option("--dead-letter", type=click.Path(dir_okay=False, readable=False), default=None,
                 help="Write bad records to this JSON Lines file and go on, instead of stopping (off by default)."),
    click.option("--transaction-retention", type=click.FloatRange(min=0, min_open=True), default=None,
                 help="DATA LOSS BY CHOICE: abandon a transaction without an end (not published; its queue segments "
                      "freed) once it began more than this many seconds before the source's clock: the median tm of the "
                      "last 5 commits and rollbacks (off by "
                      "default; like Debezium's log.mining.transaction.retention.ms, in seconds)."),
    click.option("--transaction-retention-scn", type=click.IntRange(min=1), default=None,
                 help="DATA LOSS BY CHOICE: abandon a transaction without an end once it began more than this many "
                      "SCNs below the watermark (off by default)."),
    click.option("--changefeed-mode", type=DirMode(), default="0700", show_default=True,
                 help="Mode of the changefeed directory; its files get it without the x bits (0750: a lake group "
                      "reads them)."),
    click.option("--table-format", type=click.Choice(["parquet", "delta"]), default=None,
                 help="delta: the changefeed is also a Delta Lake table, each published file added by a Delta commit "
                      "(default: the changefeed's own format, recorded in it; parquet for a new one)."),
    click.option("--adopt-changefeed", is_flag=True,
                 help="RECOVERY: let this queue take over a changefeed written by another queue (a lost queue "
                      "rebuilt from the same input); commits already in it are skipped (docs/failure-scenarios.md)."),
    click.option("--no-sync", is_flag=True,
                 help="DURABILITY TRADE-OFF: skip fsync of queue and changefeed; a machine crash may lose recent work."),
]


def pipeline_options(fn: Callable) -> Callable:
    """The options `replay` and `run` share (queue, changefeed, checkpoints, bad input)."""
    for option in reversed(_PIPELINE_OPTIONS):
        fn = option(fn)
    return fn


def progress_options(fn: Callable) -> Callable:
    """``--progress/--no-progress`` and ``--progress-interval`` (replay, simulate, compact)."""
    fn = click.option("--progress-interval", type=click.FloatRange(min=0), default=10.0, show_default=True,
                      help="Seconds between two progress lines when stderr is not a terminal. Given (here, in the "
                           "environment or in --config), it turns progress on unless --no-progress says otherwise.")(fn)
    return click.option("--progress/--no-progress", default=None,
                        help="Progress on stderr (default: when stderr is a terminal or --progress-interval is given). "
                             "On a terminal one line rewritten in place; to a file or a pipe a plain line every "
                             "--progress-interval seconds.")(fn)


def _progress_line(progress: bool | None, interval: float, figures: Callable) -> "_ProgressLine | None":
    """The progress display a command asked for, or None."""
    terminal = sys.stderr.isatty()
    if progress is None:
        source = click.get_current_context().get_parameter_source("progress_interval")
        progress = terminal or source is not click.core.ParameterSource.DEFAULT
    return _ProgressLine(terminal, interval, figures) if progress else None


def _options(*, segment_size, file_rows, block_records, checkpoint_interval, retain_segments, retain_age,
             dead_letter, transaction_retention, transaction_retention_scn, changefeed_mode, table_format,
             adopt_changefeed, no_sync, **service):
    from .pipeline import PipelineOptions

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
        adopt_changefeed=adopt_changefeed,
        **service,
    )


@main.command()
@click.argument("input_dir", type=_DIR)
@config_option
@click.option("--queue", "queue_dir", required=True, type=_DIR, help="Queue directory.")
@click.option("--changefeed", "changefeed_dir", required=True, type=_DIR,
              help="Changefeed directory, or s3://BUCKET/PREFIX (AWS variables: docs/operations.md).")
@pipeline_options
@progress_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per line (ts ISO-8601, level, logger, msg, and facts as fields), the fatal "
                   "error too.")
@clean_errors
def replay(input_dir, queue_dir, changefeed_dir, progress, progress_interval, as_json, log_format, **pipeline) -> None:
    """Replay archived redo logs of INPUT_DIR into the changefeed, offline, then exit.

    Run again on the same directories after a kill or a crash, it finishes what was left
    undone and publishes no duplicate.
    """
    from .pipeline import replay as run_replay
    from .dead_letters import whole_lines_end
    from .service import setup_logging

    setup_logging(_log_level(None, "warning"), log_format)
    click.get_current_context().meta[_LOG_FORMAT] = log_format
    opts = _options(**pipeline)
    dead_letter = opts.dead_letter
    bar = _progress_line(progress, progress_interval, _replay_figures)
    dead_letter_start = whole_lines_end(dead_letter)
    try:
        # status: the state of this queue is that of this replay (failed, or not)
        summary = _run_recording_failure(
            queue_dir, lambda: run_replay(input_dir, queue_dir, changefeed_dir, opts, on_progress=bar))
    except BaseException:
        if bar:
            bar.abort()
        raise
    if bar:
        bar.done()
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
        + (f"abandoned by the retention limit {s.abandoned_transactions:,} ({s.abandoned_rows:,} rows not published); "
           f"their later records {s.abandoned_records:,}\n" if s.abandoned_transactions or s.abandoned_records else "")
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
@click.argument("input_dir", required=False, type=_DIR, envvar=f"{ENV_PREFIX}_RUN_INPUT")
@config_option
@click.option("--queue", "queue_dir", type=_DIR, help="Queue directory.")
@click.option("--changefeed", "changefeed_dir", type=_DIR,
              help="Changefeed directory, or s3://BUCKET/PREFIX (AWS variables: docs/operations.md).")
@click.option("--threads", callback=_threads, help="Redo threads in play, e.g. 1,2 (default: those with files at start).")
@click.option("--flush-interval", type=click.FloatRange(min=0), default=1.0, show_default=True,
              help="Publish safe transactions at least this often (seconds): the latency a Spark stream sees.")
@click.option("--poll-interval", type=click.FloatRange(min=0.001), default=0.1, show_default=True,
              help="How often an idle reader looks for new lines and files (seconds); at most half of "
                   "--flush-interval (but not below 0.01).")
@click.option("--stall-warning", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Warn once about a thread in play that wrote nothing for this many seconds and is not closed, "
                   "while a commit waits for it.")
@pipeline_options
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (off by default).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for the metrics (loopback by default).")
@click.option("--log-level", type=_LOG_LEVELS, default=None, help="Log level (default: the group's, else info).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per line (ts ISO-8601, level, logger, msg, and facts as fields), the fatal "
                   "error too.")
@click.option("--log-summary-interval", type=click.FloatRange(min=0), default=60.0, show_default=True,
              help="Seconds between two INFO lines of what was published (files, transactions, rows, the "
                   "changefeed's position, the lag), when something was; 0: none. Each file is a DEBUG line.")
@click.option("--slot", default="olr_buffer", show_default=True, help="PostgreSQL source: the replication slot.")
@click.option("--publication", default="olr_buffer", show_default=True, help="PostgreSQL source: the publication.")
@click.option("--no-initial-copy", is_flag=True, help="PostgreSQL source: do not copy the tables when the slot is created.")
@click.option("--no-streaming", is_flag=True,
              help="PostgreSQL source: protocol 1, the server sends transactions only at commit (and spills large ones).")
@click.option("--start-scn", type=click.IntRange(min=0), default=0, show_default=True,
              help="OpenLogReplicator source (olr://): the SCN a new queue asks the sender to START at (0: "
                   "OpenLogReplicator starts now, olr-buffer serve at the start of its changefeed).")
@click.option("--max-message-size", type=ByteSize(), default=None,
              help="OpenLogReplicator source (olr://): the largest message taken (default 1GiB; one message per "
                   "transaction holds a whole one).")
@clean_errors
def run(input_dir, queue_dir, changefeed_dir, threads, flush_interval, poll_interval, stall_warning, metrics_port,
        metrics_host, log_level, log_format, log_summary_interval, slot, publication, no_initial_copy, no_streaming,
        start_scn, max_message_size, **pipeline) -> None:
    """The service: follow the redo logs of INPUT_DIR as they grow and switch, publish each
    transaction once the watermark allows. SIGTERM or SIGINT stops it cleanly (exit 0);
    restarted on the same directories, it resumes from the queue.

    INPUT_DIR may be a PostgreSQL URI (postgresql://user@host/db): the source is then that
    database's logical replication (see docs/postgresql.md); or olr://HOST:PORT/DATABASE:
    an OpenLogReplicator (or olr-buffer serve) that sends DATABASE over its network
    protocol (see docs/operations.md)."""
    from .service import setup_logging

    from .sources import SourceUsageError, kind_of

    missing = [n for n, v in (("INPUT_DIR", input_dir), ("--queue", queue_dir), ("--changefeed", changefeed_dir)) if not v]
    if missing:
        raise click.UsageError(f"missing {', '.join(missing)} (on the command line, in the environment or in --config)")
    try:  # an unknown scheme, a URI that cannot be parsed: before any directory is made or any server tried
        kind_of(input_dir).check_location(input_dir)
    except SourceUsageError as exc:
        raise click.BadParameter(exc.message, param_hint="INPUT_DIR") from None
    setup_logging(_log_level(log_level, "info"), log_format)
    click.get_current_context().meta[_LOG_FORMAT] = log_format
    # the source's own flags (each kind of source takes those it knows: sources/base.py, SourceKind.options)
    source_flags = dict(slot=slot, publication=publication, no_initial_copy=no_initial_copy, no_streaming=no_streaming,
                        start_scn=start_scn, max_message_size=max_message_size)
    pipeline["log_summary_seconds"] = log_summary_interval
    _run_recording_failure(queue_dir, lambda: _serve(
        input_dir, queue_dir, changefeed_dir, threads, flush_interval, poll_interval, stall_warning, metrics_port,
        metrics_host, source_flags, pipeline))


def _run_recording_failure(queue_dir: str, serve: Callable[[], Any]) -> Any:
    """Run the service (or a replay); an error that stops it is recorded in the queue
    directory for ``status`` (``failed``), unless another process owns the queue."""
    from .service import clear_failure, record_failure
    from .txbuffer import LmdbQueue, QueueLockedError

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
        if click.get_current_context().meta.get(_LOG_FORMAT) != "json":
            raise
        logging.getLogger("olr_buffer").critical("stopped by an unexpected error: %s", exc, exc_info=True,
                                                 extra={"error": type(exc).__name__, "exit_code": EXIT_ERROR})
        sys.exit(EXIT_ERROR)


def _serve(input_dir, queue_dir, changefeed_dir, threads, flush_interval, poll_interval, stall_warning, metrics_port,
           metrics_host, source_flags, pipeline) -> None:
    import threading

    stop = threading.Event()

    def on_signal(signum, _frame):
        logging.getLogger("olr_buffer").info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    # before the pipeline's imports (pyarrow takes a while): a stop asked for while the
    # service starts is a clean stop, not a kill; so is one that came before (see main)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if _EARLY_SIGTERM:
        on_signal(signal.SIGTERM, None)

    from .pipeline import changefeed_at, run_service
    from .service import Metrics, serve_metrics
    metrics = None
    if metrics_port is not None:
        metrics = Metrics()
        server = serve_metrics(metrics, metrics_host, metrics_port)
        logging.getLogger("olr_buffer").info("metrics on http://%s:%d/metrics", metrics_host, server.server_address[1],
                                             extra={"metrics_port": server.server_address[1]})
    opts = _options(**pipeline, threads=threads, flush_seconds=flush_interval, poll_seconds=poll_interval,
                    stall_seconds=stall_warning)
    from .service import record_running

    started: list[bool] = []

    def on_tick(p) -> None:
        if not started:  # the queue is ours now: if this run is killed, status says so
            started.append(True)
            record_running(queue_dir)
        if metrics:
            metrics.update(p)

    from .sources import kind_of

    source_options = kind_of(input_dir).options(source_flags)
    summary = run_service(input_dir, queue_dir, changefeed_dir, opts, stop, on_tick=on_tick,
                          source_options=source_options)
    logging.getLogger("olr_buffer").info(
        "stopped cleanly: %d records read (lwn heartbeats aside), %d transactions published this run, %s",
        summary.records_read, summary.transactions_published,
        changefeed_at(summary.next_tx_seq),
        extra={"records": summary.records_read, "transactions": summary.transactions_published,
               "last_tx_seq": summary.next_tx_seq - 1},
    )


@main.command()
@config_option
@click.option("--queue", "queue_dir", type=_DIR, help="Queue directory.")
@click.option("--changefeed", "changefeed_dir", type=_DIR,
              help="Changefeed whose serve receivers to show (default: the queue's); alone, only them.")
@click.option("--serve-state", type=_DIR, default=None,
              help="serve's --state directory, if not the changefeed's own.")
@click.option("--mirror", "mirror_target", default=None,
              help="With --changefeed: the mirror at this target (`mirror --target`): how far behind, each table.")
@click.option("--json", "as_json", is_flag=True, help="Print the status as JSON.")
@clean_errors
def status(queue_dir, changefeed_dir, serve_state, mirror_target, as_json) -> None:
    """Show what the queue holds: segments, open transactions, readers, watermark,
    last published transaction, what cleanup may free, and the receivers that `serve`
    serves its changefeed to (confirmed position, lag). Safe while a service runs."""
    from .status import queue_status, render

    if mirror_target:
        if not changefeed_dir:
            raise click.UsageError("--mirror TARGET needs --changefeed CHANGEFEED_DIR, the changefeed it mirrors")
        from .mirror import mirror_status, render_mirror

        doc = mirror_status(changefeed_dir, mirror_target)
        click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(printable(line) for line in render_mirror(doc)))
        return
    if queue_dir:
        doc = queue_status(queue_dir, changefeed=changefeed_dir, serve_state=serve_state)
        click.echo(json.dumps(doc, indent=2) if as_json else render(doc))
        return
    if not changefeed_dir:
        raise click.UsageError("give --queue QUEUE_DIR, --changefeed CHANGEFEED_DIR, or both")
    from .serve import receivers_status, render_receivers

    from .store import is_remote

    where = changefeed_dir if is_remote(changefeed_dir) else os.path.abspath(changefeed_dir)
    doc = {"changefeed": where, "receivers": receivers_status(changefeed_dir, serve_state)}
    lines = render_receivers(doc["receivers"]) or [f"no serve state for {doc['changefeed']}"]
    click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(printable(line) for line in lines))


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
@click.option("--listen", "listen", required=True, callback=_listen_address,
              help="HOST:PORT to listen on for the receiver (0.0.0.0:9000 on every IPv4 address).")
@click.option("--database", required=True,
              help="The database name receivers ask for (their database_name); also the messages' db.")
@click.option("--state", "state_dir", type=click.Path(file_okay=False), default=None,
              help="Directory of the receiver's confirmed position (default: CHANGEFEED/_olr_buffer/serve).")
@click.option("--poll-interval", type=click.FloatRange(min=0.01), default=0.2, show_default=True,
              help="Seconds between two looks for newly published files once the receiver has everything.")
@click.option("--stall-timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Close the connection of a receiver that takes no byte of the stream for this many seconds.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (off by default).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for the metrics (loopback by default).")
@click.option("--log-level", type=_LOG_LEVELS, default=None, help="Log level (default: the group's, else info).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per line (ts ISO-8601, level, logger, msg, and facts as fields).")
@click.option("--no-sync", is_flag=True,
              help="DURABILITY TRADE-OFF: store confirmed positions without fsync; a machine crash may lose the last.")
@clean_errors
def serve(changefeed_dir, listen, database, state_dir, poll_interval, stall_timeout, metrics_port, metrics_host,
          log_level, log_format, no_sync) -> None:
    """Serve CHANGEFEED_DIR over OpenLogReplicator's network protocol: a receiver written for
    OpenLogReplicator (SynchDB, Debezium's OpenLogReplicator adapter) reads its committed
    transactions, confirms positions, and resumes after its last one. Follows the changefeed
    while `run` publishes; one receiver at a time. SIGTERM or SIGINT stops it (exit 0).
    See docs/operations.md."""
    import threading

    from .service import setup_logging

    from .store import is_remote

    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", changefeed_dir) and not is_remote(changefeed_dir):
        raise click.BadParameter("serve reads a changefeed directory or s3://BUCKET/PREFIX", param_hint="CHANGEFEED_DIR")
    if is_remote(changefeed_dir) and state_dir is None:
        raise click.UsageError("serve keeps the receiver's confirmed position in a local changefeed directory: "
                               "with s3://BUCKET/PREFIX give --state DIR, a local directory for it")
    setup_logging(_log_level(log_level, "info"), log_format)
    click.get_current_context().meta[_LOG_FORMAT] = log_format
    stop = threading.Event()

    def on_signal(signum, _frame):
        logging.getLogger("olr_buffer.serve").info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from .serve import Server, ServeOptions

    server = Server(ServeOptions(changefeed_dir, listen[0], listen[1], database, state_dir=state_dir,
                                 poll_seconds=poll_interval, stall_seconds=stall_timeout, durable=not no_sync))
    if metrics_port is not None:
        from .serve.metrics import ServeMetrics
        from .service import serve_metrics

        http = serve_metrics(ServeMetrics(server), metrics_host, metrics_port)
        logging.getLogger("olr_buffer.serve").info("metrics on http://%s:%d/metrics", metrics_host,
                                                   http.server_address[1], extra={"metrics_port": http.server_address[1]})
    server.run(stop)


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
@click.option("--target", required=True, help="Directory or s3://BUCKET/PREFIX of the mirror tables (TARGET/OWNER/TABLE/).")
@click.option("--tables", callback=_mirror_tables, help="Only these tables: OWNER.TABLE,... (default: every table).")
@click.option("--until-caught-up", is_flag=True, help="Exit 0 once every table holds the changefeed's last transaction.")
@click.option("--history", is_flag=True, help="Also keep TARGET/OWNER/TABLE__history/: every version of each row (SCD type 2).")
@click.option("--poll-interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True,
              help="Seconds between two looks for newly published files.")
@click.option("--batch-rows", type=click.IntRange(min=1), default=200_000, show_default=True,
              help="Changefeed rows read into one batch (whole files), applied by one commit per table.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics and /health on this port (off by default).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="Address for the metrics (loopback by default).")
@click.option("--log-level", type=_LOG_LEVELS, default=None, help="Log level (default: the group's, else info).")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one object per line (ts ISO-8601, level, logger, msg, and facts as fields).")
@clean_errors
def mirror(changefeed_dir, target, tables, until_caught_up, history, poll_interval, batch_rows, metrics_port,
           metrics_host, log_level, log_format) -> None:
    """Keep each source table of CHANGEFEED_DIR (a directory or s3://BUCKET/PREFIX, plain or
    Delta) as a typed Delta table at TARGET/OWNER/TABLE/: one row per key, exactly once.
    Follows the changefeed; SIGTERM or SIGINT stops it (exit 0). See docs/mirror.md."""
    import threading

    from .mirror import Mirror, MirrorMetrics, MirrorOptions
    from .service import serve_metrics, setup_logging

    setup_logging(_log_level(log_level, "info"), log_format)
    click.get_current_context().meta[_LOG_FORMAT] = log_format
    stop = threading.Event()

    def on_signal(signum, _frame):
        logging.getLogger("olr_buffer.mirror").info("received %s, stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service = Mirror(MirrorOptions(changefeed_dir, target, tables, until_caught_up, poll_interval, batch_rows, history))
    if metrics_port is not None:
        http = serve_metrics(MirrorMetrics(service), metrics_host, metrics_port)
        logging.getLogger("olr_buffer.mirror").info("metrics on http://%s:%d/metrics", metrics_host,
                                                    http.server_address[1], extra={"metrics_port": http.server_address[1]})
    result = service.run(stop)
    if until_caught_up:
        click.echo(f"mirrored up to tx_seq {result.last_tx_seq}: {result.transactions} transaction(s), "
                   f"{result.changes} change(s), {result.commits} table commit(s)")


@main.command("drop-slot")
@click.argument("source")
@click.option("--slot", required=True, help="The replication slot to drop (run's --slot, olr_buffer by default).")
@clean_errors
def drop_slot(source, slot) -> None:
    """Drop the replication slot of SOURCE, a PostgreSQL URI: the server keeps WAL for a
    slot until it is dropped. For a changefeed that is retired (a run on its queue would
    find the slot gone); refused while a run, or another consumer, reads the slot."""
    from .sources import SourceUsageError, kind_of

    try:
        kind = kind_of(source)
        if kind.name != "postgresql":
            raise SourceUsageError(f"{source}: drop-slot takes a PostgreSQL URI (postgresql://user@host/db)")
        kind.check_location(source)
    except SourceUsageError as exc:
        raise click.BadParameter(exc.message, param_hint="SOURCE") from None
    from .sources.postgres import drop_slot as drop

    click.echo(drop(source, slot).describe())


class _ProgressLine:
    """Progress on stderr: on a terminal, one line rewritten in place; otherwise (a file, a
    pipe) a plain line every ``interval`` seconds, without ``\\r`` or ANSI codes. Both give
    the figures, the share done and an ETA from it. ``figures(p, elapsed)``: (done, total,
    text) of a progress report ``p``."""

    def __init__(self, terminal: bool, interval: float, figures: Callable[[Any, float], tuple[int, int, str]]) -> None:
        self.terminal = terminal
        self.interval = interval
        self.figures = figures
        self.started = time.monotonic()
        self.last_line = self.started
        self.last: Any = None

    def __call__(self, p) -> None:
        self.last = p
        now = time.monotonic()
        if self.terminal:
            sys.stderr.write(f"\r{self._text(p, now)}\x1b[K")
        elif now - self.last_line >= self.interval:
            self.last_line = now
            sys.stderr.write(f"progress: {self._text(p, now)}\n")
        else:
            return
        sys.stderr.flush()

    def _text(self, p, now: float, finished: bool = False) -> str:
        elapsed = max(now - self.started, 1e-9)
        done, total, text = self.figures(p, elapsed)
        pct = 100.0 * done / total if total else 100.0
        if not finished:
            pct = min(pct, 99.9)  # replay: read to the end is not done, the last commits are still published
        if finished:
            eta = f"done in {elapsed:.1f}s"
        elif done and total > done:
            eta = f"ETA {timedelta(seconds=round((total - done) * elapsed / done))}"
        else:
            eta = "ETA -"
        return f"{pct:5.1f}%  {text}  {eta}"

    def done(self) -> None:
        if self.terminal:
            if self.last is not None:
                sys.stderr.write(f"\r{self._text(self.last, time.monotonic(), finished=True)}\x1b[K")
            sys.stderr.write("\n")
        elif self.last is not None:
            sys.stderr.write(f"progress: {self._text(self.last, time.monotonic(), finished=True)}\n")
        sys.stderr.flush()

    def abort(self) -> None:
        """The run failed: end the terminal line, so that the error gets its own."""
        if self.terminal:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _replay_figures(p, elapsed: float) -> tuple[int, int, str]:
    return p.bytes_read, p.bytes_total, (f"{p.records:,} records ({p.records / elapsed:,.0f}/s)  "
                                         f"{p.published:,} transactions published  {p.open_transactions:,} open")


def _simulate_figures(p, elapsed: float) -> tuple[int, int, str]:
    return p.transactions_ended, p.transactions_total, (
        f"{p.transactions_ended:,} of {p.transactions_total:,} transactions ended  "
        f"{p.records:,} records written ({p.records / elapsed:,.0f}/s)")


def _compact_figures(p, elapsed: float) -> tuple[int, int, str]:
    return p.rows_done, p.rows_total, (f"{p.files_done:,} of {p.files_total:,} files written  "
                                       f"{p.rows_done:,} rows ({p.rows_done / elapsed:,.0f}/s)")


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
            moment = moment.replace(tzinfo=timezone.utc)
        delta = moment - datetime(1970, 1, 1, tzinfo=timezone.utc)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


@main.command()
@click.argument("out_dir", type=_DIR)
@click.option("--threads", type=click.IntRange(1, 64), default=3, show_default=True, help="RAC redo threads.")
@click.option("--transactions", type=click.IntRange(min=1), default=2000, show_default=True,
              help="Regular transactions to write (a few without begin and, with --large-tx-rows, a large one "
                   "come on top).")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed of the random workload: the same seed, options and --start-time give the same files.")
@click.option("--records-per-file", type=click.IntRange(min=1), default=5000, show_default=True,
              help="Log switch after this many records of a thread.")
@click.option("--large-tx-rows", type=click.IntRange(min=0), default=0, show_default=True,
              help="Add one transaction with this many rows.")
@click.option("--no-compress", is_flag=True, help="Write archived sequences as plain .jsonl too.")
@click.option("--start-time", "start_tm", type=StartTime(), default="now", show_default=True,
              help="Start of the workload's clock: 'now', an ISO-8601 time (UTC without an offset), or nanoseconds "
                   "since the epoch. A record's tm is this plus 1 ms per SCN after the first.")
@click.option("--overwrite", is_flag=True, help="Delete the redo log files OUT_DIR already holds first.")
@click.option("--rolling-restarts", is_flag=True, help="Close each thread in turn and open it again (close records).")
@click.option("--close-thread-at", type=click.FloatRange(0, 1), default=None,
              help="Close the highest thread for good once this share of the transactions started (e.g. 0.5).")
@progress_options
@clean_errors
def simulate(out_dir, threads, transactions, seed, records_per_file, large_tx_rows, no_compress, start_tm,
             overwrite, rolling_restarts, close_thread_at, progress, progress_interval) -> None:
    """Write a seeded RAC workload in the input format to OUT_DIR."""
    from .simulate import simulate as run_simulate

    bar = _progress_line(progress, progress_interval, _simulate_figures)
    stats = _with_progress(bar, lambda: run_simulate(
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
    ))
    click.echo(f"wrote {out_dir}: {stats.describe()}")
    click.echo(f"clock started at {_iso(start_tm)} (--start-time {start_tm})")


def _with_progress(bar: "_ProgressLine | None", work: Callable[[], Any]) -> Any:
    """``work()`` with its progress display ended as it ends (done, or cut short)."""
    try:
        result = work()
    except BaseException:
        if bar:
            bar.abort()
        raise
    if bar:
        bar.done()
    return result


def _iso(nanos: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC, to the microsecond."""
    moment = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=nanos // 1000)
    return moment.isoformat().replace("+00:00", "Z")


@main.command()
@click.argument("changefeed_dir", type=_DIR)
@config_option
@click.option("--output", "output_dir", type=_DIR,
              help="Write the compacted changefeed to this directory (safe while readers run; run again to catch up).")
@click.option("--in-place", is_flag=True, help="Replace the files in CHANGEFEED_DIR itself (no reader may run).")
@click.option("--i-know-no-reader-is-running", "no_reader_running", is_flag=True,
              help="Required by --in-place (but on a Delta changefeed): no Spark query or stream and no producer "
                   "uses CHANGEFEED_DIR, and no streaming checkpoint over it will be resumed.")
@click.option("--target-rows", type=click.IntRange(min=1), default=1_000_000, show_default=True,
              help="Merge neighbouring files into files of at most this many rows.")
@click.option("--full-groups-only", is_flag=True,
              help="With --output: leave a last run of files below --target-rows for a later run.")
@click.option("--dry-run", is_flag=True, help="Print what would be merged, change nothing.")
@click.option("--no-sync", is_flag=True, help="DURABILITY TRADE-OFF: skip fsync.")
@progress_options
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@clean_errors
def compact(changefeed_dir, output_dir, in_place, no_reader_running, target_rows, full_groups_only, dry_run,
            no_sync, progress, progress_interval, as_json) -> None:
    """Merge small files of CHANGEFEED_DIR (a directory or s3://BUCKET/PREFIX) into larger
    ones (see docs/spark.md).

    --output DIR writes a new changefeed with the same contract, which readers switch to
    explicitly. --in-place replaces published files, which running readers and streaming
    checkpoints cannot follow, so it needs --i-know-no-reader-is-running; on a Delta
    changefeed it is one Delta commit that deletes no file, safe while readers run.
    """
    from .sinks.parquet import compact as run_compact

    if output_dir is None and not in_place:
        raise click.UsageError("say where the compacted files go: --output DIR (safe with readers running) or --in-place")
    if output_dir is not None and in_place:
        raise click.UsageError("--output and --in-place exclude each other")
    if full_groups_only and in_place:
        raise click.UsageError("--full-groups-only goes with --output")
    bar = None if dry_run else _progress_line(progress, progress_interval, _compact_figures)
    r = _with_progress(bar, lambda: run_compact(
        changefeed_dir, output=output_dir, in_place=in_place, no_reader_running=no_reader_running,
        target_rows=target_rows, full_groups_only=full_groups_only, durable=not no_sync, dry_run=dry_run,
        on_progress=bar))
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


def _name_environment_variables() -> None:
    """``OLR_BUFFER_<COMMAND>_<OPTION>`` after an option's flag (``--queue``: ``OLR_BUFFER_RUN_QUEUE``),
    not after its Python name (``queue_dir``), which click's ``auto_envvar_prefix`` would use."""
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar is None and param.name != "help":
                flag = next(o for o in param.opts if o.startswith("--"))
                param.envvar = f"{ENV_PREFIX}_{name.upper().replace('-', '_')}_{flag[2:].replace('-', '_').upper()}"
                param.show_envvar = True


_name_environment_variables()


if __name__ == "__main__":  # pragma: no cover
    main()
