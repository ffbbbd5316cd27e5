"""A connection whose peer goes silent mid-call is dropped within XMC_DEAD_PEER_SECONDS
(xmc.keepalive), so the caller gets a connection error and retries on a new connection,
instead of waiting for an answer a cut path will never carry. Postgres and Redis each in
a network namespace (tests/ha/netns.py), silenced towards the test while a call waits."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.ha.netns import Network, network, unavailable
from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.waiting import eventually
from xmc.keepalive import postgres_server_settings
from xmc.redis_client import connect_redis
from xmc.settings import Settings
from xmc.store.repository import Store
from xmc.streams import REDIS_UNAVAILABLE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(reason := unavailable()), reason=reason or ""),
]

DEAD_PEER = 4.0
#: Far past DEAD_PEER: a call still waiting then was never going to be dropped.
PATIENCE = 40.0
SETTING = "SELECT setting FROM pg_settings WHERE name = $1"
ALIVE = "SELECT count(*) FROM pg_stat_activity WHERE pid = $1"
SLEEPING = "SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(5)'"


@contextlib.asynccontextmanager
async def silenceable_postgres() -> AsyncIterator[tuple[Network, PostgresServer]]:
    """A private Postgres in its own namespace, and the network to silence it in."""
    async with network() as net:
        pg = PostgresServer(host=net.address["postgres"], prefix=tuple(net.exec_prefix("postgres")))
        try:
            pg.start()
            yield net, pg
        finally:
            pg.remove()


async def ended_by(node: str, net: Network, call: Awaitable[Any]) -> BaseException | None:
    """``call``, with ``node`` silenced once it is in flight: what it raised (None if it
    returned); fails the test if it is still waiting after :data:`PATIENCE`."""
    task = asyncio.ensure_future(call)
    with net.host_silenced(node):
        done, _ = await asyncio.wait({task}, timeout=PATIENCE)
        if not done:
            task.cancel()
            pytest.fail(f"still waiting on silent {node} after {PATIENCE:g} s")
    return task.exception()


async def test_a_query_waiting_on_a_silent_postgres_fails_as_a_lost_connection() -> None:
    async with silenceable_postgres() as (net, pg):
        store = await Store.connect(
            pg.admin_dsn, min_size=1, max_size=1, dead_peer_seconds=DEAD_PEER
        )
        watcher = await asyncpg.connect(pg.admin_dsn)
        try:
            async with store.connection() as conn:

                async def sleeping() -> int:
                    return int(await watcher.fetchval(SLEEPING))

                call = asyncio.ensure_future(conn.fetchval("SELECT pg_sleep(5)"))
                await eventually(sleeping, 1, within=10)
                error = await ended_by("postgres", net, call)
            assert isinstance(error, asyncpg.exceptions.ConnectionDoesNotExistError), error
        finally:
            watcher.terminate()
            await store.close()


async def test_postgres_ends_the_transaction_of_a_client_that_went_silent() -> None:
    """The other end: a client cut off mid-transaction must not keep its locks through
    the cut and past the heal. The client here has no keepalive of its own (as a client
    whose side has already given up sends nothing either), so only Postgres's settings can
    end the backend; watched over Postgres's Unix socket, which no network rule reaches."""
    async with silenceable_postgres() as (net, pg):
        settings = postgres_server_settings(DEAD_PEER)
        conn = await asyncpg.connect(pg.admin_dsn, server_settings=settings)
        watcher = await asyncpg.connect(host=str(pg.root), port=pg.port, user="postgres")
        try:
            await conn.execute("BEGIN; SELECT pg_advisory_xact_lock(42)")
            backend = functools.partial(watcher.fetchval, ALIVE, conn.get_server_pid())
            with net.host_silenced("postgres"):
                await eventually(backend, 0, within=PATIENCE)
        finally:
            conn.terminate()
            await watcher.close()


async def test_the_store_asks_postgres_to_drop_a_silent_client() -> None:
    async with silenceable_postgres() as (_, pg):
        store = await Store.connect(
            pg.admin_dsn, min_size=1, max_size=1, dead_peer_seconds=DEAD_PEER
        )
        try:
            async with store.connection() as conn:
                assert await conn.fetchval(SETTING, "tcp_user_timeout") == "4000"
                assert await conn.fetchval(SETTING, "tcp_keepalives_idle") == "1"
        finally:
            await store.close()


async def test_a_blocking_read_on_a_silent_redis_fails_as_a_lost_connection(
    tmp_path: Path,
) -> None:
    async with network() as net:
        server = RedisServer(
            tmp_path, host=net.address["redis"], prefix=tuple(net.exec_prefix("redis"))
        )
        await server.start()
        redis = connect_redis(Settings(redis_url=server.url, dead_peer_seconds=DEAD_PEER))
        try:
            await redis.ping()
            error = await ended_by("redis", net, redis.xread({"s": "$"}, block=0))
            # the consumer's "Redis cannot serve now": it reconnects and reads on
            assert isinstance(error, REDIS_UNAVAILABLE), repr(error)
        finally:
            await redis.aclose()
            await server.stop()
