"""No intent is lost to a crash or a store outage (SPEC §6): the four services as OS
processes (``tests.stack``) on a private Redis, at real time, while the test kills the ESS
between a commit and its publish and restarts Redis under a sweep.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.integration.processes import Client
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit
from tests.stack import JobSetLedger, Stack
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc.streams import StreamNames
from xmc_api.cloud.xmanager.v1 import api_pb2

# OS processes killed, Redis restarted: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState


async def test_an_ess_killed_between_commit_and_publish_loses_no_intent(
    stack: Stack, client: Client, private_redis: RedisServer, ledger: JobSetLedger
) -> None:
    parent = await client.experiment()
    to_stop = await client.create(parent, forever_work_unit())
    to_restart = await client.create(parent, forever_work_unit())
    for name in (to_stop, to_restart):
        await eventually(functools.partial(client.state, name), S.RUNNING, within=30)
    redis = aioredis.Redis.from_url(private_redis.url)
    stream = StreamNames.with_prefix(stack.prefix).tasks
    entries_before = await redis.xlen(stream)

    # Redis accepts no writes: each intent commits, its publish hangs; then SIGKILL.
    await redis.client_pause(60_000, all=False)
    try:
        created = await client.create(parent)
        await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=to_stop))
        await client.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=to_restart))
        await stack.kill("ess")
    finally:
        await redis.client_unpause()
    assert await redis.xlen(stream) == entries_before, "killed before any of them was published"

    await stack.start_service("ess")

    await eventually(functools.partial(client.state, created), S.COMPLETED, within=60)
    await eventually(functools.partial(client.state, to_stop), S.STOPPED, within=60)
    await eventually(functools.partial(client.execution, to_restart), (2, S.RUNNING), within=60)
    assert ledger.duplicated() == []
    await redis.aclose()


async def _backlog_sweep(stack: Stack, client: Client, outage: Any) -> tuple[str, int]:
    """50 work units created while no Actuator reads (a backlog on the stream), the
    outage, then the Actuator back: returns the experiment and its COMPLETED count."""
    await stack.kill("actuator")
    parent = await client.experiment()
    await asyncio.gather(*(client.create(parent) for _ in range(50)))
    await outage()
    await stack.start_service("actuator")

    await eventually(functools.partial(client.count, parent, S.COMPLETED), 50, within=90)
    return parent, await client.count(parent, S.COMPLETED)


async def test_a_redis_restart_without_persistence_under_a_backlog_loses_nothing(
    stack: Stack, client: Client, private_redis: RedisServer, ledger: JobSetLedger
) -> None:
    async def restart() -> None:
        await private_redis.restart()

    _parent, completed = await _backlog_sweep(stack, client, restart)
    assert completed == 50
    assert ledger.duplicated() == []
    assert all(stack.alive().values()), stack.alive()


async def test_redis_down_for_10_seconds_under_a_sweep_loses_nothing(
    stack: Stack, client: Client, private_redis: RedisServer, ledger: JobSetLedger
) -> None:
    async def down_for_10s() -> None:
        await private_redis.stop()
        parent = await client.experiment()
        # Intents keep being accepted while Redis is down.
        created = await asyncio.gather(*(client.create(parent) for _ in range(10)))
        accepted_while_down.extend(created)
        await asyncio.sleep(10)  # the outage itself, not a synchronisation
        await private_redis.start()

    accepted_while_down: list[str] = []
    _parent, completed = await _backlog_sweep(stack, client, down_for_10s)
    assert completed == 50
    for name in accepted_while_down:
        await eventually(functools.partial(client.state, name), S.COMPLETED, within=60)
    assert ledger.duplicated() == []
    assert all(stack.alive().values()), stack.alive()
