"""The ESS's health: gRPC health turns NOT_SERVING when it drains, ``/readyz`` follows the
store and the drain, and a background worker that ends stops the process (SPEC §11)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.integration.ess_harness import Ess
from xmc.health import OpsServer
from xmc.supervise import TaskEnded

Status = health_pb2.HealthCheckResponse


@pytest.fixture
async def ops(ess: Ess) -> AsyncIterator[str]:
    server = OpsServer("127.0.0.1:0", ess.server.readiness)
    port = await server.start()
    yield f"http://127.0.0.1:{port}"
    await server.stop()


async def _readyz(base: str) -> tuple[int, dict[str, object]]:
    async with aiohttp.ClientSession() as http, http.get(f"{base}/readyz") as response:
        return response.status, await response.json()


async def test_readyz_is_ready_while_serving_and_not_once_draining(ess: Ess, ops: str) -> None:
    status, body = await _readyz(ops)
    assert status == 200, body
    assert body["checks"] == {
        "grpc": {"ok": True, "detail": "serving"},
        "postgres": {"ok": True, "detail": "answering"},
    }

    ess.server.request_stop()
    status, body = await _readyz(ops)
    assert status == 503
    assert body["checks"]["grpc"] == {"ok": False, "detail": "draining or not started"}  # type: ignore[index]


async def test_health_watchers_see_not_serving_when_the_ess_drains(ess: Ess) -> None:
    stub = health_pb2_grpc.HealthStub(ess.channel)
    names = ("", "cloud.xmanager.v1.ExperimentStateService")
    watches = [stub.Watch(health_pb2.HealthCheckRequest(service=name)) for name in names]
    for watch in watches:
        first = await watch.read()
        assert first.status == Status.SERVING

    stopping = asyncio.create_task(ess.server.stop(grace=1))
    for watch in watches:
        seen = await asyncio.wait_for(watch.read(), timeout=10)
        assert seen.status == Status.NOT_SERVING
    await stopping


async def test_a_background_worker_that_ends_makes_wait_raise_naming_it(ess: Ess) -> None:
    waiting = asyncio.create_task(ess.server.wait())
    relay = next(t for t in ess.server._background if t.get_name() == "outbox-relay")
    relay.cancel()
    with pytest.raises(TaskEnded, match="outbox-relay"):
        await asyncio.wait_for(waiting, timeout=10)


async def test_health_check_answers_without_a_token_after_start(ess: Ess) -> None:
    stub = health_pb2_grpc.HealthStub(ess.channel)
    answer = await stub.Check(health_pb2.HealthCheckRequest(service=""))
    assert answer.status == Status.SERVING
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await stub.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
