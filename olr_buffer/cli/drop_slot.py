"""``olr-buffer drop-slot``."""

from __future__ import annotations

import click

from .common import clean_errors
from .group import main


@main.command("drop-slot")
@click.argument("source")
@click.option("--slot", required=True, help="The replication slot to drop (run's --slot, olr_buffer by default).")
@clean_errors
def drop_slot(source, slot) -> None:
    """Drop the replication slot of SOURCE, a PostgreSQL URI: the server keeps WAL for a
    slot until it is dropped. For a changefeed that is retired (a run on its queue would
    find the slot gone); refused while a run, or another consumer, reads the slot."""
    from ..sources import SourceUsageError, kind_of

    try:
        kind = kind_of(source)
        if kind.name != "postgresql":
            raise SourceUsageError(f"{source}: drop-slot takes a PostgreSQL URI (postgresql://user@host/db)")
        kind.check_location(source)
    except SourceUsageError as exc:
        raise click.BadParameter(exc.message, param_hint="SOURCE") from None
    from ..sources.postgres import drop_slot as drop

    click.echo(drop(source, slot).describe())
