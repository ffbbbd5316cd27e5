"""ESS over real gRPC: work-unit intents, the tasks they enqueue, idempotency."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import grpc
import pytest
from google.longrunning.operations_proto_pb2 import Operation
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.support import minimal_work_unit, state_update
from xmc.model.states import WorkUnitState
from xmc.store.operations import ActionType
from xmc.tasks import TaskRejected, TaskRejectReason, verify_task
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata
from xmc_api.cloud.xmanager.v1.priority_pb2 import Priority
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task

S = WorkUnitState
ALICE = metadata("alice")


async def new_experiment(ess: Ess, who: str = "alice") -> str:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="sweep")),
        metadata=metadata(who),
    )
    return experiment.name


async def tasks(ess: Ess) -> list[Task]:
    entries = await ess.stream(ess.names.tasks)
    return [verify_task(fields, key=SIGNING_KEY, now=ess.clock.now) for _id, fields in entries]


async def create(ess: Ess, parent: str, **kwargs: object) -> str:
    operation: Operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit(), **kwargs),  # type: ignore[arg-type]
        metadata=ALICE,
    )
    return str(operation.name).split("/operations/")[0]


async def test_create_work_unit_writes_intent_operation_and_signed_task(ess: Ess) -> None:
    parent = await new_experiment(ess)
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )

    assert operation.name.startswith(f"{parent}/workUnits/1/operations/")
    assert not operation.done
    meta = OperationMetadata()
    operation.metadata.Unpack(meta)
    assert (ActionType(meta.action_type), meta.target, meta.original_requester) == (
        ActionType.CREATE,
        f"{parent}/workUnits/1",
        "alice@example.com",
    )
    work_unit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=f"{parent}/workUnits/1"), metadata=ALICE
    )
    execution = work_unit.current_work_unit_execution
    assert S(execution.status.state) == S.INITIALIZING
    assert execution.state == WorkUnitExecution.ACTIVE
    assert work_unit.executable.scheduling_constraints.queue_name == "cpu-queue"

    (task,) = await tasks(ess)
    assert task.kind == Task.CREATE
    assert (task.xid, task.wid, task.target_eid, task.payload.eid) == (
        int(parent.split("/")[1]),
        1,
        1,
        1,
    )
    assert task.operation == operation.name
    assert task.payload.work_unit.executable == work_unit.executable


@pytest.mark.parametrize("queue", ["Team A", "team_a", "q" * 64])
async def test_a_queue_name_kueue_would_refuse_is_invalid_argument_at_create(
    ess: Ess, queue: str
) -> None:
    parent = await new_experiment(ess)
    work_unit = minimal_work_unit()
    work_unit.executable.scheduling_constraints.queue_name = queue
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit), metadata=ALICE
        )
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    details = caught.value.details() or ""
    assert details.startswith("work_unit.executable.scheduling_constraints.queue_name: ")
    listed = await ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent), metadata=ALICE
    )
    assert not listed.work_units, "nothing written"
    assert not await tasks(ess), "nothing enqueued"


async def test_a_tampered_task_fails_verification(ess: Ess) -> None:
    await create(ess, await new_experiment(ess))
    ((_id, fields),) = await ess.stream(ess.names.tasks)
    task = Task.FromString(fields[b"task"])
    task.wid = 999
    tampered = {**fields, b"task": task.SerializeToString()}
    with pytest.raises(TaskRejected) as info:
        verify_task(tampered, key=SIGNING_KEY, now=ess.clock.now)
    assert info.value.reason == TaskRejectReason.DIGEST_MISMATCH
    with pytest.raises(TaskRejected) as expired:
        verify_task(fields, key=SIGNING_KEY, now=ess.clock.now + timedelta(days=2))
    assert expired.value.reason == TaskRejectReason.EXPIRED


async def test_create_with_work_unit_id_is_idempotent_under_16_concurrent_repeats(
    ess: Ess,
) -> None:
    parent = await new_experiment(ess)
    request = api_pb2.CreateWorkUnitRequest(
        parent=parent, work_unit=minimal_work_unit(), work_unit_id=7
    )
    operations = await asyncio.gather(
        *(ess.api.CreateWorkUnit(request, metadata=ALICE) for _ in range(16))
    )
    assert len({op.name for op in operations}) == 1
    listed = await ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent), metadata=ALICE
    )
    assert [w.name for w in listed.work_units] == [f"{parent}/workUnits/7"]
    assert len(await tasks(ess)) == 1, "a repeat enqueues nothing"
    # The next server-assigned id comes after the client's.
    assert await create(ess, parent) == f"{parent}/workUnits/8"


async def test_stop_writes_stopping_and_a_delete_task(ess: Ess) -> None:
    name = await create(ess, await new_experiment(ess))
    operation = await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)

    work_unit = await ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE)
    assert S(work_unit.current_work_unit_execution.status.state) == S.STOPPING
    delete = (await tasks(ess))[-1]
    assert (delete.kind, delete.target_eid, delete.operation) == (Task.DELETE, 1, operation.name)
    meta = OperationMetadata()
    operation.metadata.Unpack(meta)
    assert ActionType(meta.action_type) == ActionType.STOP


async def test_stop_of_a_finished_work_unit_is_a_failed_precondition(ess: Ess) -> None:
    name = await create(ess, await new_experiment(ess))
    await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
    xid, wid = int(name.split("/")[1]), int(name.split("/")[3])
    assert ess.server.store is not None
    await ess.server.store.update_work_unit_executions(
        [state_update(xid, wid, 1, S.STOPPED, ess.clock.now + timedelta(seconds=1))], writer="t"
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
    assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "already STOPPED" in (info.value.details() or "")


async def test_restart_makes_a_new_execution_and_a_restart_task(ess: Ess) -> None:
    name = await create(ess, await new_experiment(ess))
    await ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=name), metadata=ALICE)

    executions = await ess.api.ListWorkUnitExecutions(
        api_pb2.ListWorkUnitExecutionsRequest(parent=name), metadata=ALICE
    )
    assert [(e.name.rsplit("/", 1)[1], e.state) for e in executions.work_unit_executions] == [
        ("1", WorkUnitExecution.INACTIVE),
        ("2", WorkUnitExecution.ACTIVE),
    ]
    current = await ess.api.GetCurrentWorkUnitExecution(
        api_pb2.GetCurrentWorkUnitExecutionRequest(name=name), metadata=ALICE
    )
    assert S(current.status.state) == S.RESTARTING
    restart = (await tasks(ess))[-1]
    assert (restart.kind, restart.target_eid, restart.payload.eid) == (Task.RESTART, 1, 2)


async def test_batch_stop_and_restart_follow_the_filter(ess: Ess) -> None:
    parent = await new_experiment(ess)
    for _ in range(3):
        await create(ess, parent)
    await ess.api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=f"{parent}/workUnits/2"), metadata=ALICE
    )

    restarted = await ess.api.BatchRestartWorkUnits(
        api_pb2.BatchRestartWorkUnitsRequest(parent=parent, filter="state = INITIALIZING"),
        metadata=ALICE,
    )
    assert restarted.name.startswith(f"{parent}/operations/")
    kinds = [(t.kind, t.wid) for t in await tasks(ess)]
    assert kinds[-2:] == [(Task.RESTART, 1), (Task.RESTART, 3)]

    stopped = await ess.api.BatchStopWorkUnits(
        api_pb2.BatchStopWorkUnitsRequest(parent=parent), metadata=ALICE
    )
    listed = await ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent), metadata=ALICE
    )
    assert {S(w.current_work_unit_execution.status.state) for w in listed.work_units} == {
        S.STOPPING
    }
    deletes = [t for t in await tasks(ess) if t.operation == stopped.name]
    assert sorted(t.wid for t in deletes) == [1, 2, 3]


async def test_update_work_unit_applies_the_mask_and_patches_priority(ess: Ess) -> None:
    name = await create(ess, await new_experiment(ess))
    updated = await ess.api.UpdateWorkUnit(
        api_pb2.UpdateWorkUnitRequest(
            work_unit=WorkUnit(name=name, tags=["a"], notes="n", priority=Priority.HIGH),
            update_mask=FieldMask(paths=["tags", "priority"]),
        ),
        metadata=ALICE,
    )
    assert list(updated.tags) == ["a"]
    assert updated.notes == "", "notes were not in the mask"
    assert updated.priority == 3
    update = (await tasks(ess))[-1]
    assert (update.kind, update.payload.work_unit.priority) == (Task.UPDATE, 3)


async def test_list_work_units_filters_orders_and_pages(ess: Ess) -> None:
    parent = await new_experiment(ess)
    for _ in range(5):
        await create(ess, parent)
    await ess.api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=f"{parent}/workUnits/4"), metadata=ALICE
    )
    stopping = await ess.api.SearchWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent, filter="state = STOPPING"), metadata=ALICE
    )
    assert [w.name.rsplit("/", 1)[1] for w in stopping.work_units] == ["4"]

    seen: list[str] = []
    token = ""
    while True:
        page = await ess.api.ListWorkUnits(
            api_pb2.ListWorkUnitsRequest(
                parent=parent, page_size=2, page_token=token, order_by="wid desc"
            ),
            metadata=ALICE,
        )
        seen += [w.name.rsplit("/", 1)[1] for w in page.work_units]
        if not seen or len(seen) == 2:
            await create(ess, parent)  # a concurrent insert must not disturb the paging
        token = page.next_page_token
        if not token:
            break
    assert seen == ["5", "4", "3", "2", "1"]


async def test_a_priority_change_of_a_stopping_work_unit_enqueues_no_update(ess: Ess) -> None:
    """An UPDATE would move the JobSet's last-edit past the pending Delete, which the
    Actuator would then reject as stale, stranding the stop."""
    name = await create(ess, await new_experiment(ess))
    await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
    before = len(await tasks(ess))
    updated = await ess.api.UpdateWorkUnit(
        api_pb2.UpdateWorkUnitRequest(
            work_unit=WorkUnit(name=name, priority=Priority.HIGH),
            update_mask=FieldMask(paths=["priority"]),
        ),
        metadata=ALICE,
    )
    assert updated.priority == Priority.HIGH
    assert len(await tasks(ess)) == before


@pytest.mark.parametrize(
    ("experiment", "filter_", "want"),
    [
        pytest.param("missing", "", grpc.StatusCode.NOT_FOUND, id="missing experiment"),
        pytest.param(
            "missing", "bogus = 1", grpc.StatusCode.NOT_FOUND, id="missing beats a bad filter"
        ),
        pytest.param("empty", "", None, id="an empty experiment lists nothing"),
        pytest.param("empty", "bogus = 1", grpc.StatusCode.INVALID_ARGUMENT, id="bad filter"),
        pytest.param("full", "wid > 1", None, id="a page of work units"),
    ],
)
async def test_list_work_units_checks_the_experiment_only_when_the_page_says_nothing(
    ess: Ess, experiment: str, filter_: str, want: grpc.StatusCode | None
) -> None:
    """ListWorkUnits reads a page in one statement and looks the experiment up only for
    an empty or refused page; the answers are those of a lookup made first."""
    parent = "experiments/999999"
    if experiment != "missing":
        parent = await new_experiment(ess)
    if experiment == "full":
        for _ in range(3):
            await create(ess, parent)
    request = api_pb2.ListWorkUnitsRequest(parent=parent, filter=filter_)
    if want is not None:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await ess.api.ListWorkUnits(request, metadata=ALICE)
        assert refused.value.code() == want
        return
    listed = await ess.api.ListWorkUnits(request, metadata=ALICE)
    expected = [f"{parent}/workUnits/{w}" for w in (2, 3)] if experiment == "full" else []
    assert [u.name for u in listed.work_units] == expected
    for unit in listed.work_units:  # built in place in the page, equal to a Get
        got = await ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=unit.name), metadata=ALICE)
        assert unit == got
        assert unit.current_work_unit_execution.name == f"{unit.name}/executions/1"
