"""``olr-buffer status``."""

from __future__ import annotations

import json
import os

import click

from ..errors import printable
from .common import DIR, clean_errors, config_option, json_option, queue_option
from .group import main


@main.command()
@config_option
@queue_option()
@click.option(
    "--changefeed",
    "changefeed_dir",
    type=DIR,
    help="Changefeed whose serve receivers to show (default: the queue's); alone, only them.",
)
@click.option("--serve-state", type=DIR, default=None, help="serve's --state directory, if not the changefeed's own.")
@click.option(
    "--mirror",
    "mirror_target",
    default=None,
    help="With --changefeed: the mirror at this target (`mirror --target`): how far behind, each table.",
)
@json_option("the status")
@clean_errors
def status(queue_dir, changefeed_dir, serve_state, mirror_target, as_json) -> None:
    """Show what the queue holds: segments, open transactions, readers, watermark,
    last published transaction, what cleanup may free, and the receivers that `serve`
    serves its changefeed to (confirmed position, lag). Safe while a service runs."""
    from ..status import queue_status, render

    if mirror_target:
        if not changefeed_dir:
            raise click.UsageError("--mirror TARGET needs --changefeed CHANGEFEED_DIR, the changefeed it mirrors")
        from ..mirror import mirror_status, render_mirror

        doc = mirror_status(changefeed_dir, mirror_target)
        click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(printable(line) for line in render_mirror(doc)))
        return
    if queue_dir:
        doc = queue_status(queue_dir, changefeed=changefeed_dir, serve_state=serve_state)
        click.echo(json.dumps(doc, indent=2) if as_json else render(doc))
        return
    if not changefeed_dir:
        raise click.UsageError("give --queue QUEUE_DIR, --changefeed CHANGEFEED_DIR, or both")
    from ..serve import receivers_status, render_receivers
    from ..store import is_remote

    where = changefeed_dir if is_remote(changefeed_dir) else os.path.abspath(changefeed_dir)
    doc = {"changefeed": where, "receivers": receivers_status(changefeed_dir, serve_state)}
    lines = render_receivers(doc["receivers"]) or [f"no serve state for {doc['changefeed']}"]
    click.echo(json.dumps(doc, indent=2) if as_json else "\n".join(printable(line) for line in lines))
