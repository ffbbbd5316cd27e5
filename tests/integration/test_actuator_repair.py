"""The repair sweep against real Postgres and kubesim (HTTP): each repair, proven on an
execution left stuck on purpose (SPEC §6 "level-triggered repair").

The sweep runs on a clock an hour ahead of the ESS's fixed one, so everything the ESS wrote
is "long ago"; the tests finish tasks in the outbox by hand to play a lost effect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from actuator.handlers import JobSetHandlers
from actuator.kube import JobSetClient
from actuator.outcome import Outcome
from actuator.repair import RepairAction, RepairSettings, RepairSweep
from kubesim.resources import JOBSET
from kubesim.server import KubeSim
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.support import fetch_all, minimal_work_unit
from xmc import labels
from xmc.model.states import Severity, WorkUnitState
from xmc.store.repository import Store
from xmc.tasks import verify_task
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1.tasks_pb2 import Task

S = WorkUnitState
ALICE = metadata("alice")
NAMESPACE = "default"


@dataclass
class Env:
    ess: Ess
    sim: KubeSim
    store: Store
    kube: JobSetClient
    sweep: RepairSweep
    handlers: JobSetHandlers

    async def work_unit(self) -> tuple[int, int]:
        experiment: Experiment = await self.ess.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
        )
        operation = await self.ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
            metadata=ALICE,
        )
        parts = str(operation.name).split("/")
        return int(parts[1]), int(parts[3])

    async def lose_every_task(self) -> None:
        """Every task ran (finished long ago) but its effect did not happen."""
        await self.ess.relayed()
        async with self.store.transaction() as conn:
            await conn.execute(
                """UPDATE task_outbox SET status = 'finished', outcome = 'done',
                       finished_time = $1, next_attempt = NULL""",
                self.ess.clock.now,
            )

    async def stop(self, xid: int, wid: int) -> None:
        await self.ess.api.StopWorkUnit(
            api_pb2.StopWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}"),
            metadata=ALICE,
        )

    async def state(self, xid: int, wid: int) -> WorkUnitState:
        work_unit = await self.store.get_work_unit(xid, wid)
        return S(work_unit.current_work_unit_execution.status.state)

    def jobset(self, xid: int, wid: int) -> dict[str, Any] | None:
        found: dict[str, Any] | None = self.sim.store.find(
            JOBSET, NAMESPACE, labels.jobset_name(xid, wid)
        )
        return found

    async def repair_tasks(self) -> list[Task]:
        rows = await fetch_all(
            self.ess.database_url,
            "SELECT task FROM task_outbox WHERE origin = 'repair' ORDER BY seq",
        )
        return [Task.FromString(r["task"]) for r in rows]

    async def writers(self, xid: int, wid: int) -> list[tuple[int, str]]:
        rows = await fetch_all(
            self.ess.database_url,
            "SELECT new_state, writer FROM work_unit_status_history "
            "WHERE xid = $1 AND wid = $2 ORDER BY id",
            xid,
            wid,
        )
        return [(r["new_state"], r["writer"]) for r in rows]


@pytest.fixture
async def env(ess: Ess) -> AsyncIterator[Env]:
    sim = KubeSim(controllers=False)
    await sim.start()
    store = await Store.connect(ess.database_url, min_size=1, max_size=4, clock=ess.clock)
    kube = await JobSetClient.for_configuration(Configuration(host=sim.url))
    sweep = RepairSweep(
        store,
        kube,
        namespace=NAMESPACE,
        clock=lambda: ess.clock.now + timedelta(hours=1),
        settings=RepairSettings(stuck_after_seconds=120, chunk=1000, max_repairs=2),
    )
    handlers = JobSetHandlers(kube, store, namespace=NAMESPACE, clock=ess.clock)
    yield Env(ess, sim, store, kube, sweep, handlers)
    await kube.close()
    await store.close()
    await sim.stop()


async def _created(env: Env) -> tuple[int, int]:
    """A work unit whose CREATE task ran: its JobSet exists."""
    xid, wid = await env.work_unit()
    ((_id, fields),) = await env.ess.stream(env.ess.names.tasks)
    create = verify_task(fields, key=SIGNING_KEY, now=env.ess.clock.now)
    assert (await env.handlers.handle(create)).outcome is Outcome.DONE
    return xid, wid


async def test_stopping_without_a_jobset_is_stopped(env: Env) -> None:
    xid, wid = await env.work_unit()
    await env.stop(xid, wid)
    await env.lose_every_task()

    (_, decision), *_ = await env.sweep.sweep_once()

    assert decision.action is RepairAction.WRITE_TERMINAL
    assert await env.state(xid, wid) == S.STOPPED
    assert (await env.writers(xid, wid))[-1] == (int(S.STOPPED), "actuator/repair")


async def test_stopping_with_its_jobset_deleting_gets_the_end_it_shows(env: Env) -> None:
    """The finalizer holds the JobSet and no Reconciler wrote the end."""
    xid, wid = await _created(env)
    await env.stop(xid, wid)
    name = labels.jobset_name(xid, wid)

    def completed(obj: dict[str, Any]) -> None:
        obj["status"] = {"conditions": [{"type": "Completed", "status": "True"}]}

    env.sim.store.update(JOBSET, NAMESPACE, name, completed, subresource="status")
    env.sim.store.delete(JOBSET, NAMESPACE, name)
    await env.lose_every_task()

    await env.sweep.sweep_once()

    assert await env.state(xid, wid) == S.COMPLETED
    held = env.jobset(xid, wid)
    assert held is not None, "the finalizer is the Reconciler's to release"


async def test_stopping_with_its_jobset_alive_re_drives_a_delete_that_works(env: Env) -> None:
    xid, wid = await _created(env)
    await env.stop(xid, wid)
    await env.lose_every_task()

    await env.sweep.sweep_once()

    (delete,) = await env.repair_tasks()
    assert (delete.kind, delete.target_eid, delete.operation) == (Task.DELETE, 1, "")
    again = await env.sweep.sweep_once()
    assert [d.action for _, d in again] == [RepairAction.NONE], "the re-drive is on its way"
    assert (await env.handlers.handle(delete)).outcome is Outcome.DONE, "passes the guards"
    jobset = env.jobset(xid, wid)
    assert jobset is not None
    assert "deletionTimestamp" in jobset["metadata"]


async def test_initializing_without_a_jobset_re_drives_the_create(env: Env) -> None:
    xid, wid = await env.work_unit()
    await env.lose_every_task()

    await env.sweep.sweep_once()

    (create,) = await env.repair_tasks()
    assert (create.kind, create.target_eid, create.payload.eid) == (Task.CREATE, 1, 1)
    assert (await env.handlers.handle(create)).outcome is Outcome.DONE
    jobset = env.jobset(xid, wid)
    assert jobset is not None
    assert jobset["metadata"]["labels"][labels.EXECUTION_ID] == "1"


async def test_restarting_re_drives_the_restart(env: Env) -> None:
    xid, wid = await _created(env)
    await env.ess.api.RestartWorkUnit(
        api_pb2.RestartWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}"),
        metadata=ALICE,
    )
    await env.lose_every_task()

    await env.sweep.sweep_once()

    (restart,) = await env.repair_tasks()
    assert (restart.kind, restart.target_eid, restart.payload.eid) == (Task.RESTART, 1, 2)


async def test_a_create_that_re_drives_cannot_help_fails_fatally(env: Env) -> None:
    xid, wid = await env.work_unit()
    for _ in range(2):  # max_repairs re-drives, each "lost" again
        await env.lose_every_task()
        await env.sweep.sweep_once()
    await env.lose_every_task()

    (_, decision), *_ = await env.sweep.sweep_once()

    assert decision.action is RepairAction.GIVE_UP
    work_unit = await env.store.get_work_unit(xid, wid)
    status = work_unit.current_work_unit_execution.status
    assert S(status.state) == S.FAILED
    assert Severity(status.system_message.severity) == Severity.FATAL


async def test_nothing_is_touched_while_its_task_is_on_its_way(env: Env) -> None:
    xid, wid = await env.work_unit()
    await env.stop(xid, wid)
    await env.ess.relayed()  # published, not finished: the relay owns it

    decided = await env.sweep.sweep_once()

    assert [d.action for _, d in decided] == [RepairAction.NONE]
    assert await env.state(xid, wid) == S.STOPPING
    assert await env.repair_tasks() == []


async def test_the_sweep_walks_every_work_unit_in_bounded_steps(env: Env) -> None:
    env.sweep.settings = RepairSettings(stuck_after_seconds=120, chunk=2)
    units = [await env.work_unit() for _ in range(5)]
    for xid, wid in units:
        await env.stop(xid, wid)
    await env.lose_every_task()

    seen = []
    for _ in range(3):  # 5 work units, 2 a step
        step = await env.sweep.sweep_once()
        assert len(step) <= 2
        seen += [(item.xid, item.wid) for item, _ in step]

    assert sorted(seen) == sorted(units)
    assert {await env.state(xid, wid) for xid, wid in units} == {S.STOPPED}
