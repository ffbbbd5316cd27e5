"""No intent is lost to a crash or a store outage (SPEC §6): the four services as OS
processes (``tests.stack``) on a private Redis, at real time, while the test kills the ESS
between a commit and its publish and restarts Redis under a sweep.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis

from tests.conftest import ADMIN_DSN
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit, minimal_work_unit, wait_until
from tests.stack import JobSetLedger, Stack, create_database, drop_database
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState


class Client:
    def __init__(self, stack: Stack) -> None:
        self.channel = grpc.aio.insecure_channel(stack.endpoint)
        self.api = api_pb2_grpc.ExperimentStateServiceStub(self.channel)

    async def experiment(self) -> str:
        created = await self.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment()),
            wait_for_ready=True,
        )
        return str(created.name)

    async def create(self, parent: str, work_unit: WorkUnit | None = None) -> str:
        operation = await self.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit or minimal_work_unit())
        )
        return str(operation.name).split("/operations/")[0]

    async def execution(self, name: str) -> tuple[int, WorkUnitState]:
        work_unit = await self.api.GetWorkUnit(
            api_pb2.GetWorkUnitRequest(name=name), wait_for_ready=True
        )
        current = work_unit.current_work_unit_execution
        return int(current.name.rsplit("/", 1)[1]), S(current.status.state)

    async def state(self, name: str) -> WorkUnitState:
        return (await self.execution(name))[1]

    async def count(self, parent: str, state: WorkUnitState) -> int:
        listed = await self.api.ListWorkUnits(
            api_pb2.ListWorkUnitsRequest(
                parent=parent, filter=f"state = {state.name}", page_size=1000
            ),
            wait_for_ready=True,
        )
        return len(listed.work_units)


@pytest.fixture
async def stack(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    database = await create_database(ADMIN_DSN)
    started = Stack(database_url=database, redis_url=private_redis.url, log_dir=tmp_path / "logs")
    try:
        await started.start()
        yield started
    finally:
        await started.stop()
        await drop_database(ADMIN_DSN, database)
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            started.print_logs()


@pytest.fixture
async def client(stack: Stack) -> AsyncIterator[Client]:
    made = Client(stack)
    yield made
    await made.channel.close()


@pytest.fixture
async def ledger(stack: Stack) -> AsyncIterator[JobSetLedger]:
    watching = JobSetLedger(stack.kube_url)
    watching.start()
    yield watching
    await watching.stop()


async def test_an_ess_killed_between_commit_and_publish_loses_no_intent(
    stack: Stack, client: Client, private_redis: RedisServer, ledger: JobSetLedger
) -> None:
    parent = await client.experiment()
    to_stop = await client.create(parent, forever_work_unit())
    to_restart = await client.create(parent, forever_work_unit())
    for name in (to_stop, to_restart):
        await wait_until(functools.partial(client.state, name), S.RUNNING, within=30)
    redis = aioredis.Redis.from_url(private_redis.url)
    stream = f"{stack.prefix}xmc-tasks-stream"
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

    await wait_until(functools.partial(client.state, created), S.COMPLETED, within=60)
    await wait_until(functools.partial(client.state, to_stop), S.STOPPED, within=60)
    await wait_until(functools.partial(client.execution, to_restart), (2, S.RUNNING), within=60)
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

    await wait_until(functools.partial(client.count, parent, S.COMPLETED), 50, within=90)
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
        await wait_until(functools.partial(client.state, name), S.COMPLETED, within=60)
    assert ledger.duplicated() == []
    assert all(stack.alive().values()), stack.alive()
