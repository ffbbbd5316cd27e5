"""Shared fixtures: one throw-away Postgres database per test, cloned from a migrated
template, so tests are isolated from each other and can run in parallel (pytest-xdist)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from tests.integration.redis_server import RedisServer
from tests.servers import ADMIN_DSN
from xmc.store.migrate import apply_migrations
from xmc.store.repository import Store


def dsn_for(database: str) -> str:
    return urlunsplit(urlsplit(ADMIN_DSN)._replace(path=f"/{database}"))


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(ADMIN_DSN)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_database() -> Iterator[str]:
    """A migrated database that each test's database is cloned from."""
    import asyncio

    name = f"xmc_tmpl_{uuid.uuid4().hex[:12]}"

    async def create() -> None:
        await _admin(f'CREATE DATABASE "{name}"')
        conn = await asyncpg.connect(dsn_for(name))
        try:
            await apply_migrations(conn)
        finally:
            await conn.close()

    asyncio.run(create())
    yield name
    asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
async def empty_database_url() -> AsyncIterator[str]:
    """A brand-new database without any schema (for migration tests)."""
    name = f"xmc_t_{uuid.uuid4().hex[:12]}"
    await _admin(f'CREATE DATABASE "{name}"')
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def database_url(template_database: str) -> AsyncIterator[str]:
    name = f"xmc_t_{uuid.uuid4().hex[:12]}"
    await _admin(f'CREATE DATABASE "{name}" TEMPLATE "{template_database}"')
    yield dsn_for(name)
    await _admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    store = await Store.connect(database_url, min_size=1, max_size=4)
    yield store
    await store.close()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Keep each phase's report on the item, so a fixture can tell whether its test
    failed (the process stacks print their logs then)."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report


@pytest.fixture
async def private_redis(tmp_path: Path) -> AsyncIterator[RedisServer]:
    """A Redis of the test's own, to stop, kill and restart (no persistence)."""
    server = RedisServer(tmp_path)
    await server.start()
    yield server
    await server.stop()
