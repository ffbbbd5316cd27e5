"""``ListDeployedExecutions`` over real gRPC and Postgres: which live executions should have
a JobSet in the cluster (docs/decisions/0028-vanished-jobsets-fail.md), paged."""

from __future__ import annotations

from datetime import datetime

import grpc

from tests.integration.ess_harness import Ess
from tests.integration.test_ess_api import expect_error
from tests.integration.test_ess_internal import (
    ALICE,
    SERVICE,
    experiment_with_work_units,
    observation,
    stream_tasks,
)
from xmc.model.states import WorkUnitState
from xmc.store import outbox, scheduling
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.internal.v1 import executions_pb2
from xmc_api.internal.v1.tasks_pb2 import Task

S = WorkUnitState


async def settle(ess: Ess, task: Task, outcome: str, *, now: datetime | None = None) -> None:
    """What the Actuator's settler does to the outbox row (``actuator.settle``)."""
    assert ess.server.store is not None
    async with ess.server.store.transaction() as conn:
        await outbox.finish(conn, task, outcome=outcome, now=now or ess.clock.now)


async def observe(ess: Ess, work_unit: str, eid: int, state: WorkUnitState, seconds: int) -> None:
    await ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(
            updates=[observation(work_unit, eid, state, ess, seconds=seconds)]
        ),
        metadata=SERVICE,
    )


async def list_all(ess: Ess, page_size: int = 0) -> list[tuple[str, int, int]]:
    """Every page, as (work unit, eid, state)."""
    found: list[tuple[str, int, int]] = []
    token = ""
    while True:
        page = await ess.executions.ListDeployedExecutions(
            executions_pb2.ListDeployedExecutionsRequest(page_size=page_size, page_token=token),
            metadata=SERVICE,
        )
        found += [(e.work_unit, e.execution_id, e.state) for e in page.executions]
        token = page.next_page_token
        if not token:
            return found


async def test_only_executions_whose_jobset_was_made_and_is_not_being_removed(ess: Ess) -> None:
    parent = await experiment_with_work_units(ess, 8)
    wu = [f"{parent}/workUnits/{i}" for i in range(1, 9)]
    creates = {t.wid: t for t in await stream_tasks(ess)}
    # 1 deployed and RUNNING; 2 deployed, PARTIALLY_FAILED; both listed.
    for wid, state in ((1, S.RUNNING), (2, S.PARTIALLY_FAILED)):
        await settle(ess, creates[wid], "done")
        await observe(ess, wu[wid - 1], 1, state, seconds=1)
    # 3: RUNNING observed but the Actuator has not settled its create yet.
    await observe(ess, wu[2], 1, S.RUNNING, seconds=1)
    # 4: created, then stopped: a DELETE is on its way (STOPPING).
    await settle(ess, creates[4], "done")
    await observe(ess, wu[3], 1, S.RUNNING, seconds=1)
    await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=wu[3]), metadata=ALICE)
    # 5: created, still INITIALIZING: the repair sweep's.
    await settle(ess, creates[5], "done")
    # 6: parked by PauseScheduling, SCHEDULING_PAUSED.
    assert ess.server.store is not None
    async with ess.server.store.transaction() as conn:
        await outbox.park(conn, creates[6], now=ess.clock.now)
        await scheduling.park_task(
            conn, task_id=creates[6].task_id, xid=creates[6].xid, wid=6, eid=1,
            kind=creates[6].kind, task=creates[6].SerializeToString(), now=ess.clock.now,
        )  # fmt: skip
    await observe(ess, wu[5], 1, S.SCHEDULING_PAUSED, seconds=1)
    # 7: created and COMPLETED; 8: the create failed for good (skipped, never made).
    await settle(ess, creates[7], "done")
    await observe(ess, wu[6], 1, S.RUNNING, seconds=1)
    await observe(ess, wu[6], 1, S.COMPLETED, seconds=2)
    await settle(ess, creates[8], "skipped")
    await observe(ess, wu[7], 1, S.RUNNING, seconds=1)

    expected = [(wu[0], 1, S.RUNNING), (wu[1], 1, S.PARTIALLY_FAILED)]
    assert await list_all(ess) == expected
    assert await list_all(ess, page_size=1) == expected, "pages add up to the same list"
    assert await list_all(ess, page_size=3) == expected

    page = await ess.executions.ListDeployedExecutions(
        executions_pb2.ListDeployedExecutionsRequest(), metadata=SERVICE
    )
    first = page.executions[0]
    assert first.deploy_time.ToDatetime().replace(tzinfo=ess.clock.now.tzinfo) == ess.clock.now
    assert first.state_update_time.seconds > 0


async def test_a_restarted_execution_is_listed_once_its_restart_made_the_jobset(
    ess: Ess,
) -> None:
    parent = await experiment_with_work_units(ess, 1)
    work_unit = f"{parent}/workUnits/1"
    (create,) = await stream_tasks(ess)
    await settle(ess, create, "done")
    await observe(ess, work_unit, 1, S.RUNNING, seconds=1)
    await ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=work_unit), metadata=ALICE)
    restart = next(t for t in await stream_tasks(ess) if t.kind == Task.RESTART)
    assert await list_all(ess) == [], "restart on its way: execution 2 has no JobSet yet"

    await settle(ess, restart, "done")
    await observe(ess, work_unit, 2, S.SCHEDULING, seconds=3)
    assert await list_all(ess) == [(work_unit, 2, S.SCHEDULING)]


async def test_bad_requests_name_the_field_and_users_are_refused(ess: Ess) -> None:
    request = executions_pb2.ListDeployedExecutionsRequest
    await expect_error(
        ess.executions.ListDeployedExecutions(request(page_token="x"), metadata=SERVICE),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_token",
    )
    await expect_error(
        ess.executions.ListDeployedExecutions(request(page_size=-1), metadata=SERVICE),
        grpc.StatusCode.INVALID_ARGUMENT,
        "page_size",
    )
    await expect_error(
        ess.executions.ListDeployedExecutions(request(), metadata=ALICE),
        grpc.StatusCode.PERMISSION_DENIED,
        "not a service identity",
    )


async def test_pages_cross_empty_and_finished_experiments(ess: Ess) -> None:
    """An active experiment without work units, one whose every unit ended (INACTIVE),
    and pages smaller than an experiment: every page goes on, and the listing ends."""
    expected: list[tuple[str, int, int]] = []
    for units in (2, 0, 1, 3):
        parent = await experiment_with_work_units(ess, units)
        tasks = [t for t in await stream_tasks(ess) if f"experiments/{t.xid}" == parent]
        for task in tasks:
            await settle(ess, task, "done")
            name = f"{parent}/workUnits/{task.wid}"
            await observe(ess, name, 1, S.RUNNING, seconds=1)
            if units == 1:  # this experiment ends: its experiment turns INACTIVE
                await ess.api.UpdateExperimentLaunchState(
                    api_pb2.UpdateExperimentLaunchStateRequest(
                        name=parent, launch_state=ExperimentStatus.COMPLETED
                    ),
                    metadata=ALICE,
                )
                await observe(ess, name, 1, S.COMPLETED, seconds=2)
            else:
                expected.append((name, 1, S.RUNNING))
    expected.sort(key=lambda e: tuple(int(p) for p in e[0].split("/")[1::2]))
    for size in (0, 1, 2, 5):
        assert await list_all(ess, page_size=size) == expected, f"page_size {size}"
