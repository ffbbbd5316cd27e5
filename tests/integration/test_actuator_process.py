"""The intent loop with the Actuator as an OS process: ESS → xmc-tasks-stream →
``xmc-actuator`` → kubesim (real HTTP) → Operation done. Includes ``kill -9`` of an
Actuator holding unacked tasks: a second one reclaims and finishes them."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest
from redis.exceptions import ResponseError

from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.support import minimal_work_unit
from tests.servers import REDIS_URL
from tests.waiting import eventually
from xmc.streams import ACTUATOR_GROUP
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# Actuators as OS processes, killed mid-create: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

ALICE = metadata("alice")


@pytest.fixture
async def sim() -> AsyncIterator[KubeSim]:
    started = KubeSim(controllers=False)
    await started.start()
    yield started
    await started.stop()


class Actuators:
    """Start ``xmc-actuator`` processes against one ESS and one kubesim."""

    def __init__(self, ess: Ess, sim: KubeSim) -> None:
        self.env = {
            **os.environ,
            "XMC_DATABASE_URL": ess.database_url,
            "XMC_REDIS_URL": REDIS_URL,
            "XMC_KUBE_URL": sim.url,
            "XMC_TASK_SIGNING_KEY": SIGNING_KEY,
            "XMC_STREAM_PREFIX": ess.names.prefix,
        }
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self, name: str, *, claim_idle: float = 60.0) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("xmc-actuator")),
            "--consumer-name",
            name,
            "--claim-idle",
            str(claim_idle),
            env=self.env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self.processes.append(process)
        return process

    async def close(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.terminate()
            await process.wait()


@pytest.fixture
async def ess(ess_factory: Any) -> Ess:
    """An ESS stamping with (about) the wall clock, which the Actuator checks tokens by."""
    started: Ess = await ess_factory(start_time=datetime.now(UTC))
    return started


@pytest.fixture
async def actuators(ess: Ess, sim: KubeSim) -> AsyncIterator[Actuators]:
    started = Actuators(ess, sim)
    yield started
    await started.close()


async def create_work_units(ess: Ess, n: int) -> tuple[str, list[str]]:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    operations = await asyncio.gather(
        *(
            ess.api.CreateWorkUnit(
                api_pb2.CreateWorkUnitRequest(
                    parent=experiment.name, work_unit=minimal_work_unit()
                ),
                metadata=ALICE,
            )
            for _ in range(n)
        )
    )
    return str(experiment.name), [str(op.name) for op in operations]


async def done_count(ess: Ess, names: list[str]) -> int:
    stub = operations_grpc_pb2.OperationsStub(ess.channel)
    replies = await asyncio.gather(
        *(stub.GetOperation(GetOperationRequest(name=n), metadata=ALICE) for n in names)
    )
    return sum(1 for reply in replies if reply.done and not reply.HasField("error"))


def jobsets_of(sim: KubeSim, xid: str) -> list[dict[str, Any]]:
    return [
        js
        for js in sim.store.list(JOBSET, "default")
        if js["metadata"]["labels"].get("xmc.google.com/experiment-id") == xid
    ]


async def test_work_units_become_jobsets_and_operations_close(
    ess: Ess, sim: KubeSim, actuators: Actuators
) -> None:
    await actuators.start("a1")
    parent, operations = await create_work_units(ess, 20)

    await eventually(lambda: done_count(ess, operations), 20, within=30)

    created = jobsets_of(sim, parent.split("/")[1])
    assert len(created) == 20
    assert all(js["spec"]["suspend"] is True for js in created)
    assert await ess.redis.xlen(ess.names.dlq) == 0


async def test_kill_9_holding_unacked_tasks_loses_nothing(
    ess: Ess, sim: KubeSim, actuators: Actuators
) -> None:
    for round_ in range(3):
        # Slow creates keep the first Actuator holding unacked tasks when it dies.
        sim.faults.delay("create", "jobsets", seconds=5.0)
        first = await actuators.start(f"doomed-{round_}", claim_idle=1.0)
        parent, operations = await create_work_units(ess, 8)

        async def held() -> bool:
            try:
                pending = await ess.redis.xpending(ess.names.tasks, ACTUATOR_GROUP)
            except ResponseError:  # the group does not exist until the Actuator is up
                return False
            return bool(pending["pending"])

        # A process start under a loaded CI machine has taken over 20 s.
        await eventually(held, True, within=60)
        first.send_signal(signal.SIGKILL)
        await first.wait()
        sim.faults.clear()

        await actuators.start(f"rescuer-{round_}", claim_idle=1.0)
        await eventually(functools.partial(done_count, ess, operations), 8, within=30)

        created = jobsets_of(sim, parent.split("/")[1])
        assert len(created) == 8, "every work unit has its JobSet"
        assert {js["metadata"]["labels"]["xmc.google.com/execution-id"] for js in created} == {"1"}

        async def unacked() -> int:
            return int((await ess.redis.xpending(ess.names.tasks, ACTUATOR_GROUP))["pending"])

        await eventually(unacked, 0, within=10)  # the ack follows the Operation's close
        assert await ess.redis.xlen(ess.names.dlq) == 0
        for process in actuators.processes:
            if process.returncode is None:
                process.terminate()
                await process.wait()


async def operation(ess: Ess, name: str) -> Any:
    stub = operations_grpc_pb2.OperationsStub(ess.channel)
    return await stub.GetOperation(GetOperationRequest(name=name), metadata=ALICE)


async def test_transient_kubernetes_errors_are_retried(
    ess: Ess, sim: KubeSim, actuators: Actuators
) -> None:
    sim.faults.fail("create", "jobsets", code=500, times=2)
    sim.faults.fail("create", "jobsets", code=429, times=1, retry_after_seconds=1)
    await actuators.start("patient")
    parent, operations = await create_work_units(ess, 1)

    await eventually(functools.partial(done_count, ess, operations), 1, within=30)
    assert len(jobsets_of(sim, parent.split("/")[1])) == 1
    assert await ess.redis.xlen(ess.names.dlq) == 0


async def test_a_permanent_error_dead_letters_and_fails_the_execution(
    ess: Ess, sim: KubeSim, actuators: Actuators
) -> None:
    sim.faults.fail("create", "jobsets", code=403, times=None)
    process = await actuators.start("denied")
    parent, (name,) = await create_work_units(ess, 1)

    async def closed() -> bool:
        return bool((await operation(ess, name)).done)

    # The 403 is believed once it outlasts the Actuator's 7.5 s confirmation (actuator.kube).
    await eventually(closed, True, within=60)
    failed = await operation(ess, name)
    assert failed.error.code == 7, "PERMISSION_DENIED"
    # The execution is settled first, then the entry dead-lettered: a moment apart.
    await eventually(functools.partial(ess.redis.xlen, ess.names.dlq), 1, within=30)
    ((_id, entry),) = await ess.redis.xrange(ess.names.dlq)
    assert entry[b"reason"] == b"permanent"
    assert entry[b"code"] == b"PERMISSION_DENIED"
    work_unit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=name.split("/operations/")[0]), metadata=ALICE
    )
    status = work_unit.current_work_unit_execution.status
    assert status.state == 11, "FAILED: the work unit never hangs in INITIALIZING"
    assert status.system_message.severity == 50, "with a FATAL system message"
    assert jobsets_of(sim, parent.split("/")[1]) == []

    process.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(process.wait(), timeout=30) == 0, "graceful SIGTERM"
