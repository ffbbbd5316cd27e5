"""SPEC §10 end to end against the local run: kubesim, ESS, Actuator and Reconciler as
separate OS processes (``python -m xmc.devrun``), driven through the public gRPC API.

One system per test worker (session fixture); each test uses its own experiment.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Iterator
from typing import Any
from urllib.request import urlopen

import asyncpg
import grpc
import pytest
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest

from tests.integration.local_run import LocalSystem, local_run
from tests.integration.support import forever_work_unit, minimal_work_unit
from tests.waiting import eventually
from xmc.model.states import ActiveState, WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import scheduling_pb2, scheduling_pb2_grpc

# The four services as OS processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState


@pytest.fixture(scope="session")
def local_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    with local_run(tmp_path_factory) as system:
        yield system


@pytest.fixture(scope="session")
def skewed_local_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    """The local run with kubesim's clock 5 s behind the host's."""
    with local_run(tmp_path_factory, clock_offset="-5s") as system:
        yield system


class Client:
    def __init__(self, system: LocalSystem) -> None:
        self.system = system
        self.channel = grpc.aio.insecure_channel(system.endpoint)
        self.api = api_pb2_grpc.ExperimentStateServiceStub(self.channel)
        self.scheduling = scheduling_pb2_grpc.SchedulingServiceStub(self.channel)

    async def experiment(self, priority: int = 0) -> str:
        created = await self.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment(priority=priority))  # type: ignore[arg-type]
        )
        return str(created.name)

    async def work_unit(self, parent: str, work_unit: WorkUnit | None = None) -> str:
        operation = await self.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit or minimal_work_unit())
        )
        return str(operation.name).split("/operations/")[0]

    async def state(self, name: str) -> WorkUnitState:
        work_unit = await self.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
        return S(work_unit.current_work_unit_execution.status.state)

    async def history(self, name: str) -> list[tuple[int, WorkUnitState]]:
        xid, wid = (int(part) for part in name.split("/")[1::2])
        conn = await asyncpg.connect(self.system.database_url)
        try:
            rows = await conn.fetch(
                "SELECT eid, new_state FROM work_unit_status_history "
                "WHERE xid = $1 AND wid = $2 ORDER BY id",
                xid,
                wid,
            )
        finally:
            await conn.close()
        return [(r["eid"], S(r["new_state"])) for r in rows]

    def ui(self, path: str) -> str:
        """A page or REST answer of the local run's dashboard (``xmc-ui``)."""
        with urlopen(self.system.ui_url + path, timeout=10) as response:
            return str(response.read().decode())

    def jobset(self, name: str) -> Any:
        xid, wid = name.split("/")[1::2]
        path = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/xmc-{xid}-{wid}"
        try:
            with urlopen(self.system.kube_url + path, timeout=5) as response:
                return json.loads(response.read())
        except OSError:
            return None


@pytest.fixture
async def client(local_system: LocalSystem) -> Any:
    made = Client(local_system)
    yield made
    await made.channel.close()


def forever(cpu_millicores: int = 1000) -> WorkUnit:
    return forever_work_unit(cpu_millicores)


async def test_create_runs_to_completed_and_the_experiment_finishes(client: Client) -> None:
    parent = await client.experiment()
    operation = await client.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit())
    )
    name = str(operation.name).split("/operations/")[0]
    await client.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=parent, launch_state=ExperimentStatus.COMPLETED
        )
    )
    await eventually(lambda: client.state(name), S.COMPLETED, within=60)
    states = [state for _eid, state in await client.history(name)]
    assert states[0] == S.INITIALIZING
    assert S.RUNNING in states
    experiment = await client.api.GetExperiment(api_pb2.GetExperimentRequest(name=parent))
    assert ActiveState(experiment.status.active_state) == ActiveState.INACTIVE
    assert experiment.HasField("complete_time")
    operations = operations_grpc_pb2.OperationsStub(client.channel)
    closed = await operations.GetOperation(GetOperationRequest(name=operation.name))
    assert closed.done
    assert not closed.HasField("error")


async def test_stop_ends_stopped_and_the_jobset_is_gone(client: Client) -> None:
    name = await client.work_unit(await client.experiment(), forever())
    await eventually(lambda: client.state(name), S.RUNNING, within=60)
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))
    await eventually(lambda: client.state(name), S.STOPPED, within=60)

    async def gone() -> bool:
        return client.jobset(name) is None

    await eventually(gone, True, within=60)
    assert [s for _e, s in await client.history(name)][-2:] == [S.STOPPING, S.STOPPED]


async def test_restart_makes_execution_2(client: Client) -> None:
    name = await client.work_unit(await client.experiment(), forever())
    await eventually(lambda: client.state(name), S.RUNNING, within=60)
    await client.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=name))

    async def second_running() -> bool:
        jobset = client.jobset(name)
        labels = (jobset or {}).get("metadata", {}).get("labels", {})
        return (
            labels.get("xmc.google.com/execution-id") == "2"
            and await client.state(name) == S.RUNNING
        )

    await eventually(second_running, True, within=90)
    executions = await client.api.ListWorkUnitExecutions(
        api_pb2.ListWorkUnitExecutionsRequest(parent=name)
    )
    assert [e.name.rsplit("/", 1)[1] for e in executions.work_unit_executions] == ["1", "2"]
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))


def _eviction_signals(client: Client, name: str) -> tuple[bool, int]:
    """What the cluster shows of an evicted JobSet (docs/decisions/0019): suspended with no
    Job active or ready, and how many of its pods are still Terminating."""
    jobset = client.jobset(name) or {}
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    idle = bool((jobset.get("spec") or {}).get("suspend")) and not any(
        s.get("active") or s.get("ready") for s in statuses
    )
    uid = (jobset.get("metadata") or {}).get("uid")
    path = f"/api/v1/namespaces/default/pods?labelSelector=jobset.sigs.k8s.io/jobset-uid%3D{uid}"
    with urlopen(client.system.kube_url + path, timeout=5) as response:
        pods = json.loads(response.read())["items"]
    terminating = sum(
        1
        for pod in pods
        if pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    return idle, terminating


async def test_preemption_and_readmission_on_the_same_execution(client: Client) -> None:
    # Its pods take 3 s to go, so DESCHEDULING outlives the batcher's coalescing.
    evicted = forever_work_unit(60_000, grace_seconds=3)
    low = await client.work_unit(await client.experiment(priority=1), evicted)
    await eventually(lambda: client.state(low), S.RUNNING, within=60)
    high = await client.work_unit(await client.experiment(priority=3), forever(10_000))
    seen = False

    async def descheduled_then_scheduling() -> tuple[bool, WorkUnitState]:
        # R4 from the pods: DESCHEDULING while the counts already say nothing runs.
        nonlocal seen
        state = await client.state(low)
        idle, terminating = _eviction_signals(client, low)
        seen = seen or (state is S.DESCHEDULING and idle and terminating > 0)
        return seen, state

    await eventually(descheduled_then_scheduling, (True, S.SCHEDULING), within=90)
    assert _eviction_signals(client, low)[1] == 0, "SCHEDULING once the evicted pods are gone"
    await eventually(lambda: client.state(high), S.RUNNING, within=60)
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=high))
    await eventually(lambda: client.state(low), S.RUNNING, within=90)
    states = [state for eid, state in await client.history(low) if eid == 1]
    first_run = states.index(S.RUNNING)
    assert states[first_run : first_run + 3] == [S.RUNNING, S.DESCHEDULING, S.SCHEDULING]
    assert states[-1] == S.RUNNING
    _assert_the_timeline_shows_the_preemption(client, low)
    await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=low))


def _assert_the_timeline_shows_the_preemption(client: Client, name: str) -> None:
    """The timeline the dashboard serves (REST) and draws (its page), from the history
    the Reconciler's observations wrote: one execution, preempted once, running again."""
    (execution,) = json.loads(client.ui(f"/v1/{name}/timeline"))["executions"]
    to = [change["toState"] for change in execution["changes"]]
    first_run = to.index("RUNNING")
    assert to[first_run : first_run + 3] == ["RUNNING", "DESCHEDULING", "SCHEDULING"], to
    assert execution["phases"]["preemptions"] == 1
    assert float(execution["phases"]["requeue"].removesuffix("s")) > 0
    assert execution["segments"][-1]["state"] == "RUNNING"
    assert execution["segments"][-1]["ongoing"] is True
    page = client.ui("/" + name)
    assert 'data-state="DESCHEDULING" data-note="preempted' in page  # maybe more notes
    assert 'data-state="SCHEDULING" data-note="re-queued' in page
    assert 'class="tl-seg st-running ongoing"' in page


async def test_pause_and_resume(client: Client) -> None:
    await client.scheduling.PauseScheduling(scheduling_pb2.PauseSchedulingRequest(reason="e2e"))
    try:
        parent = await client.experiment()

        async def actuator_sees_the_pause() -> bool:
            """The Actuator re-reads the flag at most every 0.5 s: until it has, a canary
            work unit still runs. Send canaries until one is parked."""
            canary = await client.work_unit(parent)

            async def decided() -> bool:
                return await client.state(canary) != S.INITIALIZING

            await eventually(decided, True, within=30)
            return await client.state(canary) == S.SCHEDULING_PAUSED

        await eventually(actuator_sees_the_pause, True, within=30)
        keep = await client.work_unit(parent)
        drop = await client.work_unit(parent)
        for name in (keep, drop):
            await eventually(functools.partial(client.state, name), S.SCHEDULING_PAUSED, within=60)
        await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=drop))
        assert await client.state(drop) == S.STOPPED
    finally:
        await client.scheduling.ResumeScheduling(scheduling_pb2.ResumeSchedulingRequest())
    await eventually(lambda: client.state(keep), S.COMPLETED, within=90)
    assert await client.state(drop) == S.STOPPED
    conn = await asyncpg.connect(client.system.database_url)
    try:
        rows = await conn.fetch(
            "SELECT wid, resolution_status FROM paused_tasks WHERE xid = $1 AND wid = ANY($2)",
            int(parent.split("/")[1]),
            [int(keep.rsplit("/", 1)[1]), int(drop.rsplit("/", 1)[1])],
        )
    finally:
        await conn.close()
    resolutions = {r["wid"]: r["resolution_status"] for r in rows}
    assert resolutions == {
        int(keep.rsplit("/", 1)[1]): "RESUMED",
        int(drop.rsplit("/", 1)[1]): "SKIPPED",
    }


async def test_a_sweep_of_200_completes_with_exact_rollups(client: Client) -> None:
    parent = await client.experiment()
    names = await asyncio.gather(*(client.work_unit(parent) for _ in range(200)))
    await client.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=parent, launch_state=ExperimentStatus.COMPLETED
        )
    )

    async def completed() -> int:
        listed = await client.api.ListWorkUnits(
            api_pb2.ListWorkUnitsRequest(parent=parent, filter="state = COMPLETED", page_size=1000)
        )
        return len(listed.work_units)

    await eventually(completed, 200, within=180)
    experiment = await client.api.GetExperiment(api_pb2.GetExperimentRequest(name=parent))
    counts = {S(c.state): c.count for c in experiment.status.child_state_counts}
    assert counts == {S.COMPLETED: 200}
    assert ActiveState(experiment.status.active_state) == ActiveState.INACTIVE
    assert len(set(names)) == 200


# --- Every stop lands, at real time (issue: 106 of 110 stops once hung in STOPPING) ------


def _light_forever() -> WorkUnit:
    work_unit = forever(cpu_millicores=100)
    return work_unit


async def _launched(client: Client, count: int) -> tuple[str, list[str]]:
    """An experiment whose launch is COMPLETED, with ``count`` never-ending work units."""
    parent = await client.experiment()
    names = list(
        await asyncio.gather(*(client.work_unit(parent, _light_forever()) for _ in range(count)))
    )
    await client.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=parent, launch_state=ExperimentStatus.COMPLETED
        )
    )
    return parent, names


async def _states(client: Client, parent: str) -> dict[str, WorkUnitState]:
    listed = await client.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent, page_size=1000)
    )
    return {w.name: S(w.current_work_unit_execution.status.state) for w in listed.work_units}


async def _all(client: Client, parent: str, state: WorkUnitState, count: int) -> bool:
    states = await _states(client, parent)
    return len(states) == count and all(s == state for s in states.values())


def _jobsets_of(client: Client, parent: str) -> list[str]:
    xid = parent.split("/")[1]
    path = (
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
        f"?labelSelector=xmc.google.com/experiment-id%3D{xid}"
    )
    with urlopen(client.system.kube_url + path, timeout=5) as response:
        return [item["metadata"]["name"] for item in json.loads(response.read())["items"]]


async def _stopped_for_good(client: Client, parent: str, count: int) -> None:
    """Every work unit STOPPED within 30 s, no JobSet left, the experiment INACTIVE."""
    await eventually(functools.partial(_all, client, parent, S.STOPPED, count), True, within=30)

    async def no_jobsets() -> list[str]:
        return _jobsets_of(client, parent)

    none: list[str] = []
    await eventually(no_jobsets, none, within=30)
    experiment = await client.api.GetExperiment(api_pb2.GetExperimentRequest(name=parent))
    assert ActiveState(experiment.status.active_state) == ActiveState.INACTIVE
    counts = {S(c.state): c.count for c in experiment.status.child_state_counts}
    assert counts == {S.STOPPED: count}


async def _stop_each(client: Client, names: list[str]) -> None:
    await asyncio.gather(
        *(client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name)) for name in names)
    )


async def _stopped_right_after_create(client: Client) -> None:
    parent = await client.experiment()

    async def create_and_stop() -> None:
        name = await client.work_unit(parent, _light_forever())
        await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name))

    await asyncio.gather(*(create_and_stop() for _ in range(50)))
    await client.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=parent, launch_state=ExperimentStatus.COMPLETED
        )
    )
    await _stopped_for_good(client, parent, 50)


async def _stopped_while_running(client: Client) -> None:
    parent, names = await _launched(client, 20)
    await eventually(functools.partial(_all, client, parent, S.RUNNING, 20), True, within=60)
    await _stop_each(client, names)
    await _stopped_for_good(client, parent, 20)


async def _restarted_then_stopped(client: Client) -> None:
    parent, names = await _launched(client, 10)
    await eventually(functools.partial(_all, client, parent, S.RUNNING, 10), True, within=60)
    await asyncio.gather(
        *(client.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=n)) for n in names)
    )
    await _stop_each(client, names)
    await _stopped_for_good(client, parent, 10)
    executions = await client.api.ListWorkUnitExecutions(
        api_pb2.ListWorkUnitExecutionsRequest(parent=names[0])
    )
    assert [e.name.rsplit("/", 1)[1] for e in executions.work_unit_executions] == ["1", "2"]


async def _batch_stopped(client: Client) -> None:
    parent, _names = await _launched(client, 50)
    await eventually(functools.partial(_all, client, parent, S.RUNNING, 50), True, within=60)
    operation = await client.api.BatchStopWorkUnits(
        api_pb2.BatchStopWorkUnitsRequest(parent=parent)
    )
    await _stopped_for_good(client, parent, 50)
    operations = operations_grpc_pb2.OperationsStub(client.channel)

    async def batch_done() -> bool:
        closed = await operations.GetOperation(GetOperationRequest(name=operation.name))
        return bool(closed.done) and not closed.HasField("error")

    await eventually(batch_done, True, within=30)


async def test_every_stop_lands_at_real_time(client: Client) -> None:
    """SPEC §10.3 at time scale 1: 50 stops right after create, 20 while RUNNING, 10 right
    after a restart, one BatchStop of 50 — all STOPPED within 30 s of their stop."""
    await _every_kind_of_stop(client)


async def test_every_stop_lands_with_the_cluster_clock_behind(
    skewed_local_system: LocalSystem,
) -> None:
    """The same, with the cluster stamping 5 s behind XMC: its STOPPED is "older" than
    every STOPPING it ends."""
    client = Client(skewed_local_system)
    try:
        await _every_kind_of_stop(client)
    finally:
        await client.channel.close()


async def _every_kind_of_stop(client: Client) -> None:
    await asyncio.gather(
        _stopped_right_after_create(client),
        _stopped_while_running(client),
        _restarted_then_stopped(client),
        _batch_stopped(client),
    )
