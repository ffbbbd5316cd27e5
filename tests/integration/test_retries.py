"""Automatic retries through a real ESS over gRPC (docs/retries.md): the FAILED
observation, with the run's failure facts, is judged in its own transaction; a retry is a
restart through the outbox, exactly once."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import Any

import grpc
import pytest
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import SIGNING_KEY, Ess, EssFactory, metadata
from tests.integration.support import fetch_all, minimal_work_unit
from tests.integration.test_ess_api import expect_error
from xmc.model.retry_policy import RETRY_POLICY_ANNOTATION
from xmc.model.states import WorkUnitState
from xmc.tasks import verify_task
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import executions_pb2
from xmc_api.internal.v1.tasks_pb2 import Task
from xmc_api.xmc.v1 import retry_pb2, retry_pb2_grpc

S = WorkUnitState
ALICE, BOB, SERVICE = metadata("alice"), metadata("bob"), metadata("reconciler")
Result = executions_pb2.UpdateWorkUnitExecutionResult
POLICY = {"max_attempts": 3, "on_exit_codes": [1, 137], "never_on_exit_codes": [2]}


def unit(policy: dict[str, Any] | None = None) -> WorkUnit:
    work_unit = minimal_work_unit()
    if policy is not None:
        work_unit.executable.jobset.annotations[RETRY_POLICY_ANNOTATION] = json.dumps(policy)
    return work_unit


async def experiment(ess: Ess, *units: WorkUnit) -> str:
    created: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    for work_unit in units:
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=work_unit),
            metadata=ALICE,
        )
    return str(created.name)


def failed(
    ess: Ess, name: str, eid: int, *, code: int | None = None, disrupted: bool = False
) -> executions_pb2.WorkUnitExecutionUpdate:
    """The Reconciler's terminal FAILED observation, with the run's failure facts."""
    update = executions_pb2.WorkUnitExecutionUpdate(
        work_unit=name, execution_id=eid, update_mask=FieldMask(paths=["status.state"])
    )
    update.execution.status.state = int(S.FAILED)  # type: ignore[assignment]
    update.execution.status.state_update_time.FromDatetime(ess.clock.now + timedelta(seconds=1))
    update.failure.disrupted = disrupted
    update.failure.cause = "pod" if disrupted else "container"
    if code is not None:
        update.failure.exit_code = code
    return update


async def send(
    ess: Ess, *updates: executions_pb2.WorkUnitExecutionUpdate, request_id: str = ""
) -> list[Any]:
    metadata = (*SERVICE, ("x-request-id", request_id)) if request_id else SERVICE
    response = await ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(
            writer="reconciler/jobset", updates=list(updates)
        ),
        metadata=metadata,
    )
    return list(response.results)


def retries(ess: Ess) -> retry_pb2_grpc.RetryServiceStub:
    return retry_pb2_grpc.RetryServiceStub(ess.channel)


async def get(ess: Ess, name: str) -> WorkUnit:
    found: WorkUnit = await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE
    )
    return found


def current(work_unit: WorkUnit) -> tuple[int, WorkUnitState]:
    execution = work_unit.current_work_unit_execution
    return int(execution.name.rsplit("/", 1)[1]), WorkUnitState(execution.status.state)


async def retry_tasks(ess: Ess, xid: int, wid: int) -> list[tuple[Task, Any]]:
    rows = await fetch_all(
        ess.database_url,
        """SELECT task, next_attempt FROM task_outbox
           WHERE xid = $1 AND wid = $2 AND origin = 'retry' ORDER BY seq""",
        xid,
        wid,
    )
    return [(Task.FromString(r["task"]), r["next_attempt"]) for r in rows]


async def test_a_matching_failure_is_retried_once_as_a_restart(ess: Ess) -> None:
    parent = await experiment(ess, unit(POLICY))
    name = f"{parent}/workUnits/1"
    (result,) = await send(ess, failed(ess, name, 1, code=137), request_id="batch-7")
    assert (result.outcome, result.state) == (Result.APPLIED, S.FAILED)

    # Attributed (docs/audit.md): the failure to the Reconciler's account, the retry to
    # XMC's policy, both in the request that reported the failure.
    xid = int(parent.rsplit("/", 1)[1])
    rows = await fetch_all(
        ess.database_url,
        "SELECT new_state, principal, request_id FROM work_unit_status_history "
        "WHERE xid = $1 AND wid = 1 ORDER BY id",
        xid,
    )
    assert [(S(r["new_state"]), r["principal"], r["request_id"]) for r in rows[1:]] == [
        (S.FAILED, "reconciler@xmc.internal", "batch-7"),
        (S.RESTARTING, "xmc-retry-policy", "batch-7"),
    ]

    work_unit = await get(ess, name)
    assert current(work_unit) == (2, S.RESTARTING)
    message = work_unit.current_work_unit_execution.status.system_message
    assert message.user_facing_text == "attempt 2 of 3, retried after exit code 137"

    ((task, _due),) = await retry_tasks(ess, xid, 1)
    assert (task.kind, task.target_eid, task.payload.eid) == (Task.RESTART, 1, 2)
    operations = operations_grpc_pb2.OperationsStub(ess.channel)
    operation = await operations.GetOperation(
        GetOperationRequest(name=task.operation), metadata=ALICE
    )
    assert not operation.done
    metadata = OperationMetadata()
    operation.metadata.Unpack(metadata)
    assert metadata.original_requester == "xmc-retry-policy"
    entries = await ess.stream(ess.names.tasks)
    published = [verify_task(f, key=SIGNING_KEY, now=ess.clock.now) for _, f in entries]
    assert [t.task_id for t in published if t.kind == Task.RESTART] == [task.task_id]

    # The same observation again (a Reconciler that did not see the answer) changes
    # nothing: execution 1 is no longer current.
    (again,) = await send(ess, failed(ess, name, 1, code=137))
    assert again.outcome == Result.STALE_EXECUTION
    assert len(await retry_tasks(ess, xid, 1)) == 1

    found = await retries(ess).GetWorkUnitRetries(
        retry_pb2.GetWorkUnitRetriesRequest(name=name), metadata=BOB
    )
    assert (found.execution_id, found.attempt, found.max_attempts) == (2, 2, 3)
    assert found.policy_source == "work_unit"
    ((decision),) = found.decisions
    assert (decision.execution_id, decision.verdict, decision.exit_code) == (1, "retry", 137)
    assert (decision.retry_execution_id, decision.retry_attempt, decision.counted) == (2, 2, True)
    assert decision.operation == task.operation


async def test_the_budget_runs_out_and_a_restart_by_hand_renews_it(ess: Ess) -> None:
    parent = await experiment(ess, unit(POLICY))
    name = f"{parent}/workUnits/1"
    await send(ess, failed(ess, name, 1, code=1))
    await send(ess, failed(ess, name, 2, code=137))
    (last,) = await send(ess, failed(ess, name, 3, code=1))
    assert last.state == S.FAILED
    assert current(await get(ess, name)) == (3, S.FAILED)

    found = await retries(ess).GetWorkUnitRetries(
        retry_pb2.GetWorkUnitRetriesRequest(name=name), metadata=ALICE
    )
    assert [(d.execution_id, d.verdict, d.attempt) for d in found.decisions] == [
        (1, "retry", 1),
        (2, "retry", 2),
        (3, "exhausted", 3),
    ]
    assert (found.attempt, found.max_attempts) == (3, 3)

    await ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=name), metadata=ALICE)
    await send(ess, failed(ess, name, 4, code=1))
    work_unit = await get(ess, name)
    assert current(work_unit) == (5, S.RESTARTING)
    # Retries are spaced by the cluster's cap (60 a minute here): the clock stood still.
    assert work_unit.current_work_unit_execution.status.system_message.user_facing_text == (
        "attempt 2 of 3, retried after exit code 1; starts at 12:00:02 UTC"
    )


@pytest.mark.parametrize(
    ("code", "verdict"), [(2, "never"), (3, "not_matched"), (None, "not_matched")]
)
async def test_a_failure_the_policy_does_not_match_stays_failed(
    ess: Ess, code: int | None, verdict: str
) -> None:
    parent = await experiment(ess, unit(POLICY))
    name = f"{parent}/workUnits/1"
    await send(ess, failed(ess, name, 1, code=code))
    assert current(await get(ess, name)) == (1, S.FAILED)
    found = await retries(ess).GetWorkUnitRetries(
        retry_pb2.GetWorkUnitRetriesRequest(name=name), metadata=ALICE
    )
    assert [d.verdict for d in found.decisions] == [verdict]


async def test_without_a_policy_or_facts_nothing_is_retried(ess: Ess) -> None:
    parent = await experiment(ess, unit(), unit(POLICY))
    await send(ess, failed(ess, f"{parent}/workUnits/1", 1, code=1))
    bare = failed(ess, f"{parent}/workUnits/2", 1)
    bare.ClearField("failure")  # XMC's own FAILED decision carries no facts
    await send(ess, bare)
    for wid in (1, 2):
        assert current(await get(ess, f"{parent}/workUnits/{wid}")) == (1, S.FAILED)
    assert await fetch_all(ess.database_url, "SELECT * FROM retry_decisions") == []


async def test_a_disruption_spends_no_attempt(ess: Ess) -> None:
    parent = await experiment(ess, unit({"max_attempts": 2}))
    name = f"{parent}/workUnits/1"
    await send(ess, failed(ess, name, 1, code=137, disrupted=True))
    work_unit = await get(ess, name)
    assert current(work_unit) == (2, S.RESTARTING)
    assert "attempt 1 of 2 again" in (
        work_unit.current_work_unit_execution.status.system_message.user_facing_text
    )
    await send(ess, failed(ess, name, 2, code=1))
    assert current(await get(ess, name)) == (3, S.RESTARTING)
    await send(ess, failed(ess, name, 3, code=1))
    assert current(await get(ess, name)) == (3, S.FAILED)
    found = await retries(ess).GetWorkUnitRetries(
        retry_pb2.GetWorkUnitRetriesRequest(name=name), metadata=ALICE
    )
    assert [(d.verdict, d.attempt, d.counted) for d in found.decisions] == [
        ("retry", 1, False),
        ("retry", 1, True),
        ("exhausted", 2, False),
    ]


async def test_concurrent_copies_of_one_failure_retry_it_once(ess: Ess) -> None:
    """Two Reconciler writes of one FAILED (the batch and the finalizer's) race: the row
    lock orders them, and only the first turns the execution FAILED."""
    parent = await experiment(ess, unit(POLICY))
    name = f"{parent}/workUnits/1"
    results = await asyncio.gather(*(send(ess, failed(ess, name, 1, code=1)) for _ in range(8)))
    assert sorted(r[0].state_changed for r in results) == [False] * 7 + [True]
    xid = int(parent.rsplit("/", 1)[1])
    assert len(await retry_tasks(ess, xid, 1)) == 1
    assert current(await get(ess, name)) == (2, S.RESTARTING)


async def test_the_backoff_and_the_cluster_cap_set_when_a_retry_starts(
    ess_factory: EssFactory,
) -> None:
    ess = await ess_factory(retries_per_minute=6)
    policy = {"max_attempts": 2, "backoff_seconds": 30}
    parent = await experiment(ess, *(unit(policy) for _ in range(3)))
    await send(ess, *(failed(ess, f"{parent}/workUnits/{w}", 1, code=1) for w in (1, 2, 3)))
    xid = int(parent.rsplit("/", 1)[1])
    dues = [(await retry_tasks(ess, xid, w))[0][1] for w in (1, 2, 3)]
    start = ess.clock.now + timedelta(seconds=30)
    assert dues == [start, start + timedelta(seconds=10), start + timedelta(seconds=20)]
    text = (await get(ess, f"{parent}/workUnits/2")).current_work_unit_execution.status
    assert text.system_message.user_facing_text.endswith(
        f"starts at {(start + timedelta(seconds=10)).strftime('%H:%M:%S')} UTC"
    )

    # Not on the stream before it is due; on it once the clock passes its time.
    async def restarts_on_stream() -> list[int]:
        assert ess.server.relay is not None
        await ess.server.relay.relay_once()
        entries = await ess.redis.xrange(ess.names.tasks)
        tasks = [verify_task(f, key=SIGNING_KEY, now=ess.clock.now) for _, f in entries]
        return [t.wid for t in tasks if t.kind == Task.RESTART]

    assert await restarts_on_stream() == []
    ess.clock.advance(31)
    assert await restarts_on_stream() == [1]
    ess.clock.advance(20)
    assert await restarts_on_stream() == [1, 2, 3]


async def test_an_experiment_default_applies_to_units_without_their_own(ess: Ess) -> None:
    parent = await experiment(ess, unit(), unit({"max_attempts": 1}))
    stub = retries(ess)
    set_to = await stub.SetExperimentRetryPolicy(
        retry_pb2.SetExperimentRetryPolicyRequest(
            name=parent, policy='{"on_exit_codes": [137, 1], "max_attempts": 2}'
        ),
        metadata=ALICE,
    )
    assert json.loads(set_to.policy) == {
        "max_attempts": 2,
        "on_exit_codes": [1, 137],
        "never_on_exit_codes": [],
        "backoff_seconds": 0,
    }
    got = await stub.GetExperimentRetryPolicy(
        retry_pb2.GetExperimentRetryPolicyRequest(name=parent), metadata=BOB
    )
    assert got.policy == set_to.policy
    await send(ess, *(failed(ess, f"{parent}/workUnits/{w}", 1, code=137) for w in (1, 2)))
    assert current(await get(ess, f"{parent}/workUnits/1")) == (2, S.RESTARTING)
    assert current(await get(ess, f"{parent}/workUnits/2")) == (1, S.FAILED)  # its own wins

    cleared = await stub.SetExperimentRetryPolicy(
        retry_pb2.SetExperimentRetryPolicyRequest(name=parent, policy=""), metadata=ALICE
    )
    assert cleared.policy == ""


async def test_setting_a_default_is_checked(ess: Ess) -> None:
    parent = await experiment(ess)
    stub = retries(ess)
    await expect_error(
        stub.SetExperimentRetryPolicy(
            retry_pb2.SetExperimentRetryPolicyRequest(name=parent, policy='{"max_attempts": 0}'),
            metadata=ALICE,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "policy.max_attempts",
    )
    await expect_error(
        stub.SetExperimentRetryPolicy(
            retry_pb2.SetExperimentRetryPolicyRequest(name=parent, policy="{}"), metadata=BOB
        ),
        grpc.StatusCode.PERMISSION_DENIED,
        "bob@example.com",
    )
    await expect_error(
        stub.GetExperimentRetryPolicy(
            retry_pb2.GetExperimentRetryPolicyRequest(name="experiments/424242"), metadata=ALICE
        ),
        grpc.StatusCode.NOT_FOUND,
        "experiments/424242",
    )
    await expect_error(
        stub.GetWorkUnitRetries(
            retry_pb2.GetWorkUnitRetriesRequest(name="experiments/x"), metadata=ALICE
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "name",
    )


async def test_a_preemption_spends_no_attempt(ess: Ess) -> None:
    """Kueue's preemption suspends the JobSet and re-queues it within the same execution
    (DESCHEDULING → SCHEDULING): no execution is made, so no attempt is spent."""
    parent = await experiment(ess, unit({"max_attempts": 2, "on_exit_codes": [137]}))
    name = f"{parent}/workUnits/1"
    for seconds, state in enumerate((S.RUNNING, S.DESCHEDULING, S.SCHEDULING, S.RUNNING), 1):
        update = failed(ess, name, 1)
        update.ClearField("failure")
        update.execution.status.state = int(state)  # type: ignore[assignment]
        update.execution.status.state_update_time.FromDatetime(
            ess.clock.now + timedelta(seconds=seconds)
        )
        await send(ess, update)
    late = failed(ess, name, 1, code=137)
    late.execution.status.state_update_time.FromDatetime(ess.clock.now + timedelta(seconds=9))
    await send(ess, late)
    work_unit = await get(ess, name)
    assert current(work_unit) == (2, S.RESTARTING)
    assert work_unit.current_work_unit_execution.status.system_message.user_facing_text == (
        "attempt 2 of 2, retried after exit code 137"
    )
