"""The ``olr-buffer`` group: its own options, and the environment variables of every
command's options."""

from __future__ import annotations

import click

from .. import __version__

#: Environment variables: ``OLR_BUFFER_<OPTION>`` for the group's options,
#: ``OLR_BUFFER_<COMMAND>_<OPTION>`` for a command's (``OLR_BUFFER_RUN_QUEUE``).
ENV_PREFIX = "OLR_BUFFER"
LOG_LEVELS = click.Choice(["debug", "info", "warning", "error"], case_sensitive=False)


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the version and, for each compiled extension, whether its compiled
    step or the pure-Python path runs (and why)."""
    if not value or ctx.resilient_parsing:
        return
    from ..changes import READ_BACK_STEP
    from ..dispatcher import BATCH_STEP
    from ..sources.postgres import INSERT_STEP  # (here: the PostgreSQL reader is not loaded otherwise)
    from ..sources.redo import READER_LOOP

    click.echo(
        f"olr-buffer, version {__version__} (redo reader loop: {READER_LOOP}; PostgreSQL insert step: "
        f"{INSERT_STEP}; read-back to columns: {READ_BACK_STEP}; dispatcher batch step: {BATCH_STEP})"
    )
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"], "auto_envvar_prefix": ENV_PREFIX})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    allow_from_autoenv=False,
    callback=_show_version,
    help="Show the version, and which compiled steps run (or pure Python, and why), and exit.",
)
@click.option(
    "--log-level",
    type=LOG_LEVELS,
    default=None,
    help="Log level of every command (default: info for run, warning otherwise); a command's own --log-level wins.",
)
@click.pass_context
def main(ctx: click.Context, log_level: str | None) -> None:
    """olr-buffer: a disk-backed transaction buffer for Oracle change data capture.

    Every option can also be set in the environment: OLR_BUFFER_LOG_LEVEL for the ones
    above, OLR_BUFFER_<COMMAND>_<OPTION> for a command's (OLR_BUFFER_RUN_QUEUE,
    OLR_BUFFER_RUN_METRICS_PORT), and in a --config file. The command line wins over the
    environment, which wins over the file."""
    from ..service.logs import setup_logging

    ctx.meta["olr_buffer.log_level"] = log_level
    setup_logging(log_level or "warning", "text")


def name_environment_variables() -> None:
    """``OLR_BUFFER_<COMMAND>_<OPTION>`` after an option's flag (``--queue``: ``OLR_BUFFER_RUN_QUEUE``),
    not after its Python name (``queue_dir``), which click's ``auto_envvar_prefix`` would use."""
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.envvar is None and param.name != "help":
                flag = next(o for o in param.opts if o.startswith("--"))
                param.envvar = f"{ENV_PREFIX}_{name.upper().replace('-', '_')}_{flag[2:].replace('-', '_').upper()}"
                param.show_envvar = True
