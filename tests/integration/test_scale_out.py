"""XMC beyond one process of each service (issue 14, point 5): the whole stack on a real
3-master Redis Cluster, and two of each service on one database and one Redis while one of
each is killed mid-sweep. Every service is an OS process (``tests.stack``), kubesim at
real time; what is asserted is what the ESS, kubesim and Redis show.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import redis.asyncio as aioredis
from bench.scale_out import OPTIONS, sweep
from redis.asyncio.cluster import ClusterNode, RedisCluster

from ess.relay import OutboxRelay
from tests.integration.ess_harness import SIGNING_KEY
from tests.integration.processes import Client, running_stack
from tests.integration.redis_cluster import LocalRedisCluster
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit
from tests.servers import ADMIN_DSN
from tests.stack import JobSetLedger, StackOptions
from tests.waiting import eventually
from xmc.model.outbox import EntryState as E
from xmc.model.states import WorkUnitState
from xmc.redis_client import connect_redis, server_run_id
from xmc.settings import Settings
from xmc.streams import ACTUATOR_GROUP, StreamNames, TaskPublisher
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.internal.v1.tasks_pb2 import Task

# A Redis Cluster, two of each service as OS processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState


async def test_a_sweep_runs_through_a_three_master_redis_cluster(
    redis_cluster: LocalRedisCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    # XMC_REDIS_URL names a port nothing listens on: only the cluster can carry the sweep.
    options = StackOptions(extra_env={"XMC_REDIS_CLUSTER_NODES": redis_cluster.nodes})
    async with running_stack(
        ADMIN_DSN, "redis://127.0.0.1:1/0", tmp_path / "logs", request, options
    ) as stack:
        client, ledger = Client(stack), JobSetLedger(stack.kube_url)
        ledger.start()
        try:
            parent = await client.experiment()
            to_stop = await asyncio.gather(
                *(client.create(parent, forever_work_unit()) for _ in range(10))
            )
            to_complete = await asyncio.gather(*(client.create(parent) for _ in range(50)))
            for name in to_stop:
                await eventually(functools.partial(client.state, name), S.RUNNING, within=60)
            for name in to_stop:
                await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))

            await eventually(functools.partial(client.count, parent, S.COMPLETED), 50, within=90)
            await eventually(functools.partial(client.count, parent, S.STOPPED), 10, within=60)
            assert {await client.state(n) for n in to_complete} == {S.COMPLETED}
            assert ledger.duplicated() == []
            assert all(stack.alive().values()), stack.alive()
        finally:
            await ledger.stop()
            await client.channel.close()

        cluster = RedisCluster(
            startup_nodes=[ClusterNode("127.0.0.1", port) for port in redis_cluster.ports]
        )
        try:
            names = StreamNames.with_prefix(stack.prefix)
            keys = [
                key.decode()
                async for key in cluster.scan_iter(match=names.scan_pattern, count=10_000)
            ]
            # Every task (60 creates, 10 stops) went through the cluster's stream, all acked:
            # one publish marker each (the relay trims finished tasks' entries off the
            # stream, so its length says nothing), in the slot of the stream.
            markers = [key for key in keys if key.startswith(f"{{{names.tasks}}}:published:")]
            assert len(markers) >= 70
            assert {cluster.keyslot(key) for key in markers} == {cluster.keyslot(names.tasks)}
            assert (await cluster.xpending(names.tasks, ACTUATOR_GROUP))["pending"] == 0
            assert await cluster.xlen(names.dlq) == 0
        finally:
            await cluster.aclose()


async def test_on_a_cluster_each_attempt_is_published_once_and_restarts_are_seen(
    redis_cluster: LocalRedisCluster,
) -> None:
    """The publish script (one call, keys in one slot) and the run id the relay watches,
    asked of the node that holds the stream."""
    client = connect_redis(Settings(redis_cluster_nodes=tuple(redis_cluster.nodes.split(","))))
    names = StreamNames.with_prefix(f"t-{uuid.uuid4().hex[:8]}:")
    publisher = TaskPublisher(client, names, signing_key=SIGNING_KEY, clock=utc_now)
    try:
        attempts = [(Task(task_id=f"t{i}"), 1) for i in range(5)]
        first = await publisher.publish_attempts(attempts)
        again = await publisher.publish_attempts([*attempts, (Task(task_id="t0"), 2)])
        assert again[:5] == first, "a repeated attempt answers with its entry"
        assert again[5] not in first
        assert await client.xlen(names.tasks) == 6

        holder = client.get_node_from_key(names.tasks)
        direct = aioredis.Redis(host=holder.host, port=holder.port)
        try:
            expected = (await direct.info("server"))["run_id"]
        finally:
            await direct.aclose()
        assert await server_run_id(client, names.tasks) == expected
    finally:
        await client.aclose()


async def test_on_a_cluster_the_relay_finds_where_each_entry_is(
    redis_cluster: LocalRedisCluster,
) -> None:
    """The relay's lookup script (one call, the stream's slot): gone, waiting, in flight
    (delivered, not acked) and settled (delivered and acked), before and after the group
    exists."""
    client = connect_redis(Settings(redis_cluster_nodes=tuple(redis_cluster.nodes.split(","))))
    names = StreamNames.with_prefix(f"t-{uuid.uuid4().hex[:8]}:")
    publisher = TaskPublisher(client, names, signing_key=SIGNING_KEY, clock=utc_now)
    relay = OutboxRelay(cast(Any, None), client, names, publisher, clock=utc_now)
    try:
        ids = await publisher.publish_attempts([(Task(task_id=f"t{i}"), 1) for i in range(3)])
        gone = f"{int(ids[0].split('-')[0]) - 1}-0"
        states = await relay.entry_states([gone, *ids])
        assert list(states.values()) == [E.GONE, E.WAITING, E.WAITING, E.WAITING], "no group"

        await client.xgroup_create(names.tasks, ACTUATOR_GROUP, id="0")
        delivered = await client.xreadgroup(ACTUATOR_GROUP, "a", {names.tasks: ">"}, count=2)
        assert len(delivered[0][1]) == 2
        await client.xack(names.tasks, ACTUATOR_GROUP, ids[0])
        states = await relay.entry_states([gone, *ids])
        assert list(states.values()) == [E.GONE, E.SETTLED, E.IN_FLIGHT, E.WAITING]
    finally:
        await client.aclose()


async def test_two_of_each_service_keep_every_unit_when_one_of_each_is_killed(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """500 work units: 100 stopped, 50 restarted, 350 left to complete; one ESS, one
    Actuator and the leading Reconciler are SIGKILLed while the stops and restarts are in
    flight, and stay dead: the other replicas carry the sweep to its end
    (``bench.scale_out.sweep``)."""
    options = dataclasses.replace(OPTIONS, replicas=2, leader_election=True)
    async with running_stack(
        ADMIN_DSN, private_redis.url, tmp_path / "logs", request, options
    ) as stack:
        result = await sweep(stack, units=500, kill=True, within=180)
    counts = result.counts
    assert result.killed[:2] == ("ess", "actuator")
    assert result.killed[2] in ("reconciler", "reconciler-2"), result.killed
    assert result.wall is not None, counts.notes[:20]
    assert (counts.lost, counts.duplicated, counts.stuck) == (0, 0, 0), counts.notes[:20]
    assert result.died == (), result.died
    print(f"500-unit sweep, one of each service killed: {result.wall:.1f} s")
