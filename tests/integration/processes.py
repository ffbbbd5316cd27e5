"""The four services as OS processes (``tests.stack``) on a private Redis, with a gRPC
client: fixtures shared by the fault and supervision tests."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from tests.integration.redis_server import RedisServer
from tests.integration.support import minimal_work_unit
from tests.servers import ADMIN_DSN
from tests.stack import JobSetLedger, Stack, StackOptions, create_database, drop_database
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


@contextlib.asynccontextmanager
async def running_stack(
    admin_dsn: str,
    redis_url: str,
    log_dir: Path,
    request: pytest.FixtureRequest,
    options: StackOptions | None = None,
) -> AsyncIterator[Stack]:
    """A started stack on a new database of ``admin_dsn``; logs printed if the test failed."""
    database = await create_database(admin_dsn)
    started = Stack(database_url=database, redis_url=redis_url, log_dir=log_dir, options=options)
    try:
        await started.start()
        yield started
    finally:
        await started.stop()
        await drop_database(admin_dsn, database)
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            started.print_logs()


@pytest.fixture
async def stack(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    async with running_stack(ADMIN_DSN, private_redis.url, tmp_path / "logs", request) as started:
        yield started


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
