"""``olr-buffer drop-slot``: drop the replication slot of a retired changefeed, which holds
WAL on the server for as long as it exists."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg2
import psycopg2.errors

from .connection import PostgresError, Server, SlotInUseError


@dataclass(frozen=True)
class DroppedSlot:
    """What was dropped: the slot, its database, its confirmed position, the WAL it held."""

    slot: str
    database: str
    confirmed_lsn: str | None
    held_bytes: int | None

    def describe(self) -> str:
        held = f", it held {self.held_bytes / 1e6:,.1f} MB of WAL" if self.held_bytes is not None else ""
        return (
            f"dropped replication slot {self.slot!r} of database {self.database} (confirmed "
            f"{self.confirmed_lsn or 'nothing'}{held})"
        )


def drop_slot(uri: str, slot: str) -> DroppedSlot:
    """Drop replication slot ``slot`` of the database ``uri`` names; refused (one line) when
    it does not exist, belongs to another database, or is in use: an ``olr-buffer run`` (or
    another consumer) reads it."""
    server = Server(uri)
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT s.database, current_database(), s.active_pid, s.confirmed_flush_lsn::text, "
                "(pg_current_wal_lsn() - s.restart_lsn)::bigint "
                "FROM pg_replication_slots s WHERE s.slot_name = %s",
                (slot,),
            )
            row = cur.fetchone()
            if row is None:
                cur.execute(
                    "SELECT slot_name FROM pg_replication_slots WHERE database = current_database() ORDER BY slot_name"
                )
                names = [name for (name,) in cur.fetchall()]
                raise PostgresError(
                    f"{server.safe}: no replication slot {slot!r}",
                    hint=f"the slots of this database: {', '.join(names)}" if names else "this database has no slot",
                )
            database, current, pid, confirmed, held = row
            if database != current:
                raise PostgresError(
                    f"{server.safe}: replication slot {slot!r} belongs to database {database}, not {current}",
                    hint="give the URI of the database the changefeed was read from",
                )
            if pid is not None:
                raise _in_use(server, slot, pid)
            try:
                cur.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            except psycopg2.errors.ObjectInUse:  # taken in between
                raise _in_use(server, slot, None) from None
    except psycopg2.errors.InsufficientPrivilege as exc:
        raise PostgresError(
            f"{server.safe}: cannot drop replication slot {slot!r}: {str(exc).strip()}",
            hint="connect as a role with REPLICATION (or a superuser)",
        ) from None
    except psycopg2.Error as exc:
        raise server.error(exc, f"drop replication slot {slot!r}") from None
    finally:
        conn.close()
    return DroppedSlot(slot, database, confirmed, held)


def _in_use(server: Server, slot: str, pid: int | None) -> SlotInUseError:
    by = f" by server process {pid}" if pid is not None else ""
    return SlotInUseError(
        f"{server.safe}: replication slot {slot!r} is in use{by}: an olr-buffer run (or another consumer) reads it",
        hint="stop that run first (SIGTERM: a clean stop), then drop the slot",
    )
