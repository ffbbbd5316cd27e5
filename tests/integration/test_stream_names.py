"""The streams are where SPEC §1 says (issue 23, decision 0027): with no
``XMC_STREAM_PREFIX``, a create, a stop, a dead letter and a resume trigger leave entries on
exactly ``xmc-tasks-stream``, ``xmc-dlq-stream`` and ``xmc-scheduling-resume-stream``, on a
real Redis and on a real 3-master Redis Cluster, and every other key hashes to the slot of
the stream it goes with. No prefix is needed for isolation: each Redis is the test's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from actuator.outcome import Outcome, TaskResult
from tests.integration.ess_harness import Ess, EssFactory, metadata
from tests.integration.redis_cluster import LocalRedisCluster
from tests.integration.redis_server import RedisServer
from tests.integration.test_actuator_consumer import DONE, FakeHandler, Harness, _harness
from tests.integration.test_ess_internal import experiment_with_work_units
from tests.waiting import eventually
from xmc.streams import StreamNames, text
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.internal.v1 import scheduling_pb2
from xmc_api.internal.v1.tasks_pb2 import Task

ALICE, SERVICE = metadata("alice"), metadata("reconciler")
SPEC_STREAMS = {"xmc-tasks-stream", "xmc-dlq-stream", "xmc-scheduling-resume-stream"}


async def _refuse_stops(task: Task, _n: int) -> TaskResult:
    if task.kind == Task.DELETE:
        return TaskResult(Outcome.PERMANENT, "refused for the test", "FAILED_PRECONDITION")
    return DONE


async def _create_stop_dead_letter_resume(ess: Ess, harness: Harness) -> None:
    """Two creates and a stop through the ESS, the stop dead-lettered by a consumer, and
    a resume trigger; returns once every task is settled."""
    parent = await experiment_with_work_units(ess, 2)
    await ess.api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=f"{parent}/workUnits/1"), metadata=ALICE
    )
    await ess.scheduling.ResumeScheduling(
        scheduling_pb2.ResumeSchedulingRequest(), metadata=SERVICE
    )
    await ess.relayed()
    harness.start(FakeHandler(_refuse_stops))
    await eventually(harness.dlq_size, 1)
    await eventually(harness.settled, (0, 0))


async def _assert_spec_names(
    keys: list[str], types: dict[str, str], xlen: Callable[[str], Any], slot: Callable[[str], Any]
) -> None:
    """The stream-typed keys are exactly SPEC's names, each holds its entries, and every
    other key is tagged with one of them and hashes to its slot."""
    names = StreamNames.with_prefix("")
    assert {key for key in keys if types[key] == "stream"} == SPEC_STREAMS
    assert await xlen(names.tasks) == 3, "two creates and a stop"
    assert await xlen(names.dlq) == 1
    assert await xlen(names.resume) >= 1
    tagged = [key for key in keys if key not in SPEC_STREAMS]
    assert all(names.owns(key) for key in tagged), tagged
    published = [key for key in tagged if key.startswith("{xmc-tasks-stream}:published:")]
    assert len(published) == 3
    assert names.dead_lettered_key in tagged
    for key in published:
        assert await slot(key) == await slot(names.tasks)
    assert await slot(names.dead_lettered_key) == await slot(names.dlq)


async def test_on_a_redis_the_streams_have_specs_exact_names(
    ess_factory: EssFactory, private_redis: RedisServer
) -> None:
    ess = await ess_factory(redis_url=private_redis.url, stream_prefix="")
    async with _harness(ess) as harness:
        await _create_stop_dead_letter_resume(ess, harness)

    client: Any = aioredis.Redis.from_url(private_redis.url)
    try:
        keys = [text(key) async for key in client.scan_iter(count=10_000)]
        types = {key: text(await client.type(key)) for key in keys}

        async def slot(key: str) -> int:
            """A single Redis answers no CLUSTER KEYSLOT: the same CRC16, computed here."""
            return key_slot(key.encode())

        await _assert_spec_names(keys, types, client.xlen, slot)
    finally:
        await client.aclose()


async def test_on_a_redis_cluster_the_streams_have_specs_exact_names(
    redis_cluster: LocalRedisCluster, ess_factory: EssFactory
) -> None:
    ess = await ess_factory(redis_cluster_nodes=redis_cluster.nodes, stream_prefix="")
    async with _harness(ess) as harness:
        await _create_stop_dead_letter_resume(ess, harness)

    cluster = RedisCluster.from_url(f"redis://127.0.0.1:{redis_cluster.ports[0]}")
    node: Any = aioredis.Redis(host="127.0.0.1", port=redis_cluster.ports[0])
    try:
        keys = [text(key) async for key in cluster.scan_iter(count=10_000)]
        types = {key: text(await cluster.type(key)) for key in keys}

        async def slot(key: str) -> int:
            """As the cluster itself hashes it."""
            return int(await node.execute_command("CLUSTER", "KEYSLOT", key))

        await _assert_spec_names(keys, types, cluster.xlen, slot)
        # The three streams spread over the masters' slots as any three keys would.
        assert len({await slot(name) for name in SPEC_STREAMS}) == 3
    finally:
        await cluster.aclose()
        await node.aclose()
