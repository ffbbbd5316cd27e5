"""Versioned schema migrations.

Migrations are the numbered ``NNNN_name.sql`` files beside this module. They are applied in
one transaction under a transaction-scoped advisory lock, so running ``xmc-ess migrate``
twice, or from two processes at once, applies each migration exactly once: the second
runner waits on the lock, then finds nothing left to do. An applied migration whose file
changed afterwards is an error, not something to paper over.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from xmc.store.backfill import WIRE_MIGRATIONS, backfill_args, backfill_readers, backfill_wire
from xmc.store.connection import Connection

# Arbitrary but fixed: every XMC process agrees on it, nothing else uses it.
MIGRATION_LOCK_KEY = 0x584D43_0001

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


class MigrationError(RuntimeError):
    """The database's recorded migrations disagree with the code's."""


def load_migrations() -> list[Migration]:
    """The migrations shipped with this package, in version order."""
    found: list[Migration] = []
    for entry in resources.files("xmc.store.migrations").iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration versions must be 1..N without gaps, got {versions}")
    return found


async def apply_migrations(
    conn: Connection, migrations: list[Migration] | None = None
) -> list[int]:
    """Bring the schema up to date; returns the versions applied by this call."""
    pending = load_migrations() if migrations is None else migrations
    applied_now: list[int] = []
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version    integer PRIMARY KEY,
                   name       text        NOT NULL,
                   checksum   text        NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        rows = await conn.fetch("SELECT version, checksum FROM schema_migrations")
        recorded = {r["version"]: r["checksum"] for r in rows}
        known = {m.version for m in pending}
        unknown = sorted(set(recorded) - known)
        if unknown:
            raise MigrationError(f"database has migrations {unknown} this code does not know")
        for migration in pending:
            checksum = recorded.get(migration.version)
            if checksum is not None:
                if checksum != migration.checksum:
                    raise MigrationError(
                        f"migration {migration.version:04d}_{migration.name} was edited "
                        "after it was applied; add a new migration instead"
                    )
                continue
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
            applied_now.append(migration.version)
    return applied_now


async def migrate(dsn: str) -> list[int]:
    """Connect, migrate, disconnect: what ``xmc-ess migrate`` runs. The migration that adds
    the wire parts is followed by their backfill; later starts do not walk the table again.
    Rows without args, and experiments without readers (migration 0015), are filled every
    time (``xmc.store.backfill``: finding none is cheap)."""
    conn = await asyncpg.connect(dsn)
    try:
        applied = await apply_migrations(conn)
        if WIRE_MIGRATIONS.intersection(applied):
            await backfill_wire(conn)
        await backfill_args(conn)
        await backfill_readers(conn)
        return applied
    finally:
        await conn.close()
