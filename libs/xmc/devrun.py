"""``make run``: bring up XMC locally.

Today it prepares the database (creates it if missing, applies migrations) and reports
which services are not built yet; issue 7 turns it into the full local run (kubesim, ESS,
Actuator and Reconciler as separate processes).
"""

from __future__ import annotations

import asyncio
import sys
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from xmc.config import Settings
from xmc.store.migrate import migrate


async def ensure_database(dsn: str) -> None:
    """Create the database named in ``dsn`` when the server lacks it."""
    parts = urlsplit(dsn)
    name = parts.path.lstrip("/") or "postgres"
    admin = urlunsplit(parts._replace(path="/postgres"))
    conn = await asyncpg.connect(admin)
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name):
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()


async def _run() -> int:
    settings = Settings.from_env()
    try:
        await ensure_database(settings.database_url)
        applied = await migrate(settings.database_url)
    except (OSError, asyncpg.PostgresError) as exc:
        print(f"cannot prepare {settings.database_url}: {exc}", file=sys.stderr)
        print("start Postgres (see README) or set XMC_DATABASE_URL", file=sys.stderr)
        return 1
    print(f"database ready at {settings.database_url} (migrations applied now: {applied})")
    print("Built: `xmc-ess serve`, `xmc-kubesim`, `xmc-actuator`, `xmc-reconciler` (see docs/);")
    print("with issue 7 this command starts them all as separate processes.")
    return 0


def main() -> None:
    sys.exit(asyncio.run(_run()))


if __name__ == "__main__":
    main()
