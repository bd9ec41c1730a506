"""The commands of ``olr-buffer`` and their options, as users (scripts, unit files, config
files, environment variables) know them: each command one module of ``olr_buffer/cli/``,
registered by importing it, with its options in this order and their variables after
their flags."""

from __future__ import annotations

import importlib
import pkgutil

import click

import olr_buffer.cli
from olr_buffer.cli import main

_PIPELINE = [
    "--segment-size",
    "--file-rows",
    "--block-records",
    "--checkpoint-interval",
    "--retain-segments",
    "--retain-age",
    "--dead-letter",
    "--transaction-retention",
    "--transaction-retention-scn",
    "--changefeed-mode",
    "--table-format",
    "--iceberg-catalog",
    "--iceberg-table",
    "--adopt-changefeed",
    "--no-sync",
]

COMMANDS = {
    "compact": [
        "CHANGEFEED_DIR",
        "--config",
        "--output",
        "--in-place",
        "--i-know-no-reader-is-running",
        "--target-rows",
        "--full-groups-only",
        "--dry-run",
        "--no-sync",
        "--progress",
        "--progress-interval",
        "--json",
    ],
    "drop-slot": ["SOURCE", "--slot"],
    "mirror": [
        "CHANGEFEED_DIR",
        "--config",
        "--target",
        "--tables",
        "--until-caught-up",
        "--history",
        "--poll-interval",
        "--batch-rows",
        "--metrics-port",
        "--metrics-host",
        "--log-level",
        "--log-format",
    ],
    "replay": [
        "INPUT_DIR",
        "--config",
        "--queue",
        "--changefeed",
        *_PIPELINE,
        "--progress",
        "--progress-interval",
        "--engine",
        "--master",
        "--until-watermark",
        "--spark-staging",
        "--json",
        "--log-format",
    ],
    "run": [
        "INPUT_DIR",
        "--config",
        "--queue",
        "--changefeed",
        "--threads",
        "--flush-interval",
        "--poll-interval",
        "--stall-warning",
        *_PIPELINE,
        "--metrics-port",
        "--metrics-host",
        "--log-level",
        "--log-format",
        "--log-summary-interval",
        "--store-timeout",
        "--health-timeout",
        "--standby",
        "--lease-seconds",
        "--lease-renew-interval",
        "--lease-clock-skew",
        "--standby-poll-interval",
        "--slot",
        "--publication",
        "--no-initial-copy",
        "--no-streaming",
        "--start-scn",
        "--max-message-size",
        "--accept-gap",
    ],
    "serve": [
        "CHANGEFEED_DIR",
        "--config",
        "--listen",
        "--database",
        "--state",
        "--poll-interval",
        "--stall-timeout",
        "--takeover-after",
        "--metrics-port",
        "--metrics-host",
        "--log-level",
        "--log-format",
        "--no-sync",
    ],
    "simulate": [
        "OUT_DIR",
        "--threads",
        "--transactions",
        "--seed",
        "--records-per-file",
        "--large-tx-rows",
        "--no-compress",
        "--start-time",
        "--overwrite",
        "--rolling-restarts",
        "--close-thread-at",
        "--progress",
        "--progress-interval",
    ],
    "status": ["--config", "--queue", "--changefeed", "--serve-state", "--mirror", "--json"],
}

#: the modules of olr_buffer/cli/ that hold no command
SHARED = {"common", "group", "progress", "signals", "pandas_probe", "__main__"}


def _params(command: click.Command) -> list[str]:
    return [p.opts[0] if isinstance(p, click.Option) else p.name.upper() for p in command.params if p.name != "help"]


def test_every_command_is_registered_with_its_options():
    assert {name: _params(command) for name, command in main.commands.items()} == COMMANDS
    assert _params(main) == ["--version", "--log-level"]


def test_each_command_is_the_one_of_its_module():
    modules = {m.name for m in pkgutil.iter_modules(olr_buffer.cli.__path__)} - SHARED
    assert modules == {name.replace("-", "_") for name in COMMANDS}
    for name, command in main.commands.items():
        module = importlib.import_module(f"olr_buffer.cli.{name.replace('-', '_')}")
        assert command.callback.__module__ == module.__name__, name


def test_a_command_option_is_set_by_its_variable():
    for name, command in main.commands.items():
        for param in command.params:
            if isinstance(param, click.Option) and param.name != "help":
                flag = next(o for o in param.opts if o.startswith("--"))[2:]
                assert param.envvar == f"OLR_BUFFER_{name}_{flag}".upper().replace("-", "_"), (name, flag)
