"""XMC's end-to-end flows through all its services on the real loopback control plane
(issue 25, point 3): ESS, Actuator and Reconciler as processes, the Actuator and the
Reconciler as k8s/base's ServiceAccounts, against kube-apiserver, the real scheduler, Job
controller, JobSet and Kueue, the pods run by the node agent from their
``kubesim.xmc/behavior`` annotation (docs/cluster.md).

Each flow is the one the kubesim suites check (tests/integration/test_reconciler_e2e.py,
test_system_e2e.py, test_failure_reasons.py), asserted the same way here: restart into
execution 2, a failing container's reason, Kueue priority preemption on the same
execution, global pause and resume. The queue (Kueue's waiting reason and positions) is
in test_real_queue.py.

Every wait is a condition with a deadline (``_eventually``); the deadlines are generous
because the cluster shares two cores with whatever else runs.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any, TypeVar

import grpc
import pytest

from tests.compat.support import USER_EMAIL, USER_TOKEN, client_venv
from tests.compat.test_published_client import run_client
from tests.integration.processes import Client
from tests.integration.support import fetch_all, forever_work_unit, minimal_work_unit
from tests.real.support import NAMESPACE, POLL, jobset_name, state_history
from tests.stack import Stack
from tests.waiting import eventually
from xmc.kube import JOBSETS, KubeError, KubeFailure
from xmc.kube_client import KubeClient
from xmc.model.states import LaunchState, WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import scheduling_pb2, scheduling_pb2_grpc
from xmc_api.xmc.v1 import timeline_pb2, timeline_pb2_grpc

S = WorkUnitState
ERROR = StructuredMessage.ERROR
T = TypeVar("T")
EXECUTION_ID = "xmc.google.com/execution-id"
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"


# --- 1. restart ------------------------------------------------------------------------------


@pytest.mark.parametrize("grace_seconds", [1, 30])
async def test_restart_of_a_running_unit_runs_execution_2(
    admin: KubeClient, client: Client, stack: Stack, grace_seconds: int
) -> None:
    """RestartWorkUnit of a RUNNING unit: the Actuator deletes execution 1's JobSet (uid
    precondition), XMC's finalizer holds it until the Reconciler's fenced write, then a new
    JobSet of the same name carries execution-id 2 and runs. Execution 1 keeps the last
    state observed for it (RUNNING): its JobSet's terminal write is fenced off, so no
    STOPPED reaches either execution. With a 30 s grace period (the default) execution
    1's pod is still Terminating, and running, while execution 2's starts."""
    name = await client.create(
        await client.experiment(), forever_work_unit(grace_seconds=grace_seconds)
    )
    await eventually(lambda: client.execution(name), (1, S.RUNNING), within=90, every=POLL)
    first = await admin.get(JOBSETS, NAMESPACE, jobset_name(name))
    assert first is not None
    assert first["metadata"]["labels"][EXECUTION_ID] == "1"

    await client.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=name))

    async def second() -> tuple[str | None, str | None]:
        jobset = await admin.get(JOBSETS, NAMESPACE, jobset_name(name)) or {}
        meta = jobset.get("metadata") or {}
        return (meta.get("labels") or {}).get(EXECUTION_ID), meta.get("uid")

    await eventually(lambda: client.execution(name), (2, S.RUNNING), within=120, every=POLL)
    execution_id, uid = await second()
    assert execution_id == "2"
    assert uid != first["metadata"]["uid"], "a new JobSet, not execution 1's relabelled"
    old_pods = await _pods_of(admin, first["metadata"]["uid"])
    if grace_seconds >= 30:
        # Kubernetes' deletion, not XMC's choice: the restart does not wait for execution
        # 1's pods, which keep running through their grace period next to execution 2's.
        assert [p["metadata"].get("deletionTimestamp") is not None for p in old_pods] == [True]
        assert old_pods[0]["status"]["phase"] == "Running"

    history = await state_history(stack, name)
    assert max(eid for eid, _ in history) == 2
    states_2 = [state for eid, state in history if eid == 2]
    assert states_2[0] == S.RESTARTING, history
    assert S.RUNNING in states_2, history
    assert S.STOPPED not in states_2, "execution 1's terminal write never reached eid 2"
    executions = await client.api.ListWorkUnitExecutions(
        api_pb2.ListWorkUnitExecutionsRequest(parent=name)
    )
    listed = executions.work_unit_executions
    assert [e.name.rsplit("/", 1)[1] for e in listed] == ["1", "2"]
    assert S(listed[0].status.state) == S.RUNNING, "execution 1's finalizer write was fenced"
    assert [state for eid, state in history if eid == 1][-1] == S.RUNNING, history


# --- 2. a failing container ---------------------------------------------------------------------


async def test_a_container_exiting_3_fails_the_unit_naming_exit_code_and_reason(
    admin: KubeClient, client: Client
) -> None:
    """The node agent runs the container 2 s and exits it 3: the pod Failed, the Job
    (backoffLimit 0) Failed with BackoffLimitExceeded, the JobSet Failed; the Reconciler
    reads the evidence (Job, pod) as xmc-reconciler and stores FAILED with the reason once,
    as test_failure_reasons.py asserts on kubesim."""
    unit = minimal_work_unit()
    job = unit.executable.jobset.jobs[0]
    job.annotations["kubesim.xmc/behavior"] = json.dumps({"run_seconds": 2, "exit_code": 3})
    job.termination_grace_period_seconds = 1
    name = await client.create(await client.experiment(), unit)
    await eventually(lambda: client.state(name), S.FAILED, within=120, every=POLL)

    got = await client.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
    message = got.current_work_unit_execution.status.system_message
    assert (message.severity, message.source) == (ERROR, StructuredMessage.KUBERNETES), message
    reason = message.user_facing_text
    job_name = f"{jobset_name(name)}-main-0"
    assert reason.startswith(f'job "{job_name}" failed (BackoffLimitExceeded): container "main"'), (
        reason
    )
    assert f'of pod "{job_name}-0-' in reason, reason
    assert reason.endswith("exited with code 3 (Error)"), reason
    assert await _messages(client, name) == [(1, ERROR, reason)]
    await eventually(lambda: _exists(admin, jobset_name(name)), False, within=60, every=POLL)
    assert await _messages(client, name) == [(1, ERROR, reason)], "stored once"


# --- 3. Kueue priority preemption ---------------------------------------------------------------


@pytest.fixture
async def small_queue(admin: KubeClient) -> AsyncIterator[str]:
    """A ClusterQueue of 4 CPUs of its own (preemption within it by lower priority, as
    cluster-queue) and a LocalQueue on it in ``xmc``: the test's units compete only with
    each other. Named per run: a deleted ClusterQueue lingers while Kueue's finalizer
    waits for its Workloads to go."""
    suffix = uuid.uuid4().hex[:6]
    cluster_queue, local_queue = f"xmc-test-small-{suffix}", f"small-{suffix}"
    await admin.request(
        "POST",
        f"{KUEUE}/clusterqueues",
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {},
                "queueingStrategy": "BestEffortFIFO",
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "4"},
                                    {"name": "memory", "nominalQuota": "16Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    await admin.request(
        "POST",
        f"{KUEUE}/namespaces/{NAMESPACE}/localqueues",
        body={
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": NAMESPACE},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
    try:
        yield local_queue
    finally:
        for path in (
            f"{KUEUE}/namespaces/{NAMESPACE}/localqueues/{local_queue}",
            f"{KUEUE}/clusterqueues/{cluster_queue}",
        ):
            try:
                await admin.request("DELETE", path)
            except KubeError as error:
                if error.failure is not KubeFailure.NOT_FOUND:
                    raise


async def test_priority_preemption_goes_back_to_scheduling_on_the_same_execution(
    admin: KubeClient, client: Client, stack: Stack, small_queue: str
) -> None:
    """A low-priority unit fills the 4-CPU queue and runs; a high-priority one arrives:
    Kueue evicts the low one (its JobSet suspended, its pods deleted, Terminating for their
    5 s grace period), so it goes RUNNING → DESCHEDULING (R4, from the Terminating pods) →
    SCHEDULING on execution 1, and the high one runs. Stopping the high one lets the low
    one be re-admitted and run again, still on execution 1."""
    low = await client.create(
        await _experiment(client, priority=1),
        _on_queue(forever_work_unit(3_000, grace_seconds=5), small_queue),
    )
    await eventually(lambda: client.state(low), S.RUNNING, within=90, every=POLL)
    high = await client.create(
        await _experiment(client, priority=3), _on_queue(forever_work_unit(2_000), small_queue)
    )
    seen = False

    async def descheduled_then_scheduling() -> tuple[bool, WorkUnitState]:
        nonlocal seen
        state = await client.state(low)
        idle, terminating = await _eviction_signals(admin, low)
        seen = seen or (state is S.DESCHEDULING and idle and terminating > 0)
        return seen, state

    await eventually(descheduled_then_scheduling, (True, S.SCHEDULING), within=120, every=POLL)
    assert (await _eviction_signals(admin, low))[1] == 0, "SCHEDULING once its pods are gone"
    await eventually(lambda: client.execution(high), (1, S.RUNNING), within=90, every=POLL)
    assert (await client.execution(low))[0] == 1

    states = [state for eid, state in await state_history(stack, low) if eid == 1]
    first_run = states.index(S.RUNNING)
    assert states[first_run : first_run + 3] == [S.RUNNING, S.DESCHEDULING, S.SCHEDULING], states

    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=high))
    await eventually(lambda: client.execution(low), (1, S.RUNNING), within=120, every=POLL)
    again = [state for eid, state in await state_history(stack, low)]
    assert again.count(S.RUNNING) >= 2, again
    assert {eid for eid, _ in await state_history(stack, low)} == {1}

    # The timeline (issue 27) shows the preemption and the time re-queued.
    timelines = timeline_pb2_grpc.TimelineServiceStub(client.channel)
    timeline = await timelines.GetWorkUnitTimeline(
        timeline_pb2.GetWorkUnitTimelineRequest(name=low)
    )
    (execution,) = timeline.executions
    assert execution.phases.preemptions >= 1
    changes = [(S(c.to_state).name, c.time.ToJsonString()) for c in execution.changes]
    assert execution.phases.requeue.ToTimedelta().total_seconds() > 0, changes
    assert execution.segments[-1].ongoing


# --- 4. global pause and resume -----------------------------------------------------------------


async def test_pause_parks_creates_and_resume_runs_them(client: Client, stack: Stack) -> None:
    """SchedulingService.PauseScheduling: the Actuator parks CREATE tasks (SCHEDULING_PAUSED,
    no JobSet); a parked unit stopped is SKIPPED; ResumeScheduling: the kept one is created
    on the cluster and runs to COMPLETED (test_system_e2e.py's flow, on the real cluster)."""
    scheduling = scheduling_pb2_grpc.SchedulingServiceStub(client.channel)
    await scheduling.PauseScheduling(scheduling_pb2.PauseSchedulingRequest(reason="real e2e"))
    try:
        parent = await client.experiment()

        async def actuator_sees_the_pause() -> bool:
            """The Actuator re-reads the flag at most every 0.5 s: a canary created before
            it has may still run. Send canaries until one is parked."""
            canary = await client.create(parent)

            async def decided() -> bool:
                return await client.state(canary) != S.INITIALIZING

            await eventually(decided, True, within=60, every=POLL)
            return await client.state(canary) == S.SCHEDULING_PAUSED

        await eventually(actuator_sees_the_pause, True, within=90, every=POLL)
        keep = await client.create(parent)
        drop = await client.create(parent)
        for name in (keep, drop):
            await eventually(
                functools.partial(client.state, name), S.SCHEDULING_PAUSED, within=60, every=POLL
            )
        state = await scheduling.GetSchedulingState(scheduling_pb2.GetSchedulingStateRequest())
        assert (state.paused, state.reason) == (True, "real e2e"), state
        assert state.paused_task_count >= 2, state
        await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=drop))
        assert await client.state(drop) == S.STOPPED
    finally:
        await scheduling.ResumeScheduling(scheduling_pb2.ResumeSchedulingRequest())
    await eventually(lambda: client.state(keep), S.COMPLETED, within=120, every=POLL)
    assert await client.state(drop) == S.STOPPED
    states = [state for _eid, state in await state_history(stack, keep)]
    assert S.SCHEDULING_PAUSED in states, states
    assert S.RUNNING in states, states
    rows = await fetch_all(
        stack.database_url,
        "SELECT wid, resolution_status FROM paused_tasks WHERE xid = $1 AND wid = ANY($2)",
        int(parent.split("/")[1]),
        [_wid(keep), _wid(drop)],
    )
    assert {r["wid"]: r["resolution_status"] for r in rows} == {
        _wid(keep): "RESUMED",
        _wid(drop): "SKIPPED",
    }


# --- 6. a sweep launched by the published client --------------------------------------------


async def test_a_sweep_launched_by_the_published_client_runs_on_the_cluster(
    admin: KubeClient, auth_stack: Stack
) -> None:
    """tests/compat's sweep (``xmanager==0.8.5.post1`` in its own virtualenv, only the
    variables a user sets) on the real cluster: 5 trials of 2 s each to COMPLETED, one more
    added to the launched experiment that runs until the client's batch stop ends it
    STOPPED, and the client's batch restart runs it again as execution 2."""
    python = client_venv("full")
    trials = 5
    lines = await run_client(python, "client_sweep.py", auth_stack, "launch", str(trials))
    steps = {line["step"]: line for line in lines}
    xid = steps["sweep"]["xid"]
    assert steps["sweep"]["work_units"] == trials
    assert steps["re-entry"]["work_units"] == trials + 1
    extra = trials + 1
    metadata = (("authorization", f"Bearer {USER_TOKEN}"),)

    async with grpc.aio.insecure_channel(auth_stack.endpoint) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)

        async def execution(wid: int) -> tuple[int, WorkUnitState]:
            unit = await api.GetWorkUnit(
                api_pb2.GetWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}"),
                metadata=metadata,
            )
            current = unit.current_work_unit_execution
            return int(current.name.rsplit("/", 1)[1]), S(current.status.state)

        for wid in range(1, trials + 1):
            await eventually(
                functools.partial(execution, wid), (1, S.COMPLETED), within=180, every=POLL
            )
        await eventually(functools.partial(execution, extra), (1, S.RUNNING), within=90, every=POLL)
        assert await _exists(admin, f"xmc-{xid}-{extra}")

        await run_client(python, "client_sweep.py", auth_stack, "stop", str(xid), str(extra))
        await eventually(functools.partial(execution, extra), (1, S.STOPPED), within=90, every=POLL)
        await run_client(python, "client_sweep.py", auth_stack, "restart", str(xid), str(extra))
        await eventually(
            functools.partial(execution, extra), (2, S.RUNNING), within=120, every=POLL
        )

        experiment = await api.GetExperiment(
            api_pb2.GetExperimentRequest(name=f"experiments/{xid}"), metadata=metadata
        )
        assert experiment.creator == USER_EMAIL
        assert LaunchState(experiment.status.launch_state) == LaunchState.COMPLETED
        units = await api.ListWorkUnits(
            api_pb2.ListWorkUnitsRequest(parent=f"experiments/{xid}"), metadata=metadata
        )
        rates = sorted(dict(u.executable.jobset.jobs[0].spec.args)["lr"] for u in units.work_units)
        assert len(rates) == trials + 1
    for wid in range(1, trials + 1):  # finished JobSets are released and deleted
        gone = functools.partial(_exists, admin, f"xmc-{xid}-{wid}")
        await eventually(gone, False, within=60, every=POLL)


# --- helpers -------------------------------------------------------------------------------


def _wid(name: str) -> int:
    return int(name.rsplit("/", 1)[1])


def _on_queue(unit: WorkUnit, queue: str) -> WorkUnit:
    unit.executable.scheduling_constraints.queue_name = queue
    return unit


async def _experiment(client: Client, *, priority: int) -> str:
    created = await client.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(priority=priority))  # type: ignore[arg-type]
    )
    return str(created.name)


async def _exists(kube: KubeClient, name: str) -> bool:
    return await kube.get(JOBSETS, NAMESPACE, name) is not None


async def _messages(client: Client, name: str) -> list[tuple[int, int, str]]:
    found = await client.api.ListStatusMessages(api_pb2.ListStatusMessagesRequest(parent=name))
    return [
        (m.execution_id, int(m.content.severity), m.content.user_facing_text)
        for m in found.status_messages
    ]


async def _eviction_signals(admin: KubeClient, name: str) -> tuple[bool, int]:
    """What the cluster shows of an evicted JobSet (decision 0019): suspended with no Job
    active or ready, and how many of its pods are still Terminating."""
    jobset = await admin.get(JOBSETS, NAMESPACE, jobset_name(name)) or {}
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    idle = bool((jobset.get("spec") or {}).get("suspend")) and not any(
        s.get("active") or s.get("ready") for s in statuses
    )
    pods = await _pods_of(admin, (jobset.get("metadata") or {}).get("uid") or "")
    terminating = sum(
        1
        for pod in pods
        if pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    return idle, terminating


async def _pods_of(admin: KubeClient, jobset_uid: str) -> list[dict[str, Any]]:
    pods = await admin.request(
        "GET",
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        query=[("labelSelector", f"jobset.sigs.k8s.io/jobset-uid={jobset_uid}")],
    )
    items: list[dict[str, Any]] = pods["items"]
    return items
