"""ESS over real gRPC: experiments, artifacts, status messages, operations, and every
class of bad input — each with the right status code, a message naming the field, and
nothing written."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import (
    CancelOperationRequest,
    GetOperationRequest,
    ListOperationsRequest,
    WaitOperationRequest,
)
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import message, minimal_work_unit, snapshot
from xmc.model.states import ActiveState, LaunchState, Severity
from xmc.store import operations
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls
from xmc_api.internal.v1 import executions_pb2

ALICE, BOB, ROOT = metadata("alice"), metadata("bob"), metadata("root")


async def expect_error(
    call: Awaitable[Any], code: grpc.StatusCode, fragment: str
) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    assert fragment in (info.value.details() or ""), info.value.details()
    return info.value


async def new_experiment(ess: Ess, **fields: Any) -> Experiment:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(**fields)), metadata=ALICE
    )
    return experiment


async def test_experiment_lifecycle(ess: Ess) -> None:
    created = await new_experiment(ess, title="lr sweep", tags=["lr"], priority=2)
    assert created.creator == "alice@example.com"
    assert ActiveState(created.status.active_state) == ActiveState.ACTIVE
    assert (
        await ess.api.GetExperiment(api_pb2.GetExperimentRequest(name=created.name), metadata=BOB)
        == created
    )

    updated = await ess.api.UpdateExperiment(
        api_pb2.UpdateExperimentRequest(
            experiment=Experiment(name=created.name, title="renamed", notes="x"),
            update_mask=FieldMask(paths=["title"]),
        ),
        metadata=ALICE,
    )
    assert (updated.title, updated.notes, list(updated.tags)) == ("renamed", "", ["lr"])

    done = await ess.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=created.name, launch_state=ExperimentStatus.COMPLETED
        ),
        metadata=ALICE,
    )
    assert LaunchState(done.status.launch_state) == LaunchState.COMPLETED
    status = await ess.api.GetExperimentStatus(
        api_pb2.GetExperimentStatusRequest(name=created.name), metadata=ALICE
    )
    assert ActiveState(status.active_state) == ActiveState.INACTIVE
    # The published client sets COMPLETED at the end of every ``with experiment:`` block,
    # re-entries included: a repeat is an OK no-op that changes nothing.
    again = await ess.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=created.name, launch_state=ExperimentStatus.COMPLETED
        ),
        metadata=ALICE,
    )
    assert again == done
    await expect_error(
        ess.api.UpdateExperimentLaunchState(
            api_pb2.UpdateExperimentLaunchStateRequest(
                name=created.name, launch_state=ExperimentStatus.FAILED
            ),
            metadata=ALICE,
        ),
        grpc.StatusCode.FAILED_PRECONDITION,
        "COMPLETED → FAILED",
    )


async def test_list_experiments_filters_and_orders(ess: Ess) -> None:
    for i, tags in enumerate((["gpu"], ["cpu"], ["gpu", "big"])):
        await new_experiment(ess, title=f"exp {i}", tags=tags)
    found = await ess.api.ListExperiments(
        api_pb2.ListExperimentsRequest(filter="tags:gpu", order_by="title"), metadata=BOB
    )
    assert [e.title for e in found.experiments] == ["exp 0", "exp 2"]
    searched = await ess.api.SearchExperiments(
        api_pb2.ListExperimentsRequest(filter='title:"exp 1"'), metadata=BOB
    )
    assert [e.title for e in searched.experiments] == ["exp 1"]


async def test_only_writers_may_change_an_experiment(ess: Ess) -> None:
    created = await new_experiment(ess)
    request = api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=minimal_work_unit())
    await expect_error(
        ess.api.CreateWorkUnit(request, metadata=BOB),
        grpc.StatusCode.PERMISSION_DENIED,
        "bob@example.com may not change this experiment",
    )
    assert (await ess.api.CreateWorkUnit(request, metadata=ROOT)).name, "admins may"
    shared = await new_experiment(ess, acls=XidAcls(writers=[XidAcls.Role(user="bob@example.com")]))
    request.parent = shared.name
    assert (await ess.api.CreateWorkUnit(request, metadata=BOB)).name, "ACL writers may"


async def test_grouped_creates_keep_each_callers_outcome(ess: Ess) -> None:
    """Concurrent creates are committed together, but each caller is judged alone."""
    created = await new_experiment(ess)
    request = api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=minimal_work_unit())
    callers = [ALICE, BOB] * 8
    results = await asyncio.gather(
        *(ess.api.CreateWorkUnit(request, metadata=who) for who in callers),
        return_exceptions=True,
    )
    for who, result in zip(callers, results, strict=True):
        if who is ALICE:
            assert not isinstance(result, BaseException), result
        else:
            assert isinstance(result, grpc.aio.AioRpcError)
            assert result.code() == grpc.StatusCode.PERMISSION_DENIED
    listed = await ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=created.name), metadata=ALICE
    )
    assert [w.name.rsplit("/", 1)[1] for w in listed.work_units] == [str(i) for i in range(1, 9)]


async def test_unauthenticated_calls_are_refused(ess: Ess) -> None:
    await expect_error(
        ess.api.ListExperiments(api_pb2.ListExperimentsRequest()),
        grpc.StatusCode.UNAUTHENTICATED,
        "missing bearer token",
    )
    await expect_error(
        ess.api.ListExperiments(
            api_pb2.ListExperimentsRequest(), metadata=(("authorization", "Bearer nope"),)
        ),
        grpc.StatusCode.UNAUTHENTICATED,
        "",
    )


def _bad_work_unit(mutate: Callable[[WorkUnit], None]) -> WorkUnit:
    work_unit = minimal_work_unit()
    mutate(work_unit)
    return work_unit


def _retry_policy(text: str) -> Callable[[WorkUnit], None]:
    def set_policy(w: WorkUnit) -> None:
        w.executable.jobset.annotations["xmc.dev/retry-policy"] = text

    return set_policy


def _host_network(w: WorkUnit) -> None:
    w.executable.jobset.jobs[0].host_network = True


@pytest.mark.parametrize(
    ("work_unit", "fragment"),
    [
        pytest.param(WorkUnit(), "work_unit.executable: required", id="no executable"),
        pytest.param(
            _bad_work_unit(lambda w: w.executable.scheduling_constraints.ClearField("queue_name")),
            "work_unit.executable.scheduling_constraints.queue_name: required",
            id="no queue",
        ),
        pytest.param(
            _bad_work_unit(lambda w: setattr(w.executable.jobset.jobs[0], "replicas", -1)),
            "work_unit.executable.jobset.jobs[0].replicas: must be >= 0",
            id="negative replicas",
        ),
        pytest.param(
            _bad_work_unit(lambda w: setattr(w, "priority", 9)),
            "work_unit.priority: 9 is not a valid value",
            id="unknown enum",
        ),
        pytest.param(
            _bad_work_unit(_host_network),
            "work_unit.executable.jobset.jobs[0].host_network: requires",
            id="host network without exclusive topology",
        ),
        pytest.param(
            _bad_work_unit(
                lambda w: w.executable.jobset.jobs[0].spec.resources.cpu_resources.__setattr__(
                    "memory_bytes", -5
                )
            ),
            "resources.cpu_resources.memory_bytes: must be >= 0",
            id="negative resources",
        ),
        pytest.param(
            _bad_work_unit(lambda w: setattr(w.executable.jobset.jobs[0], "name", "Bad_Name")),
            "jobs[0].name: 'Bad_Name' must be a DNS label",
            id="invalid job name",
        ),
        pytest.param(
            _bad_work_unit(_retry_policy('{"max_attempts": 0}')),
            "work_unit.executable.jobset.annotations['xmc.dev/retry-policy'].max_attempts: "
            "a whole number from 1 to 100, got 0",
            id="retry policy out of range",
        ),
        pytest.param(
            _bad_work_unit(_retry_policy("{not json")),
            "work_unit.executable.jobset.annotations['xmc.dev/retry-policy']: not JSON",
            id="retry policy not JSON",
        ),
    ],
)
async def test_bad_work_units_are_invalid_and_write_nothing(
    ess: Ess, work_unit: WorkUnit, fragment: str
) -> None:
    parent = (await new_experiment(ess)).name
    before = await snapshot(ess.database_url)
    await expect_error(
        ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit), metadata=ALICE
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        fragment,
    )
    assert await snapshot(ess.database_url) == before
    assert await ess.stream(ess.names.tasks) == []


async def test_bad_names_filters_and_masks(ess: Ess) -> None:
    parent = (await new_experiment(ess)).name
    cases: list[tuple[Awaitable[Any], grpc.StatusCode, str]] = [
        (
            ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name="workUnits/1"), metadata=ALICE),
            grpc.StatusCode.INVALID_ARGUMENT,
            "name: 'workUnits/1' is not of the form",
        ),
        (
            ess.api.GetExperiment(
                api_pb2.GetExperimentRequest(name="experiments/42"), metadata=ALICE
            ),
            grpc.StatusCode.NOT_FOUND,
            "experiments/42 does not exist",
        ),
        (
            ess.api.GetWorkUnit(
                api_pb2.GetWorkUnitRequest(name=f"{parent}/workUnits/9"), metadata=ALICE
            ),
            grpc.StatusCode.NOT_FOUND,
            "workUnits/9 does not exist",
        ),
        (
            ess.api.ListWorkUnits(
                api_pb2.ListWorkUnitsRequest(parent=parent, filter="state = = RUNNING"),
                metadata=ALICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "filter:",
        ),
        (
            ess.api.ListWorkUnits(
                api_pb2.ListWorkUnitsRequest(parent=parent, filter="colour = red"),
                metadata=ALICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "unknown field 'colour'",
        ),
        (
            ess.api.ListExperiments(
                api_pb2.ListExperimentsRequest(page_token="garbage"), metadata=ALICE
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "page_token",
        ),
        (
            ess.api.UpdateExperiment(
                api_pb2.UpdateExperimentRequest(
                    experiment=Experiment(name=parent), update_mask=FieldMask(paths=["creator"])
                ),
                metadata=ALICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "update_mask: 'creator' cannot be updated",
        ),
        (
            ess.api.UpdateExperimentLaunchState(
                api_pb2.UpdateExperimentLaunchStateRequest(name=parent, launch_state=1),  # type: ignore[arg-type]
                metadata=ALICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "launch_state: must be COMPLETED or FAILED",
        ),
    ]
    before = await snapshot(ess.database_url)
    for call, code, fragment in cases:
        await expect_error(call, code, fragment)
    assert await snapshot(ess.database_url) == before


async def test_artifacts_crud(ess: Ess) -> None:
    parent = (await new_experiment(ess)).name
    await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    created = await ess.api.CreateArtifact(
        api_pb2.CreateArtifactRequest(
            parent=f"{parent}/workUnits/1",
            artifact=Artifact(tags=["ckpt"], data_type=Artifact.MODEL_SNAPSHOTS, notes="step 10"),
        ),
        metadata=ALICE,
    )
    assert created.name.startswith("artifacts/")
    assert (
        await ess.api.GetArtifact(api_pb2.GetArtifactRequest(name=created.name), metadata=BOB)
        == created
    )
    listed = await ess.api.ListArtifacts(
        api_pb2.ListArtifactsRequest(parent=parent, filter="data_type = MODEL_SNAPSHOTS"),
        metadata=ALICE,
    )
    assert [a.name for a in listed.artifacts] == [created.name]
    searched = await ess.api.SearchArtifacts(
        api_pb2.ListArtifactsRequest(parent=f"{parent}/workUnits/1", filter="tags:ckpt"),
        metadata=ALICE,
    )
    assert [a.name for a in searched.artifacts] == [created.name]
    updated = await ess.api.UpdateArtifact(
        api_pb2.UpdateArtifactRequest(
            artifact=Artifact(name=created.name, notes="step 20"),
            update_mask=FieldMask(paths=["notes"]),
        ),
        metadata=ALICE,
    )
    assert (updated.notes, list(updated.tags)) == ("step 20", ["ckpt"])
    await expect_error(
        ess.api.DeleteArtifact(api_pb2.DeleteArtifactRequest(name=created.name), metadata=BOB),
        grpc.StatusCode.PERMISSION_DENIED,
        "may not change",
    )
    await ess.api.DeleteArtifact(api_pb2.DeleteArtifactRequest(name=created.name), metadata=ALICE)
    await expect_error(
        ess.api.GetArtifact(api_pb2.GetArtifactRequest(name=created.name), metadata=ALICE),
        grpc.StatusCode.NOT_FOUND,
        "does not exist",
    )


async def test_status_messages_carry_their_execution(ess: Ess) -> None:
    parent = (await new_experiment(ess)).name
    await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    work_unit = f"{parent}/workUnits/1"
    reconciler = metadata("reconciler")
    for eid, text in ((1, "pulling image"), (2, "epoch 1 done")):
        if eid == 2:
            await ess.api.RestartWorkUnit(
                api_pb2.RestartWorkUnitRequest(name=work_unit), metadata=ALICE
            )
        update = executions_pb2.WorkUnitExecutionUpdate(
            work_unit=work_unit,
            execution_id=eid,
            update_mask=FieldMask(paths=["status.user_message"]),
        )
        update.execution.status.user_message.CopyFrom(message(Severity.INFO, text))
        await ess.executions.UpdateWorkUnitExecutions(
            executions_pb2.UpdateWorkUnitExecutionsRequest(updates=[update]), metadata=reconciler
        )
    listed = await ess.api.ListStatusMessages(
        api_pb2.ListStatusMessagesRequest(parent=work_unit), metadata=ALICE
    )
    assert [(m.execution_id, m.content.user_facing_text) for m in listed.status_messages] == [
        (1, "pulling image"),
        (2, "epoch 1 done"),
    ]
    only_second = await ess.api.SearchStatusMessages(
        api_pb2.ListStatusMessagesRequest(parent=parent, filter="execution_id = 2"),
        metadata=ALICE,
    )
    assert [m.content.user_facing_text for m in only_second.status_messages] == ["epoch 1 done"]


async def test_operations_service(ess: Ess) -> None:
    parent = (await new_experiment(ess)).name
    created = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    ops = operations_grpc_pb2.OperationsStub(ess.channel)
    assert await ops.GetOperation(GetOperationRequest(name=created.name), metadata=ALICE) == created
    listed = await ops.ListOperations(ListOperationsRequest(name=parent), metadata=ALICE)
    assert [o.name for o in listed.operations] == [created.name]
    pending = await ops.WaitOperation(
        WaitOperationRequest(name=created.name, timeout=timedelta(milliseconds=100)),
        metadata=ALICE,
    )
    assert not pending.done

    work_unit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=f"{parent}/workUnits/1"), metadata=ALICE
    )
    assert ess.server.store is not None
    async with ess.server.store.transaction() as conn:
        await operations.finish_operation_task(
            conn, created.name, now=ess.clock.now, response=work_unit
        )
    done = await ops.WaitOperation(WaitOperationRequest(name=created.name), metadata=ALICE)
    assert done.done
    response = WorkUnit()
    done.response.Unpack(response)
    assert response.name == work_unit.name
    await expect_error(
        ops.CancelOperation(CancelOperationRequest(name=created.name), metadata=ALICE),
        grpc.StatusCode.UNIMPLEMENTED,
        "cannot be cancelled",
    )
    await expect_error(
        ops.GetOperation(GetOperationRequest(name=f"{parent}/operations/nope"), metadata=ALICE),
        grpc.StatusCode.NOT_FOUND,
        "does not exist",
    )
