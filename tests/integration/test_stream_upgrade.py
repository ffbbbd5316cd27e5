"""An upgrade from decision 0021's keys (``{xmc}:tasks-stream``, …) to SPEC's names loses no
task and carries none out twice (issue 23, decision 0027, docs/operations.md "Upgrading to
SPEC's stream names"). The four services are OS processes on a private Redis with no
prefix; the old deployment is simulated by moving the stream (and its publish markers) to
the old names while no Actuator runs, then the documented steps are followed.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.integration.processes import Client, running_stack
from tests.integration.redis_server import RedisServer
from tests.integration.support import fetch_all
from tests.servers import ADMIN_DSN
from tests.stack import JobSetLedger, StackOptions
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc.streams import ACTUATOR_GROUP, StreamNames, text

# The four services as OS processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
UNITS = 10
OLD_TASKS = "{xmc}:tasks-stream"


async def _published(dsn: str) -> int:
    (row,) = await fetch_all(
        dsn, "SELECT count(*) AS n FROM task_outbox WHERE status = 'published'"
    )
    return int(row["n"])


async def _to_old_names(redis: Any, names: StreamNames) -> None:
    """What a deployment of decision 0021 left: the stream under ``{xmc}:tasks-stream``,
    the publish markers under ``{xmc}:published:…``."""
    await redis.rename(names.tasks, OLD_TASKS)
    marker = f"{{{names.tasks}}}:published:"
    async for key in redis.scan_iter(match=f"{{{names.tasks}}}:published:*", count=10_000):
        await redis.rename(key, "{xmc}:published:" + text(key).removeprefix(marker))


async def test_an_upgrade_from_the_hash_tagged_keys_carries_out_every_task_once(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    names = StreamNames.with_prefix("")
    options = StackOptions(extra_env={"XMC_STREAM_PREFIX": ""})
    redis: Any = aioredis.Redis.from_url(private_redis.url)
    async with running_stack(
        ADMIN_DSN, private_redis.url, tmp_path / "logs", request, options
    ) as stack:
        client, ledger = Client(stack), JobSetLedger(stack.kube_url)
        ledger.start()
        try:
            # The old deployment: tasks published while no Actuator runs.
            await stack.kill("actuator")
            parent = await client.experiment()
            units = [await client.create(parent) for _ in range(UNITS)]
            await eventually(functools.partial(_published, stack.database_url), UNITS)
            assert await redis.xlen(names.tasks) == UNITS
            await _to_old_names(redis, names)
            assert not await redis.exists(names.tasks)

            # The upgrade (docs/operations.md): make every published task due, start the
            # new Actuator; the relay re-drives each task onto xmc-tasks-stream.
            (updated,) = await fetch_all(
                stack.database_url,
                "WITH due AS (UPDATE task_outbox SET next_attempt = now() "
                "WHERE status = 'published' RETURNING 1) SELECT count(*) AS n FROM due",
            )
            assert updated["n"] == UNITS
            await stack.start_service("actuator")

            completed = functools.partial(client.count, parent, S.COMPLETED)
            await eventually(completed, UNITS, within=90)
            assert {await client.state(unit) for unit in units} == {S.COMPLETED}
            assert ledger.duplicated() == []
            assert len(ledger.created) == UNITS, "one JobSet per work unit, created once"
            # Each task was re-driven once onto the new stream; the old one was never read.
            rows = await fetch_all(stack.database_url, "SELECT publish_count FROM task_outbox")
            assert [row["publish_count"] for row in rows] == [2] * UNITS
            assert (await redis.xpending(names.tasks, ACTUATOR_GROUP))["pending"] == 0
            assert await redis.xlen(OLD_TASKS) == UNITS
        finally:
            await ledger.stop()
            await client.channel.close()
            await redis.aclose()
