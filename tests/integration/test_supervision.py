"""Supervised services as OS processes (``tests.stack``): health endpoints, a watcher that
gives up ending the Reconciler, the Actuator outliving its stream, a Postgres restart
under a sweep reaching clients as UNAVAILABLE only (SPEC §11)."""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import asyncpg
import grpc
import pytest
import redis.asyncio as aioredis

from tests.ha.fence import HoldingProxy
from tests.integration.postgres_server import PostgresServer
from tests.integration.processes import Client, running_stack
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit
from tests.stack import Stack
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc.store.repository import Store, wait_for_postgres
from xmc.streams import StreamNames
from xmc_api.cloud.xmanager.v1 import api_pb2

# OS processes killed and restarted: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
XMC_SERVICES = ("ess", "actuator", "reconciler")


async def _get(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        text = await response.text()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, text


async def _ready_status(stack: Stack, name: str) -> int:
    try:
        return (await _get(stack.ops_url(name, "/readyz")))[0]
    except aiohttp.ClientError:
        return 0


async def _exit_code(stack: Stack, name: str) -> int:
    """The exit code, -1 while running."""
    code = stack.processes[name].returncode
    return -1 if code is None else code


def _log(stack: Stack, name: str) -> str:
    return (stack.log_dir / f"{name}.log").read_text(errors="replace")


async def _fault(stack: Stack, **fault: Any) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{stack.kube_url}/kubesim/faults", json=fault) as response,
    ):
        assert response.status < 300, await response.text()


async def test_every_service_serves_healthz_readyz_and_metrics(stack: Stack) -> None:
    for name in XMC_SERVICES:
        await eventually(functools.partial(_ready_status, stack, name), 200, within=60)
        status, body = await _get(stack.ops_url(name, "/healthz"))
        assert (status, body) == (200, {"status": "alive"})
        status, body = await _get(stack.ops_url(name, "/readyz"))
        assert status == 200
        assert body["status"] == "ready"
        assert all(check["ok"] for check in body["checks"].values()), body
    _, ess_ready = await _get(stack.ops_url("ess", "/readyz"))
    assert set(ess_ready["checks"]) == {"grpc", "postgres"}
    _, actuator_ready = await _get(stack.ops_url("actuator", "/readyz"))
    assert set(actuator_ready["checks"]) == {"consumer", "redis", "postgres"}
    _, reconciler_ready = await _get(stack.ops_url("reconciler", "/readyz"))
    assert set(reconciler_ready["checks"]) == {
        "watch jobsets",
        "watch workloads",
        "watch pods",
        "leader election",
    }
    status, metrics = await _get(stack.ops_url("reconciler", "/metrics"))
    assert status == 200
    assert "xmc_reconciler_pending_updates" in metrics


async def test_the_actuator_is_not_ready_while_redis_is_down(
    stack: Stack, private_redis: RedisServer
) -> None:
    await eventually(functools.partial(_ready_status, stack, "actuator"), 200, within=60)
    await private_redis.stop()
    try:
        await eventually(functools.partial(_ready_status, stack, "actuator"), 503, within=30)
        _, body = await _get(stack.ops_url("actuator", "/readyz"))
        assert body["checks"]["redis"]["ok"] is False
        assert (await _get(stack.ops_url("actuator", "/healthz")))[0] == 200
    finally:
        await private_redis.start()
    await eventually(functools.partial(_ready_status, stack, "actuator"), 200, within=30)
    assert all(stack.alive().values()), stack.alive()


async def test_a_watcher_that_gives_up_ends_the_reconciler_non_zero(stack: Stack) -> None:
    await eventually(functools.partial(_ready_status, stack, "reconciler"), 200, within=60)
    # A request the server will never accept: the watcher gives up on it (FATAL).
    await _fault(stack, verb="watch", resource="pods", code=400, times=None)
    await _fault(stack, verb="list", resource="pods", code=400, times=None)
    async with aiohttp.ClientSession() as http:
        await http.post(f"{stack.kube_url}/kubesim/close-watches")

    await eventually(functools.partial(_exit_code, stack, "reconciler"), 1, within=60)
    log = _log(stack, "reconciler")
    assert "reconciler exiting" in log
    assert "watch pods" in log


async def test_the_actuator_survives_deleting_its_task_stream(
    stack: Stack, client: Client, private_redis: RedisServer
) -> None:
    parent = await client.experiment()
    first = await client.create(parent, forever_work_unit())
    await eventually(functools.partial(client.state, first), S.RUNNING, within=30)
    redis = aioredis.Redis.from_url(private_redis.url)
    try:
        # The Actuator blocks in XREADGROUP on this key; deleting it unblocks the read.
        assert await redis.delete(StreamNames.with_prefix(stack.prefix).tasks) == 1
    finally:
        await redis.aclose()

    second = await client.create(parent, forever_work_unit())
    await eventually(functools.partial(client.state, second), S.RUNNING, within=60)
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=first))
    await eventually(functools.partial(client.state, first), S.STOPPED, within=60)
    assert all(stack.alive().values()), stack.alive()
    assert "task stream read failed" in _log(stack, "actuator")


# --- a Postgres restart under a sweep ---------------------------------------------------


@pytest.fixture
async def pg_stack(
    private_postgres: PostgresServer,
    private_redis: RedisServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> AsyncIterator[Stack]:
    async with running_stack(
        private_postgres.admin_dsn, private_redis.url, tmp_path / "logs", request
    ) as started:
        yield started


async def test_a_postgres_restart_under_a_sweep_gives_clients_unavailable_only(
    pg_stack: Stack, private_postgres: PostgresServer
) -> None:
    client = Client(pg_stack)
    codes: dict[str, int] = {}
    created: list[str] = []
    stop = asyncio.Event()

    async def call(name: str, rpc: Any) -> Any:
        try:
            answer = await rpc
        except grpc.aio.AioRpcError as error:
            codes[error.code().name] = codes.get(error.code().name, 0) + 1
            return None
        codes["OK"] = codes.get("OK", 0) + 1
        return answer

    async def sweep(parent: str) -> None:
        while not stop.is_set():
            operation = await call(
                "create",
                client.api.CreateWorkUnit(
                    api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=forever_work_unit())
                ),
            )
            if operation is not None:
                created.append(str(operation.name).split("/operations/")[0])
            await call(
                "list", client.api.ListWorkUnits(api_pb2.ListWorkUnitsRequest(parent=parent))
            )

    try:
        for name in XMC_SERVICES:  # a restart under a running stack, not under its start
            await eventually(functools.partial(_ready_status, pg_stack, name), 200, within=60)
        parent = await client.experiment()
        sweeping = asyncio.create_task(sweep(parent))
        await eventually(lambda: _at_least(created, 10), True, within=60)
        await private_postgres.restart()
        mark = len(created)
        await eventually(lambda: _at_least(created, mark + 10), True, within=60)
        stop.set()
        await sweeping

        print("answers during the sweep:", codes)
        assert set(codes) <= {"OK", "UNAVAILABLE"}, codes
        for name in created:
            await eventually(functools.partial(client.state, name), S.RUNNING, within=90)
        log = _log(pg_stack, "reconciler")
        assert "observations rejected" not in log
        assert all(pg_stack.alive().values()), pg_stack.alive()
    finally:
        await client.channel.close()


async def _at_least(items: list[str], count: int) -> bool:
    return len(items) >= count


async def test_a_service_starting_before_postgres_waits_for_it_then_gives_up_in_bounds() -> None:
    server = PostgresServer()
    try:
        with pytest.raises(ConnectionRefusedError):  # nothing listens yet: bounded, then this
            await wait_for_postgres(server.admin_dsn, within=0.5)
        starting = asyncio.create_task(asyncio.to_thread(server.start))
        await wait_for_postgres(server.admin_dsn, within=60)
        await starting
        conn = await asyncpg.connect(server.admin_dsn)
        assert await conn.fetchval("SELECT 1") == 1
        await conn.close()
    finally:
        server.remove()


async def test_a_pool_whose_first_handshake_hangs_is_opened_on_a_later_attempt(
    database_url: str,
) -> None:
    """Under load a first connection's handshake outlived its bound right after
    ``wait_for_postgres`` had succeeded, and the Actuator died at start: a starting
    process's pool keeps trying for its startup wait, as the wait itself does."""
    address = urlsplit(database_url)
    proxy = HoldingProxy(address.port or 5432)
    await proxy.start()
    userinfo = address.netloc.rpartition("@")[0]
    through = address._replace(netloc=f"{userinfo}@127.0.0.1:{proxy.port}").geturl()
    try:
        proxy.hold()  # every handshake hangs: Postgres never sees the client's first bytes
        with pytest.raises(TimeoutError):
            await Store.connect(through, min_size=1, max_size=1, dead_peer_seconds=2)
        opened = proxy.connections
        opening = asyncio.create_task(
            Store.connect(through, min_size=1, max_size=1, dead_peer_seconds=2, startup_wait=60)
        )
        await eventually(lambda: proxy.connections, lambda n: n >= opened + 2, within=30)
        proxy.release()  # the next attempt's handshake goes through
        store = await opening
        try:
            async with store.connection() as conn:
                assert await conn.fetchval("SELECT 1") == 1
        finally:
            await store.close()
    finally:
        await proxy.close()
