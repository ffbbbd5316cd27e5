"""Redis fails over mid-sweep and no intent is lost or carried out twice (issue 30 point
2, decision 0052): the four services as OS processes on a Sentinel group (master, replica,
three Sentinels), then on a Redis Cluster with a replica per master. The replica is made
to miss the intents' publishes (``isolate_replica``), the master is SIGKILLed, the replica
promoted without them: the relay notices the node's run id no longer matches the stamp in
the data, checks every published task, finds those entries gone and re-drives them. The
Actuator is down meanwhile, so nothing but the re-drive can carry those intents out; the
fault matrix (bench/faults.py ``redis-failover``) fails over under a running Actuator.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from tests.ha.failover import Failover, failover
from tests.ha.sentinel import SentinelGroup
from tests.integration.processes import Client, running_stack
from tests.integration.support import forever_work_unit
from tests.servers import ADMIN_DSN
from tests.stack import JobSetLedger, Stack, StackOptions
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc.streams import StreamNames
from xmc_api.cloud.xmanager.v1 import api_pb2

# OS processes killed, Redis failed over: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
#: As bench/faults.py: a task left unacked by a dead consumer is claimed within seconds.
OPTIONS = StackOptions(claim_idle=5.0, repair_after=10.0, repair_interval=2.0)
OUTBOX = "SELECT count(*) FROM task_outbox"
#: As if every published task had waited long: its next check an hour away.
POSTPONE_CHECKS = (
    "UPDATE task_outbox SET next_attempt = now() + interval '1 hour' WHERE status = 'published'"
)


@contextlib.asynccontextmanager
async def _system(
    redis_url: str, env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Stack, Client, JobSetLedger]]:
    options = dataclasses.replace(OPTIONS, extra_env=env)
    async with running_stack(ADMIN_DSN, redis_url, tmp_path / "logs", request, options) as stack:
        client, ledger = Client(stack), JobSetLedger(stack.kube_url)
        ledger.start()
        try:
            yield stack, client, ledger
        finally:
            await ledger.stop()
            await client.channel.close()


@pytest.mark.parametrize(
    ("kind", "ess_killed"),
    [
        pytest.param("sentinel", False, id="sentinel"),
        pytest.param("cluster", False, id="cluster"),
        pytest.param("sentinel", True, id="sentinel, the ESS killed across the failover"),
    ],
)
async def test_a_redis_failover_mid_sweep_loses_and_duplicates_nothing(
    kind: str, ess_killed: bool, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis = failover(kind, tmp_path / kind)
    try:
        await redis.start()
        async with _system(redis.url, redis.env, tmp_path, request) as (stack, client, ledger):
            await redis.pick(StreamNames.with_prefix(stack.prefix).tasks)
            await _fail_over_mid_sweep(stack, client, ledger, redis, ess_killed=ess_killed)
    finally:
        await redis.stop()


async def test_a_master_gone_silent_is_left_for_the_promoted_replica(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """The master's host stops answering without closing a connection (SIGSTOP): the
    Actuator's blocked read on it must give up and find the new master through the
    Sentinels, or no task published after the failover is ever read."""
    group = SentinelGroup(tmp_path / "sentinel")
    try:
        await group.start()
        async with _system(group.url, group.env, tmp_path, request) as (stack, client, ledger):
            parent = await client.experiment()
            first = await client.create(parent)
            await eventually(functools.partial(client.state, first), S.COMPLETED, within=60)

            await group.freeze_master()
            await group.wait_promoted()
            after = [await client.create(parent) for _ in range(3)]
            for name in after:
                await eventually(functools.partial(client.state, name), S.COMPLETED, within=60)
            assert ledger.duplicated() == []
            assert all(stack.alive().values()), stack.alive()
    finally:
        await group.stop()


async def _fail_over_mid_sweep(
    stack: Stack, client: Client, ledger: JobSetLedger, redis: Failover, *, ess_killed: bool
) -> None:
    """With ``ess_killed`` the ESS dies after the publishes and comes back after the
    failover, and the tasks' next checks are an hour away (as for tasks published long
    ago): only the stamp in Redis can tell the new process that the node changed."""
    parent = await client.experiment()
    to_stop = await client.create(parent, forever_work_unit())
    to_restart = await client.create(parent, forever_work_unit())
    for name in (to_stop, to_restart):
        await eventually(functools.partial(client.state, name), S.RUNNING, within=60)
    stream = StreamNames.with_prefix(stack.prefix).tasks
    # The node itself, not the cluster client: it holds the stream's slot.
    master: Any = aioredis.Redis(port=redis.master_port)
    replica: Any = aioredis.Redis(port=redis.replica_port)
    try:
        last = (await master.xrevrange(stream, count=1))[0][0].decode()

        await stack.kill("actuator")
        await redis.isolate_replica()
        created = [await client.create(parent) for _ in range(3)]
        await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=to_stop))
        await client.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=to_restart))
        published = await eventually(
            lambda: master.xrange(stream, min=f"({last}"),
            lambda entries: len(entries) >= 5,
            within=30, what="the five intents' tasks on the master",
        )  # fmt: skip
        # The entries are on the master before the relay's commit records them: wait for
        # the commit, or a killed ESS leaves them pending and publishes them again as
        # first publishes, not re-drives.
        await eventually(
            functools.partial(_sql, stack.database_url, f"{OUTBOX} WHERE status = 'pending'"),
            0,
            within=30,
        )
        if ess_killed:
            await stack.kill("ess")
            await _sql(stack.database_url, POSTPONE_CHECKS)
        await redis.kill_master()
        await redis.wait_promoted()
        missed = [eid for eid, _ in published if not await replica.xrange(stream, eid, eid)]
        assert len(missed) == len(published), "the promoted replica lacks every publish"
        if ess_killed:
            await stack.start_service("ess")
        await stack.start_service("actuator")

        for name in created:
            await eventually(functools.partial(client.state, name), S.COMPLETED, within=90)
        await eventually(functools.partial(client.state, to_stop), S.STOPPED, within=90)
        await eventually(functools.partial(client.execution, to_restart), (2, S.RUNNING), within=90)
        assert ledger.duplicated() == []
        assert all(stack.alive().values()), stack.alive()
        redriven = await _sql(stack.database_url, f"{OUTBOX} WHERE publish_count >= 2")
        assert redriven >= len(missed)
    finally:
        await master.aclose()
        await replica.aclose()


async def _sql(database_url: str, query: str) -> Any:
    """One statement on the stack's database; its first value."""
    conn = await asyncpg.connect(database_url)
    try:
        return await conn.fetchval(query)
    finally:
        await conn.close()
