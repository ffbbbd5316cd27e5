"""What a real Actuator refuses to act on, and how it ends a task that can never succeed
(SPEC §6 "No task acts twice", §7.2): ESS → outbox → relay → Actuator → kubesim (HTTP).

kubesim runs without controllers: the tests decide what the cluster does.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest, Operation

from actuator.app import Actuator
from actuator.consumer import ConsumerSettings
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.support import WallClock, fetch_all, minimal_work_unit
from tests.servers import REDIS_URL
from tests.waiting import eventually
from xmc.model.states import Severity, WorkUnitState
from xmc.retry import RetryPolicy
from xmc.settings import Settings
from xmc.streams import ACTUATOR_GROUP
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import executions_pb2

S = WorkUnitState
ALICE, SERVICE = metadata("alice"), metadata("reconciler")
FAST_RETRIES = ConsumerSettings(
    claim_idle=30.0, retry=RetryPolicy(max_attempts=2, base=0.01, cap=0.02)
)


@dataclasses.dataclass
class Loop:
    ess: Ess
    sim: KubeSim
    settings: Settings
    actuators: list[tuple[Actuator, asyncio.Task[None]]] = dataclasses.field(default_factory=list)

    async def start_actuator(self, consumer: ConsumerSettings = FAST_RETRIES) -> None:
        actuator = Actuator(self.settings, consumer)
        await actuator.start()
        self.actuators.append((actuator, asyncio.create_task(actuator.run())))

    async def stop_actuators(self) -> None:
        for actuator, runner in self.actuators:
            await actuator.stop()
            await runner
        self.actuators.clear()

    async def create(self, work_unit: WorkUnit | None = None) -> tuple[str, str]:
        """(work unit name, its CREATE operation)."""
        experiment: Experiment = await self.ess.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
        )
        operation = await self.ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(
                parent=experiment.name, work_unit=work_unit or minimal_work_unit()
            ),
            metadata=ALICE,
        )
        return str(operation.name).split("/operations/")[0], str(operation.name)

    async def execution(self, name: str) -> Any:
        work_unit = await self.ess.api.GetWorkUnit(
            api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE
        )
        return work_unit.current_work_unit_execution

    async def state(self, name: str) -> WorkUnitState:
        return S((await self.execution(name)).status.state)

    async def operation(self, name: str) -> Operation:
        stub = operations_grpc_pb2.OperationsStub(self.ess.channel)
        reply: Operation = await stub.GetOperation(GetOperationRequest(name=name), metadata=ALICE)
        return reply

    async def done(self, name: str) -> bool:
        return bool((await self.operation(name)).done)

    def jobset(self, name: str) -> dict[str, Any] | None:
        xid, wid = name.split("/")[1::2]
        found: dict[str, Any] | None = self.sim.store.find(JOBSET, "default", f"xmc-{xid}-{wid}")
        return found

    async def settled(self) -> bool:
        """Every entry of the task stream was delivered and acknowledged."""
        redis = self.ess.redis
        groups = await redis.xinfo_groups(self.ess.names.tasks)
        (group,) = [g for g in groups if g["name"].decode() == ACTUATOR_GROUP]
        last = await redis.xrevrange(self.ess.names.tasks, count=1)
        return bool(group["pending"] == 0 and last and group["last-delivered-id"] == last[0][0])

    async def outbox(self) -> list[tuple[str, str | None]]:
        rows = await fetch_all(
            self.ess.database_url, "SELECT status, outcome FROM task_outbox ORDER BY seq"
        )
        return [(r["status"], r["outcome"]) for r in rows]


@pytest.fixture
async def loop(ess_factory: Any) -> AsyncIterator[Loop]:
    ess: Ess = await ess_factory(clock=WallClock())
    sim = KubeSim(controllers=False)
    await sim.start()
    settings = Settings(
        database_url=ess.database_url,
        redis_url=REDIS_URL,
        kube_url=sim.url,
        task_signing_key=SIGNING_KEY,
        stream_prefix=ess.names.prefix,
    )
    started = Loop(ess, sim, settings)
    yield started
    await started.stop_actuators()
    await sim.stop()


async def test_a_replayed_create_of_a_finished_unit_creates_nothing(loop: Loop) -> None:
    await loop.start_actuator()
    name, operation = await loop.create()
    await eventually(lambda: loop.done(operation), True)
    ((_id, original),) = await loop.ess.stream(loop.ess.names.tasks)
    # The unit ran and finished; its JobSet is gone.
    update = executions_pb2.WorkUnitExecutionUpdate(work_unit=name, execution_id=1)
    update.update_mask.paths.append("status.state")
    update.execution.status.state = int(S.COMPLETED)  # type: ignore[assignment]
    update.execution.status.state_update_time.GetCurrentTime()
    await loop.ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[update]), metadata=SERVICE
    )
    xid, wid = name.split("/")[1::2]
    loop.sim.store.update(JOBSET, "default", f"xmc-{xid}-{wid}",
                          lambda js: js["metadata"].update(finalizers=[]))  # fmt: skip
    loop.sim.store.delete(JOBSET, "default", f"xmc-{xid}-{wid}")
    closed_before = await loop.operation(operation)

    await loop.ess.redis.xadd(loop.ess.names.tasks, original)  # the replay: validly signed

    await eventually(loop.settled, True)
    assert loop.jobset(name) is None, "a replayed create must not run the unit again"
    assert await loop.state(name) == S.COMPLETED
    assert await loop.operation(operation) == closed_before, "its Operation is untouched"


async def test_a_create_overtaken_by_a_stop_never_reaches_the_cluster(loop: Loop) -> None:
    name, create_op = await loop.create()
    stop = await loop.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
    # Were the create attempted, it would fail and retry; a skipped one closes at once.
    loop.sim.faults.fail("create", "jobsets", code=500, times=1000)

    await loop.start_actuator()

    await eventually(lambda: loop.state(name), S.STOPPED)
    await eventually(lambda: loop.done(create_op), True)
    await eventually(lambda: loop.done(stop.name), True)
    created = await loop.operation(create_op)
    assert not created.HasField("error"), "skipped: done, nothing to create"
    assert loop.jobset(name) is None
    assert await loop.outbox() == [("finished", "unwanted"), ("finished", "skipped")]


async def test_a_poison_create_fails_in_one_attempt_with_a_readable_reason(
    loop: Loop, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A NUL in a label key: the reason quoting it once could not be stored, and the
    FAILED write rolled back on every one of 40 attempts. The ESS refuses a NUL at the RPC
    since decision 15; the Actuator must still cope with one that got in before, so the
    ESS's request check is switched off here."""
    monkeypatch.setattr("ess.interceptor.check_request", lambda request, **_: None)
    work_unit = minimal_work_unit()
    work_unit.executable.jobset.jobs[0].labels["bad\x00key"] = "v"
    await loop.start_actuator()
    name, operation = await loop.create(work_unit)

    await eventually(lambda: loop.state(name), S.FAILED)
    status = (await loop.execution(name)).status
    assert Severity(status.system_message.severity) == Severity.FATAL
    assert "bad\\x00key" in status.system_message.user_facing_text
    closed = await loop.operation(operation)
    assert closed.done
    assert closed.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "\x00" not in closed.error.message

    async def dlq_reasons() -> list[bytes]:
        return [
            fields[b"reason"] for _id, fields in await loop.ess.redis.xrange(loop.ess.names.dlq)
        ]

    # The Actuator settles the task (FAILED, the Operation closed), then dead-letters it.
    await eventually(dlq_reasons, [b"permanent"], what="one attempt, one DLQ entry")
    assert await loop.outbox() == [("finished", "permanent")]


async def test_a_create_out_of_deliveries_fails_its_execution(loop: Loop) -> None:
    loop.sim.faults.fail("create", "jobsets", code=503, times=1000)
    await loop.start_actuator(dataclasses.replace(FAST_RETRIES, max_deliveries=1))
    name, operation = await loop.create()

    await eventually(lambda: loop.state(name), S.FAILED, within=15)
    status = (await loop.execution(name)).status
    assert Severity(status.system_message.severity) == Severity.FATAL
    assert "not carried out after 1 deliveries" in status.system_message.user_facing_text
    closed = await loop.operation(operation)
    assert closed.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    assert await loop.outbox() == [("finished", "max_deliveries")]
