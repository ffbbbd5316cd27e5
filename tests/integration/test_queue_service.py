"""``xmc.v1.QueueService`` at its edges, without a cluster: an admin's priority change
survives the ESS dying between its commit and the publish (docs/outbox.md) — the
SET_PRIORITY task is committed with the intent, and the relay of another ESS on the same
database publishes it, signed, with the class and the admin; a unit stopping cannot be
relabelled; and an ESS with no cluster to read says so (UNAVAILABLE), never INTERNAL."""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from tests.integration.ess_harness import Ess, metadata
from tests.integration.redis_server import RedisServer
from tests.integration.test_ess_outbox import ALICE, _create, _ess, _experiment, _rows, _stream
from tests.waiting import eventually
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.internal.v1.tasks_pb2 import Task
from xmc_api.xmc.v1 import queue_pb2, queue_pb2_grpc


async def test_a_priority_change_is_published_by_the_next_ess(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    first = await _ess(ess_factory, private_redis)
    unit, _ = await _create(first, await _experiment(first))
    await eventually(first.unpublished, 0, within=15)
    await private_redis.stop()

    stub = queue_pb2_grpc.QueueServiceStub(first.channel)
    request = queue_pb2.SetWorkUnitPriorityRequest(
        name=unit, priority_class="xmc-priority-high-high"
    )
    answer = await stub.SetWorkUnitPriority(request, metadata=metadata("root"))
    # Answered: the intent and its task are committed, not yet published...
    assert [(r["kind"], r["status"]) for r in await _rows(first)][-1] == (
        Task.SET_PRIORITY,
        "pending",
    )
    # ... and this ESS is gone before it could publish (Redis is down until it is).
    await first.server.stop(grace=0)

    await private_redis.start()
    second = await _ess(ess_factory, private_redis)
    await eventually(second.unpublished, 0, within=15)
    published = [task for _, task in await _stream(second, private_redis)]
    (change,) = [task for task in published if task.kind == Task.SET_PRIORITY]
    assert change.task_id == answer.task_id
    assert (change.payload.priority_class, change.payload.requested_by) == (
        "xmc-priority-high-high",
        "root@example.com",
    )
    assert change.target_eid == answer.execution_id == 1


async def test_refusals_at_the_edges(ess: Ess) -> None:
    stub = queue_pb2_grpc.QueueServiceStub(ess.channel)
    with pytest.raises(grpc.aio.AioRpcError) as no_cluster:
        await stub.GetQueue(queue_pb2.GetQueueRequest(name="cluster-queue"), metadata=ALICE)
    assert no_cluster.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "the cluster cannot be read" in (no_cluster.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as empty:
        await stub.GetQueue(queue_pb2.GetQueueRequest(name=""), metadata=ALICE)
    assert empty.value.code() == grpc.StatusCode.INVALID_ARGUMENT

    unit, _ = await _create(ess, await _experiment(ess))
    await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=unit), metadata=ALICE)
    request = queue_pb2.SetWorkUnitPriorityRequest(name=unit, priority_class="xmc-priority-low-low")
    with pytest.raises(grpc.aio.AioRpcError) as stopping:
        await stub.SetWorkUnitPriority(request, metadata=metadata("root"))
    assert stopping.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "STOPPING" in (stopping.value.details() or "")
    with pytest.raises(grpc.aio.AioRpcError) as bad_name:
        await stub.SetWorkUnitPriority(
            queue_pb2.SetWorkUnitPriorityRequest(name="units/1", priority_class="x"),
            metadata=metadata("root"),
        )
    assert bad_name.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (bad_name.value.details() or "").startswith("name")
