"""ESS internal API over real gRPC: observation writes, scheduling pause/resume and the
resume worker (SPEC §2.3, §9)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import grpc
import redis.asyncio as aioredis
from google.protobuf.field_mask_pb2 import FieldMask
from redis.exceptions import ResponseError

from ess.resume import ResumeWorker
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.redis_server import RedisServer
from tests.integration.support import fetch_all, minimal_work_unit
from tests.integration.test_ess_api import expect_error
from tests.waiting import eventually
from xmc.model.audit import Actor
from xmc.model.resume import SkipReason, TaskKind
from xmc.model.states import WorkUnitState
from xmc.store.transactions import park_task
from xmc.streams import RESUME_GROUP, StreamNames
from xmc.tasks import verify_task
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1 import executions_pb2, scheduling_pb2
from xmc_api.internal.v1.tasks_pb2 import Task

S = WorkUnitState
ALICE, SERVICE = metadata("alice"), metadata("reconciler")
Result = executions_pb2.UpdateWorkUnitExecutionResult


async def experiment_with_work_units(ess: Ess, n: int) -> str:
    """An experiment with ``n`` work units whose CREATE tasks are on the stream."""
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    for _ in range(n):
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
            metadata=ALICE,
        )
    await ess.relayed()
    return str(experiment.name)


def observation(
    work_unit: str, eid: int, state: WorkUnitState, ess: Ess, *, seconds: float = 1
) -> executions_pb2.WorkUnitExecutionUpdate:
    update = executions_pb2.WorkUnitExecutionUpdate(
        work_unit=work_unit, execution_id=eid, update_mask=FieldMask(paths=["status.state"])
    )
    update.execution.status.state = int(state)  # type: ignore[assignment]
    update.execution.status.state_update_time.FromDatetime(
        ess.clock.now + timedelta(seconds=seconds)
    )
    return update


async def test_update_work_unit_executions_reports_each_item(ess: Ess) -> None:
    parent = await experiment_with_work_units(ess, 2)
    response = await ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(
            writer="reconciler/jobset",
            updates=[
                observation(f"{parent}/workUnits/1", 1, S.SCHEDULING, ess),
                observation(f"{parent}/workUnits/2", 7, S.SCHEDULING, ess),
                observation(f"{parent}/workUnits/9", 1, S.SCHEDULING, ess),
                observation(f"{parent}/workUnits/1", 1, S.RUNNING, ess, seconds=-60),
            ],
        ),
        metadata=SERVICE,
    )
    assert [(r.outcome, r.state_changed, r.state_rejection) for r in response.results] == [
        (Result.APPLIED, True, ""),
        (Result.STALE_EXECUTION, False, ""),
        (Result.NOT_FOUND, False, ""),
        (Result.UNCHANGED, False, "stale_time"),
    ]
    rows = await fetch_all(
        ess.database_url, "SELECT writer FROM work_unit_status_history ORDER BY id DESC LIMIT 1"
    )
    assert rows[0]["writer"] == "reconciler@xmc.internal/reconciler/jobset"


async def test_update_work_unit_executions_is_for_services_only(ess: Ess) -> None:
    parent = await experiment_with_work_units(ess, 1)
    request = executions_pb2.UpdateWorkUnitExecutionsRequest(
        updates=[observation(f"{parent}/workUnits/1", 1, S.SCHEDULING, ess)]
    )
    await expect_error(
        ess.executions.UpdateWorkUnitExecutions(request, metadata=ALICE),
        grpc.StatusCode.PERMISSION_DENIED,
        "not a service identity",
    )


async def test_malformed_batches_fail_whole(ess: Ess) -> None:
    parent = await experiment_with_work_units(ess, 1)
    good = observation(f"{parent}/workUnits/1", 1, S.SCHEDULING, ess)
    nil_time = observation(f"{parent}/workUnits/1", 1, S.RUNNING, ess)
    nil_time.execution.status.ClearField("state_update_time")
    bad_mask = observation(f"{parent}/workUnits/1", 1, S.RUNNING, ess)
    bad_mask.update_mask.paths.append("status.colour")
    bad_name = observation("experiments/x/workUnits/1", 1, S.RUNNING, ess)
    for bad, fragment in (
        (nil_time, "updates[1].execution.status.state_update_time: required"),
        (bad_mask, "updates[1].update_mask: unknown path 'status.colour'"),
        (bad_name, "updates[1].work_unit: 'experiments/x/workUnits/1'"),
    ):
        await expect_error(
            ess.executions.UpdateWorkUnitExecutions(
                executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[good, bad]),
                metadata=SERVICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            fragment,
        )
    rows = await fetch_all(ess.database_url, "SELECT state FROM work_units")
    assert [r["state"] for r in rows] == [S.INITIALIZING], "the good item was not applied either"


async def test_oversized_requests_are_refused(ess_factory: object) -> None:
    ess: Ess = await ess_factory(max_message_bytes=64 * 1024)  # type: ignore[operator]
    parent = await experiment_with_work_units(ess, 1)
    huge = observation(f"{parent}/workUnits/1", 1, S.SCHEDULING, ess)
    huge.execution.status.system_message.user_facing_text = "x" * 100_000
    await expect_error(
        ess.executions.UpdateWorkUnitExecutions(
            executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[huge]), metadata=SERVICE
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "",
    )
    many = [observation(f"{parent}/workUnits/1", 1, S.SCHEDULING, ess)] * 10_001
    big_ess: Ess = await ess_factory()  # type: ignore[operator]
    await expect_error(
        big_ess.executions.UpdateWorkUnitExecutions(
            executions_pb2.UpdateWorkUnitExecutionsRequest(updates=many), metadata=SERVICE
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "at most 10000 per call",
    )


async def park(ess: Ess, task: Task) -> None:
    """What the Actuator's pause handler does (issue 5): park the task, mark the work
    unit SCHEDULING_PAUSED."""
    assert ess.server.store is not None
    async with ess.server.store.transaction() as conn:
        await park_task(
            conn, task, mark=None, writer="test", actor=Actor("test"), now=ess.clock.now
        )
    if task.kind in (Task.CREATE, Task.RESTART):
        paused = observation(
            f"experiments/{task.xid}/workUnits/{task.wid}",
            task.payload.eid,
            S.SCHEDULING_PAUSED,
            ess,
        )
        await ess.executions.UpdateWorkUnitExecutions(
            executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[paused]), metadata=SERVICE
        )


async def stream_tasks(ess: Ess) -> list[Task]:
    return [
        verify_task(fields, key=SIGNING_KEY, now=ess.clock.now)
        for _id, fields in await ess.stream(ess.names.tasks)
    ]


async def test_pause_resume_skips_what_changed_and_enqueues_each_task_once(ess: Ess) -> None:
    state = await ess.scheduling.PauseScheduling(
        scheduling_pb2.PauseSchedulingRequest(reason="cluster upgrade"), metadata=SERVICE
    )
    assert state.paused
    assert state.reason == "cluster upgrade"
    parent = await experiment_with_work_units(ess, 4)
    created = await stream_tasks(ess)
    await ess.redis.delete(ess.names.tasks)  # as if the Actuator had consumed and parked them
    for task in created:
        await park(ess, task)
    # Work unit 2 is stopped while paused: STOPPED directly (no JobSet exists).
    await ess.api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=f"{parent}/workUnits/2"), metadata=ALICE
    )
    # Work unit 3 is restarted while paused: its parked CREATE is superseded.
    await ess.api.RestartWorkUnit(
        api_pb2.RestartWorkUnitRequest(name=f"{parent}/workUnits/3"), metadata=ALICE
    )
    # Work unit 4 gets two updates; only the newest may run, and only once it is unpaused.
    update = created[3]
    for priority in (1, 3):
        newer = Task()
        newer.CopyFrom(update)
        newer.task_id = f"update-{priority}"
        newer.kind = Task.UPDATE
        newer.payload.work_unit.priority = priority  # type: ignore[assignment]
        await park(ess, newer)
    # The STOP's and RESTART's own tasks are published after their commits: on a loaded
    # machine, after this delete unless it waits for them.
    await ess.relayed()
    await ess.redis.delete(ess.names.tasks)
    got = await ess.scheduling.GetSchedulingState(
        scheduling_pb2.GetSchedulingStateRequest(), metadata=SERVICE
    )
    assert got.paused
    assert got.paused_task_count == 6

    # Two resume triggers, the ESS's own worker and two more runs racing it: each parked
    # task is decided once and each resumed task is enqueued once.
    await ess.scheduling.ResumeScheduling(
        scheduling_pb2.ResumeSchedulingRequest(), metadata=SERVICE
    )
    await ess.redis.xadd(ess.names.resume, {"by": "second trigger"})
    await asyncio.gather(*(_resume_now(ess) for _ in range(2)))
    await eventually(lambda: _unprocessed(ess), 0)

    resumed = await stream_tasks(ess)
    assert sorted((TaskKind(t.kind).name, t.wid) for t in resumed) == [("CREATE", 1), ("CREATE", 4)]
    rows = await fetch_all(
        ess.database_url,
        "SELECT wid, kind, resolution_status, resolution_reason FROM paused_tasks ORDER BY id",
    )
    outcome = [(r["wid"], r["kind"], r["resolution_status"], r["resolution_reason"]) for r in rows]
    assert outcome == [
        (1, TaskKind.CREATE, "RESUMED", SkipReason.RESUME),
        (2, TaskKind.CREATE, "SKIPPED", SkipReason.FINISHED),
        (3, TaskKind.CREATE, "SKIPPED", SkipReason.SUPERSEDED),
        (4, TaskKind.CREATE, "RESUMED", SkipReason.RESUME),
        (4, TaskKind.UPDATE, "SKIPPED", SkipReason.STALE_UPDATE),
        (4, TaskKind.UPDATE, "SKIPPED", SkipReason.STILL_PAUSED),
    ]
    state = await ess.scheduling.GetSchedulingState(
        scheduling_pb2.GetSchedulingStateRequest(), metadata=SERVICE
    )
    assert not state.paused
    assert state.paused_task_count == 0
    # A skipped task is finished in the outbox and its Operation closed: nobody waits for
    # the create of a unit stopped (or restarted) while paused.
    outbox_rows = await fetch_all(
        ess.database_url, "SELECT task_id, status, outcome FROM task_outbox"
    )
    by_id = {r["task_id"]: (r["status"], r["outcome"]) for r in outbox_rows}
    assert by_id[created[1].task_id] == ("finished", "skipped")
    assert by_id[created[2].task_id] == ("finished", "skipped")
    assert by_id[created[0].task_id] == ("published", None)
    operations = await fetch_all(
        ess.database_url,
        "SELECT name, done, error_code FROM operations WHERE name = ANY($1)",
        [created[1].operation, created[0].operation],
    )
    assert {r["name"]: (r["done"], r["error_code"]) for r in operations} == {
        created[1].operation: (True, None),
        created[0].operation: (False, None),
    }


async def test_nothing_resumes_while_paused(ess: Ess) -> None:
    await ess.scheduling.PauseScheduling(scheduling_pb2.PauseSchedulingRequest(), metadata=SERVICE)
    await experiment_with_work_units(ess, 1)
    (task,) = await stream_tasks(ess)
    await ess.redis.delete(ess.names.tasks)
    await park(ess, task)
    assert await _resume_now(ess) == 0
    assert await _unprocessed(ess) == 1
    await expect_error(
        ess.scheduling.PauseScheduling(scheduling_pb2.PauseSchedulingRequest(), metadata=ALICE),
        grpc.StatusCode.PERMISSION_DENIED,
        "not a service identity",
    )


async def _resume_now(ess: Ess) -> int:
    assert ess.server.store is not None
    worker = ResumeWorker(ess.server.store, ess.redis, ess.names, clock=ess.clock, consumer="test")
    report = await worker.resume_once()
    return report.resumed


async def _unprocessed(ess: Ess) -> int:
    rows = await fetch_all(
        ess.database_url, "SELECT count(*) AS n FROM paused_tasks WHERE processed_time IS NULL"
    )
    return int(rows[0]["n"])


async def test_a_task_parked_again_after_a_resume_is_resumed_again(ess: Ess) -> None:
    """Paused, resumed, paused again before the Actuator ran the task: it is parked anew
    and the next resume publishes it again (not swallowed as a duplicate)."""
    await ess.scheduling.PauseScheduling(scheduling_pb2.PauseSchedulingRequest(), metadata=SERVICE)
    await experiment_with_work_units(ess, 1)
    (task,) = await stream_tasks(ess)
    await ess.redis.delete(ess.names.tasks)
    await park(ess, task)
    await ess.scheduling.ResumeScheduling(
        scheduling_pb2.ResumeSchedulingRequest(), metadata=SERVICE
    )
    await eventually(lambda: _unprocessed(ess), 0)
    assert [t.task_id for t in await stream_tasks(ess)] == [task.task_id]

    await ess.scheduling.PauseScheduling(scheduling_pb2.PauseSchedulingRequest(), metadata=SERVICE)
    ess.clock.advance(1)
    assert ess.server.store is not None
    async with ess.server.store.transaction() as conn:
        reparked = await park_task(
            conn, task, mark=None, writer="test", actor=Actor("test"), now=ess.clock.now
        )
    assert reparked, "a processed row is parked anew"
    await ess.scheduling.ResumeScheduling(
        scheduling_pb2.ResumeSchedulingRequest(), metadata=SERVICE
    )
    await eventually(lambda: _unprocessed(ess), 0)
    assert [t.task_id for t in await stream_tasks(ess)] == [task.task_id] * 2


async def test_the_resume_worker_creates_its_group_once_and_again_when_it_is_gone(
    ess: Ess, private_redis: RedisServer
) -> None:
    """Not on every iteration (Redis counted a failed BUSYGROUP twice a second on an idle
    system), but again when a read finds the group gone: a trigger sent after the stream
    was deleted is still read and acked."""
    assert ess.server.store is not None
    client: Any = aioredis.Redis.from_url(private_redis.url)
    names = StreamNames.with_prefix("resume-test:")
    worker = ResumeWorker(
        ess.server.store, client, names, clock=ess.clock, consumer="t", sweep_interval=3600
    )
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))

    async def calls(command: str) -> int:
        stats = await client.info("commandstats")
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    async def group_after(entry_id: bytes | None) -> bool:
        try:
            groups = await client.xinfo_groups(names.resume)
        except ResponseError:
            return False
        return any(
            g["name"] == RESUME_GROUP.encode()
            and g["pending"] == 0
            and (entry_id is None or g["last-delivered-id"] == entry_id)
            for g in groups
        )

    async def iterations_done() -> bool:
        return await calls("xreadgroup") >= 8  # at least four iterations of the loop

    try:
        await eventually(iterations_done, True)
        assert await calls("xgroup|create") == 1
        await client.delete(names.resume)  # the group goes with the stream
        trigger = await client.xadd(names.resume, {"by": "after the loss"})
        await eventually(lambda: group_after(trigger), True)
        assert await calls("xgroup|create") == 2
    finally:
        stop.set()
        await running
        await client.aclose()
