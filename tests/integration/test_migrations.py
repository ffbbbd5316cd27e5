"""Migrations: idempotent, safe from two processes at once, and strict about edits."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import asyncpg
import pytest

from tests.integration.support import fetch_all
from xmc.store.migrate import Migration, MigrationError, apply_migrations, load_migrations


async def test_applies_every_migration_once(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        first = await apply_migrations(conn)
        second = await apply_migrations(conn)
    finally:
        await conn.close()
    assert first == [m.version for m in load_migrations()]
    assert second == []
    rows = await fetch_all(empty_database_url, "SELECT version FROM schema_migrations")
    assert sorted(r["version"] for r in rows) == first
    tables = await fetch_all(
        empty_database_url, "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    )
    assert {r["tablename"] for r in tables} >= {
        "experiments",
        "work_units",
        "work_unit_executions",
        "work_unit_status_history",
        "status_messages",
        "operations",
        "artifacts",
        "paused_tasks",
        "scheduling_control",
        "execution_manifests",
    }


@pytest.mark.slow  # two processes migrating
async def test_two_processes_migrating_at_once(empty_database_url: str) -> None:
    """Two ``xmc-ess migrate`` processes started together both succeed, and every
    migration is recorded exactly once."""
    exe = str(Path(sys.executable).with_name("xmc-ess"))
    procs = [
        await asyncio.create_subprocess_exec(
            exe,
            "--database-url",
            empty_database_url,
            "migrate",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(2)
    ]
    outputs = await asyncio.gather(*(p.communicate() for p in procs))
    for proc, (_out, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err.decode()
    rows = await fetch_all(
        empty_database_url, "SELECT version, count(*) AS n FROM schema_migrations GROUP BY version"
    )
    assert {r["version"]: r["n"] for r in rows} == {m.version: 1 for m in load_migrations()}
    applied_lines = b"".join(err for _out, err in outputs).count(b'"applied": [1')
    assert applied_lines == 1, "exactly one of the two processes applied the schema"


async def test_an_edited_applied_migration_is_refused(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn)
        edited = [Migration(m.version, m.name, m.sql + "\n-- edited") for m in load_migrations()]
        with pytest.raises(MigrationError, match="was edited after it was applied"):
            await apply_migrations(conn, edited)
    finally:
        await conn.close()


async def test_a_database_newer_than_the_code_is_refused(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        await apply_migrations(conn)
        with pytest.raises(MigrationError, match="does not know"):
            await apply_migrations(conn, load_migrations()[:-1] or [])
    finally:
        await conn.close()
