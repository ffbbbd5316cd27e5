"""The whole loop in one event loop: ESS (gRPC) → tasks → Actuator → kubesim (HTTP, with
its JobSet/Kueue/kubelet simulators) → Reconciler (watches) → UpdateBatcher → ESS. The
SPEC §10 sequences end in the right stored states and history.

Everything runs at real time (kubesim time scale 1, the ESS and the Reconciler on the
host's clock), and the flows whose XMC and cluster timestamps meet (create to completion,
stop, restart, preemption) also run with the cluster's clock 5 s behind and 5 s ahead: a
scaled cluster clock running ahead of the ESS's once hid a stop that hung for every user.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from kubesim.resources import JOBSET, POD, WORKLOAD
from reconciler import metrics
from reconciler.app import Reconciler
from reconciler.ess_client import EssClient, EssUnavailable, UpdateResult
from reconciler.leader import LeaseSettings
from tests.integration.support import BuggyReads, forever_work_unit, minimal_work_unit
from tests.integration.system import ALICE, System, running_system
from tests.kubesim.support import jobset
from tests.waiting import eventually
from xmc.kube import JOBSETS
from xmc.kube_client import KubeClient
from xmc.labels import (
    EXECUTION_ID,
    EXPERIMENT_ID,
    MANAGED_BY,
    MANAGED_BY_VALUE,
    WORK_UNIT_ID,
)
from xmc.model.states import WorkUnitState
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

# The whole loop at real time, skewed clocks: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
#: The cluster clock against the host's, for the flows where XMC's and the cluster's
#: timestamps meet.
OFFSETS = [
    pytest.param(timedelta(seconds=-5), id="cluster 5s behind"),
    pytest.param(timedelta(0), id="clocks agree"),
    pytest.param(timedelta(seconds=5), id="cluster 5s ahead"),
]


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory, controllers=True) as started:
        yield started


@pytest.fixture(params=OFFSETS)
async def skewed_system(ess_factory: Any, request: pytest.FixtureRequest) -> AsyncIterator[System]:
    """The system with kubesim's clock behind, equal to or ahead of the host's."""
    async with running_system(ess_factory, controllers=True, clock_offset=request.param) as started:
        yield started


#: The simulated Kueue's versions: v0.19's waiting reasons (Pending, Inadmissible) and
#: current upstream's (WaitingForQuota, ...): the Reconciler must show a message under both.
KUEUE_VERSIONS = [pytest.param("0.19", id="kueue 0.19"), pytest.param("0.20", id="kueue 0.20")]


@pytest.fixture(params=KUEUE_VERSIONS)
async def versioned_system(
    ess_factory: Any, request: pytest.FixtureRequest
) -> AsyncIterator[System]:
    """The system with each simulated Kueue version."""
    async with running_system(
        ess_factory, controllers=True, kueue_version=request.param
    ) as started:
        yield started


@pytest.fixture
async def quiet_system(ess_factory: Any) -> AsyncIterator[System]:
    """No simulated controllers: the test writes JobSet status itself."""
    async with running_system(ess_factory, controllers=False) as started:
        yield started


async def create(system: System, work_unit: WorkUnit | None = None, *, priority: int = 0) -> str:
    experiment: Experiment = await system.ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(priority=priority)),  # type: ignore[arg-type]
        metadata=ALICE,
    )
    operation = await system.ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(
            parent=experiment.name, work_unit=work_unit or minimal_work_unit()
        ),
        metadata=ALICE,
    )
    return str(operation.name).split("/operations/")[0]


def running_forever(cpu_millicores: int = 1000) -> WorkUnit:
    return forever_work_unit(cpu_millicores)


async def gone(system: System, name: str) -> None:
    async def absent() -> bool:
        return system.jobset(name) is None

    await eventually(absent, True, within=30)


async def test_a_work_unit_runs_to_completed(skewed_system: System) -> None:
    system = skewed_system
    name = await create(system)

    await eventually(lambda: system.state(name), S.COMPLETED, within=30)

    states = [state for eid, state in await system.history(name) if eid == 1]
    assert states[0] == S.INITIALIZING
    assert states[-1] == S.COMPLETED
    assert S.RUNNING in states
    assert states.index(S.SCHEDULING) < states.index(S.RUNNING) if S.SCHEDULING in states else True


async def test_stop_goes_through_the_finalizer_and_the_jobset_disappears(
    skewed_system: System,
) -> None:
    system = skewed_system
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)

    await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)

    await eventually(lambda: system.state(name), S.STOPPED, within=30)
    await gone(system, name)
    history = await system.timed_history(name)
    assert [state for _eid, state, _at in history][-2:] == [S.STOPPING, S.STOPPED]
    # The two clocks really met: STOPPING is the ESS's microsecond stamp (no earlier than
    # the RUNNING it replaced, which the cluster stamped), STOPPED the cluster's
    # deletionTimestamp to the second; with the cluster behind, the terminal state is
    # "older" than the stop it ends.
    (_, _, stopping_at), (_, _, stopped_at) = history[-2:]
    if system.sim.clock.offset < timedelta(0):
        assert stopped_at < stopping_at


async def test_stop_right_after_create_lands(skewed_system: System) -> None:
    """Stopped before its JobSet exists (or within the second it was created)."""
    system = skewed_system
    names = [await create(system, running_forever()) for _ in range(3)]
    for name in names:
        await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)

    for name in names:
        await eventually(functools.partial(system.state, name), S.STOPPED, within=30)
        await gone(system, name)


async def test_restart_makes_a_new_jobset_and_the_old_execution_is_fenced(
    skewed_system: System,
) -> None:
    system = skewed_system
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)

    await system.ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=name), metadata=ALICE)

    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    history = await system.history(name)
    assert max(eid for eid, _ in history) == 2
    second = [state for eid, state in history if eid == 2]
    assert second[0] == S.RESTARTING
    assert S.STOPPED not in second, "the old JobSet's terminal write never reached eid 2"
    jobset = system.jobset(name)
    assert jobset is not None
    assert jobset["metadata"]["labels"]["xmc.google.com/execution-id"] == "2"
    executions = await system.ess.api.ListWorkUnitExecutions(
        api_pb2.ListWorkUnitExecutionsRequest(parent=name), metadata=ALICE
    )
    first = executions.work_unit_executions[0]
    assert S(first.status.state) == S.RUNNING, "the old JobSet's finalizer write was fenced off"

    await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
    await eventually(lambda: system.state(name), S.STOPPED, within=30)
    await gone(system, name)


def eviction_signals(system: System, name: str) -> tuple[bool, int]:
    """What a real cluster shows of an evicted JobSet (docs/decisions/0019): whether it is
    suspended with no Job active or ready, and how many of its pods are still Terminating
    (deleted, not yet Succeeded or Failed)."""
    jobset = system.jobset(name) or {}
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    idle = bool((jobset.get("spec") or {}).get("suspend")) and not any(
        s.get("active") or s.get("ready") for s in statuses
    )
    uid = (jobset.get("metadata") or {}).get("uid")
    terminating = sum(
        1
        for pod in system.sim.store.list(POD, "default")
        if (pod["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/jobset-uid") == uid
        and pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )
    return idle, terminating


async def through_descheduling(system: System, name: str, *, then: WorkUnitState) -> None:
    """Wait until an evicted work unit reaches ``then`` after DESCHEDULING, asserting that
    DESCHEDULING held while the JobSet's counts already showed nothing running and only its
    Terminating pods said otherwise (R4 from the pods), and that ``then`` came once they
    were gone."""
    seen = False

    async def probe() -> tuple[bool, WorkUnitState]:
        nonlocal seen
        state = await system.state(name)
        idle, terminating = eviction_signals(system, name)
        if state is S.DESCHEDULING and idle and terminating:
            seen = True
        return seen, state

    await eventually(probe, (True, then), within=30)
    assert eviction_signals(system, name)[1] == 0, f"{then.name} only once the pods are gone"


async def test_preemption_goes_back_to_scheduling_on_the_same_execution(
    skewed_system: System,
) -> None:
    system = skewed_system
    # Its pods take 3 s to go: long enough for DESCHEDULING to be seen under load (the
    # batcher keeps only the latest observation of a work unit).
    evicted = forever_work_unit(cpu_millicores=60_000, grace_seconds=3)
    low = await create(system, evicted, priority=1)
    await eventually(lambda: system.state(low), S.RUNNING, within=30)

    high = await create(system, running_forever(cpu_millicores=10_000), priority=3)
    await through_descheduling(system, low, then=S.SCHEDULING)
    await eventually(lambda: system.state(high), S.RUNNING, within=30)

    states = [state for eid, state in await system.history(low) if eid == 1]
    after_running = states[states.index(S.RUNNING) :]
    assert after_running[:3] == [S.RUNNING, S.DESCHEDULING, S.SCHEDULING], (
        "R4 while the evicted pods terminate, then R9 — on eid 1"
    )

    await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=high), metadata=ALICE)
    await eventually(lambda: system.state(low), S.RUNNING, within=30)
    again = [state for eid, state in await system.history(low) if eid == 1]
    assert again.count(S.RUNNING) >= 2, "re-admitted and running again on the same eid"


async def test_an_image_pull_error_is_reported_after_the_grace(ess_factory: Any) -> None:
    grace = timedelta(seconds=4)
    async with running_system(ess_factory, controllers=True, startup_grace=grace) as system:
        await _image_pull_error_after(system, grace)


async def _image_pull_error_after(system: System, grace: timedelta) -> None:
    work_unit = minimal_work_unit()
    job = work_unit.executable.jobset.jobs[0]
    job.annotations["kubesim.xmc/behavior"] = json.dumps({"image_pull_error": True})
    name = await create(system, work_unit)

    async def message() -> str:
        reply = await system.ess.api.GetWorkUnit(
            api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE
        )
        return str(reply.current_work_unit_execution.status.system_message.user_facing_text)

    xid, wid = name.split("/")[1::2]

    def admitted_for() -> timedelta | None:
        jobset = system.sim.store.find(JOBSET, "default", f"xmc-{xid}-{wid}")
        for condition in ((jobset or {}).get("status") or {}).get("conditions") or []:
            if condition["type"] == "Suspended" and condition["status"] == "False":
                moment = datetime.fromisoformat(
                    condition["lastTransitionTime"].replace("Z", "+00:00")
                )
                return system.sim.clock.now() - moment
        return None

    samples: list[tuple[timedelta, bool]] = []

    async def reported() -> bool:
        elapsed = admitted_for()
        text = await message()
        seen = "ImagePullBackOff" in text or "ErrImagePull" in text
        if elapsed is not None:
            samples.append((elapsed, seen))
        return seen

    await eventually(reported, True, within=30)
    assert any(not seen and elapsed < grace for elapsed, seen in samples), "checked before"
    assert all(elapsed >= grace for elapsed, seen in samples if seen), "never before the grace"
    assert f"xmc-{xid}-{wid}" in await message(), "the message names the pod"


@pytest.mark.parametrize(
    ("jobs", "want"),
    [
        pytest.param([{"crash": True}], S.FAILED, id="R3 a crashing job fails the JobSet"),
        pytest.param(
            [{"run_seconds": 1}, {"run_seconds": 2}],
            S.COMPLETED,
            id="R2 two jobs that both succeed complete it",
        ),
    ],
)
async def test_jobsets_end_in_their_states(
    system: System, jobs: list[dict[str, Any]], want: WorkUnitState
) -> None:
    work_unit = minimal_work_unit()
    template = work_unit.executable.jobset.jobs[0]
    del work_unit.executable.jobset.jobs[:]
    for i, behavior in enumerate(jobs):
        job = work_unit.executable.jobset.jobs.add()
        job.CopyFrom(template)
        job.name = f"job{i}"
        job.annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    name = await create(system, work_unit)

    await eventually(lambda: system.state(name), want, within=30)
    assert (1, want) in await system.history(name)


class SwitchableEss:
    """The real ESS client, with a switch that makes it unreachable (network down), and
    one that makes it refuse every state change (as the time-order bug once did)."""

    def __init__(self, real: EssClient) -> None:
        self.real = real
        self.down = False
        self.refusing = False

    async def update(self, observations: Any, *, writer: str) -> Any:
        if self.down:
            raise EssUnavailable(grpc.StatusCode.UNAVAILABLE, "ESS is down")
        if self.refusing:
            return [
                UpdateResult(
                    work_unit=f"experiments/{o.xid}/workUnits/{o.wid}",
                    execution_id=o.eid,
                    outcome=UpdateResult.UNCHANGED,
                    state=int(S.STOPPING),  # type: ignore[arg-type]
                    state_rejection="stale_time",
                )
                for o in observations
            ]
        return await self.real.update(observations, writer=writer)

    async def work_unit(self, xid: int, wid: int) -> Any:
        if self.down:
            raise EssUnavailable(grpc.StatusCode.UNAVAILABLE, "ESS is down")
        return await self.real.work_unit(xid, wid)


async def test_the_finalizer_waits_for_the_ess(system: System) -> None:
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    switch = SwitchableEss(system.reconciler._ess)
    system.reconciler._ess = switch  # type: ignore[assignment]
    system.reconciler.finalizer.ess = switch  # type: ignore[assignment]
    xid, wid = name.split("/")[1::2]
    jobset_name = f"xmc-{xid}-{wid}"

    switch.down = True
    system.sim.store.delete(JOBSET, "default", jobset_name)
    await eventually(lambda: _finalizer_retries(), True, within=10)
    held = system.sim.store.find(JOBSET, "default", jobset_name)
    assert held is not None, "the finalizer holds the JobSet while the ESS is down"
    assert held["metadata"]["deletionTimestamp"]
    assert await system.state(name) == S.RUNNING

    switch.down = False
    await eventually(lambda: system.state(name), S.STOPPED, within=30)

    async def gone() -> bool:
        return system.sim.store.find(JOBSET, "default", jobset_name) is None

    await eventually(gone, True, within=30)


async def test_a_refused_terminal_write_keeps_the_finalizer(system: System) -> None:
    """The stop bug's second half: the finalizer path ignored a refused STOPPED and
    removed the finalizer, so nothing ever retried. Now it keeps the JobSet, counts the
    refusal, and retries until the write lands."""
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    switch = SwitchableEss(system.reconciler._ess)
    # The batcher reports R1 too: refuse both paths.
    system.reconciler._ess = switch  # type: ignore[assignment]
    system.reconciler.finalizer.ess = switch  # type: ignore[assignment]
    refusals = metrics.TERMINAL_WRITES_REJECTED_TOTAL.labels("stale_time")
    before = refusals._value.get()

    switch.refusing = True
    await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)

    async def refused_twice() -> bool:
        return bool(refusals._value.get() >= before + 2)

    await eventually(refused_twice, True, within=30)
    held = system.jobset(name)
    assert held is not None, "the finalizer holds the JobSet while the write is refused"
    assert held["metadata"]["deletionTimestamp"]
    assert await system.state(name) == S.STOPPING

    switch.refusing = False
    await eventually(lambda: system.state(name), S.STOPPED, within=30)
    await gone(system, name)


async def test_the_finalizer_outlasts_kubernetes_errors(system: System) -> None:
    """A 500 on the finalizer path's read and on its removal patch ends nothing: each pass
    is retried with backoff until the JobSet is finalized."""
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    jobset_name = _jobset_name(name)
    faults = system.sim.faults

    faults.fail("get", "jobsets", code=500, times=2)
    faults.fail("patch", "jobsets", code=500, times=2)
    with capture_logs() as logs:
        system.sim.store.delete(JOBSET, "default", jobset_name)
        await eventually(lambda: system.state(name), S.STOPPED, within=30)
        await gone(system, name)

    assert not faults.pending, "every injected fault was served"
    retried = [
        e for e in logs if e["event"] == "finalizer path: Kubernetes call failed; will retry"
    ]
    assert [e["failure"] for e in retried] == ["server"] * 4


async def test_the_finalizer_outlasts_a_hanging_api_and_a_bug(system: System) -> None:
    """A removal patch that never answers fails within the request timeout (NO_RESPONSE),
    and an unexpected exception is logged with its traceback: both are retried, and the
    JobSet is finalized."""
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    finalizer = system.reconciler.finalizer
    real = finalizer.kube
    flaky = await BuggyReads.for_url(system.sim.url, request_timeout=0.5)
    flaky.bugs = 1
    finalizer.kube = flaky
    system.sim.faults.delay("patch", "jobsets", seconds=5, times=1)
    try:
        with capture_logs() as logs:
            system.sim.store.delete(JOBSET, "default", _jobset_name(name))
            await eventually(lambda: system.state(name), S.STOPPED, within=30)
            await gone(system, name)
    finally:
        finalizer.kube = real
        await flaky.close()

    assert flaky.bugs == 0
    events = [(e["event"], e.get("failure"), e.get("exc_info")) for e in logs]
    assert ("finalizer path failed unexpectedly; will retry", None, True) in events
    assert ("finalizer path: Kubernetes call failed; will retry", "no_response", None) in events


def _jobset_name(name: str) -> str:
    xid, wid = name.split("/")[1::2]
    return f"xmc-{xid}-{wid}"


_RETRIES_AT_START = metrics.FINALIZER_RETRIES_TOTAL._value.get()


async def _finalizer_retries() -> bool:
    return bool(metrics.FINALIZER_RETRIES_TOTAL._value.get() > _RETRIES_AT_START)


async def test_preempted_work_units_show_why_they_wait(versioned_system: System) -> None:
    system = versioned_system
    low = await create(system, running_forever(cpu_millicores=60_000), priority=1)
    await eventually(lambda: system.state(low), S.RUNNING, within=30)
    await create(system, running_forever(cpu_millicores=10_000), priority=3)
    await eventually(lambda: system.state(low), S.SCHEDULING, within=30)

    async def waiting_message() -> bool:
        reply = await system.ess.api.GetWorkUnit(
            api_pb2.GetWorkUnitRequest(name=low), metadata=ALICE
        )
        info = reply.current_work_unit_execution.status.scheduling_information
        return bool(info.user_facing_text) and info.auxiliary_info.queue_info.position_in_queue >= 1

    await eventually(waiting_message, True, within=30)
    workload = next(
        w
        for w in system.sim.store.list(WORKLOAD, "default")
        if w["metadata"]["ownerReferences"][0]["name"] == _jobset_name(low)
    )
    reserved = next(c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")
    waiting = {"0.19": {"Pending"}, "0.20": {"PendingEvaluation", "WaitingForQuota"}}
    assert reserved["reason"] in waiting[system.kueue_version]


async def test_an_unreadable_visibility_api_is_one_warning_per_queue(system: System) -> None:
    """Kueue's visibility API not served (404): the waiting units show Kueue's reason with
    no position, and the Reconciler warns once for the queue, not once per event; once it
    answers, positions come back, also to the units whose Workloads had no event since
    (the periodic look, ``reconciler.queue_positions``)."""

    async def shown(name: str) -> tuple[bool, int]:
        reply = await system.ess.api.GetWorkUnit(
            api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE
        )
        info = reply.current_work_unit_execution.status.scheduling_information
        return bool(info.user_facing_text), info.auxiliary_info.queue_info.position_in_queue

    system.sim.faults.fail("get", "localqueues/pendingworkloads", code=404, times=None)
    with capture_logs() as logs:
        waiting = [await create(system, running_forever(100_000)) for _ in range(3)]
        for name in waiting:
            await eventually(functools.partial(shown, name), (True, 0), within=30)
        system.sim.faults.clear()
        served = await create(system, running_forever(100_000))
        await eventually(functools.partial(shown, served), (True, 4), within=30)
        for position, name in enumerate(waiting, start=1):
            await eventually(functools.partial(shown, name), (True, position), within=30)
    # Only the positions' warnings are this test's subject: under load the process it
    # shares with the stack may warn of other things (a KeyError on their missing "queue"
    # failed CI twice and hid what they were).
    warned = [e for e in logs if e["log_level"] == "warning"]
    about_positions = [e for e in warned if e["event"].startswith("queue positions")]
    assert [(e["event"].split(":")[0], e.get("queue")) for e in about_positions] == [
        ("queue positions unavailable", "cpu-queue")
    ], warned


async def test_the_standby_takes_over_when_the_leader_dies(system: System) -> None:
    await system.reconciler.stop()  # replaced by two replicas with a short Lease
    lease = LeaseSettings(lease_seconds=1, renew_seconds=0.2, retry_seconds=0.1,
                          renew_deadline_seconds=0.6)  # fmt: skip
    replicas = []
    for identity in ("r-a", "r-b"):
        replica = Reconciler(
            system.reconciler._kube,
            system.reconciler._ess,
            identity=identity,
            clock=utc_now,
            options=dataclasses.replace(system.reconciler.options, lease=lease),
        )
        await replica.start()
        replicas.append(replica)

    async def one_leader() -> bool:
        return sum(r.leading for r in replicas) == 1

    await eventually(one_leader, True, within=10)
    leader = next(r for r in replicas if r.leading)
    standby = next(r for r in replicas if not r.leading)
    name = await create(system, running_forever())
    await eventually(lambda: system.state(name), S.RUNNING, within=30)

    await leader.abort()  # killed: no flush, no release
    await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)

    await eventually(lambda: system.state(name), S.STOPPED, within=30)
    assert standby.leading
    await standby.stop()


async def test_a_preempted_jobset_with_a_finished_job_stays_running(
    versioned_system: System,
) -> None:
    """R8b: once some jobs succeeded, an eviction keeps the work unit RUNNING."""
    system = versioned_system
    work_unit = forever_work_unit(cpu_millicores=30_000, grace_seconds=3)  # R4 lasts 3 s
    template = work_unit.executable.jobset.jobs[0]
    quick = work_unit.executable.jobset.jobs.add()
    quick.CopyFrom(template)
    quick.name = "quick"
    quick.annotations["kubesim.xmc/behavior"] = json.dumps({"run_seconds": 1})
    quick.spec.resources.cpu_resources.cpu_millicores = 30_000
    low = await create(system, work_unit, priority=1)
    xid, wid = low.split("/")[1::2]

    def quick_succeeded() -> bool:
        jobset = system.sim.store.find(JOBSET, "default", f"xmc-{xid}-{wid}") or {}
        statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
        return any(s["name"] == "quick" and s.get("succeeded") for s in statuses)

    async def quick_done() -> bool:
        return quick_succeeded()

    await eventually(quick_done, True, within=30)
    high = await create(system, running_forever(cpu_millicores=10_000), priority=3)
    await through_descheduling(system, low, then=S.RUNNING)
    await eventually(lambda: system.state(high), S.RUNNING, within=30)
    states = [state for eid, state in await system.history(low) if eid == 1]
    evicted = states[states.index(S.DESCHEDULING) :]
    assert evicted == [S.DESCHEDULING, S.RUNNING], "R4 while draining, then R8b: RUNNING"


def _condition(type_: str, status: str = "True") -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": type_}


def _jobs(**counts: int) -> list[dict[str, Any]]:
    return [{"name": "main", "ready": 0, "active": 0, "succeeded": 0, "failed": 0, **counts}]


RULES = [
    pytest.param(
        False,
        {"conditions": [_condition("Completed")]},
        False,
        S.COMPLETED,
        id="R1 deleted and completed",
    ),
    pytest.param(
        False, {"conditions": [_condition("Failed")]}, False, S.FAILED, id="R1 deleted and failed"
    ),
    pytest.param(False, {}, False, S.STOPPED, id="R1 deleted otherwise: stopped"),
    pytest.param(
        False, {"conditions": [_condition("Completed")]}, None, S.COMPLETED, id="R2 completed"
    ),
    pytest.param(False, {"conditions": [_condition("Failed")]}, None, S.FAILED, id="R3 failed"),
    pytest.param(
        True,
        {"replicatedJobsStatus": _jobs(active=1, ready=1)},
        None,
        S.DESCHEDULING,
        id="R4 suspended with active jobs",
    ),
    pytest.param(
        False,
        {"replicatedJobsStatus": _jobs(failed=1, active=1)},
        None,
        S.PARTIALLY_FAILED,
        id="R5 a failed job while another runs",
    ),
    pytest.param(
        False,
        {"replicatedJobsStatus": _jobs(ready=1, active=1)},
        None,
        S.RUNNING,
        id="R6 all ready",
    ),
    pytest.param(
        False,
        {"replicatedJobsStatus": _jobs(active=1)},
        None,
        S.STARTING,
        id="R7 active, not ready",
    ),
    pytest.param(
        True,
        {"replicatedJobsStatus": _jobs(failed=1)},
        None,
        S.PARTIALLY_FAILED,
        id="R8a failed jobs, nothing running",
    ),
    pytest.param(
        True,
        {"replicatedJobsStatus": _jobs(succeeded=1)},
        None,
        S.RUNNING,
        id="R8b succeeded jobs, nothing running",
    ),
    pytest.param(True, {}, None, S.SCHEDULING, id="R9 otherwise: scheduling"),
]


@pytest.mark.parametrize(("suspend", "status", "delete", "want"), RULES)
async def test_each_mapping_rule_ends_in_its_stored_state(
    quiet_system: System,
    suspend: bool,
    status: dict[str, Any],
    delete: bool | None,
    want: WorkUnitState,
) -> None:
    """Every rule of SPEC §8.1, observed on a real JobSet in kubesim by the Reconciler and
    stored by the ESS (R1 through the finalizer path)."""
    system = quiet_system
    name = await create(system)
    xid, wid = name.split("/")[1::2]
    jobset_name = f"xmc-{xid}-{wid}"

    async def created() -> bool:
        return system.sim.store.find(JOBSET, "default", jobset_name) is not None

    await eventually(created, True, within=30)

    def mutate_spec(obj: dict[str, Any]) -> None:
        obj["spec"]["suspend"] = suspend

    def mutate_status(obj: dict[str, Any]) -> None:
        # Condition times come from the cluster's clock, like every other timestamp there.
        now = system.sim.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [{**c, "lastTransitionTime": now} for c in status.get("conditions", [])]
        obj["status"] = {**status, "conditions": conditions}

    system.sim.store.update(JOBSET, "default", jobset_name, mutate_spec)
    system.sim.store.update(JOBSET, "default", jobset_name, mutate_status, subresource="status")
    if delete is not None:
        system.sim.store.delete(JOBSET, "default", jobset_name)

    await eventually(lambda: system.state(name), want, within=30)
    assert (await system.history(name))[-1] == (1, want)


async def test_rapid_changes_of_one_jobset_coalesce_and_the_last_wins(
    quiet_system: System,
) -> None:
    system = quiet_system
    name = await create(system)
    xid, wid = name.split("/")[1::2]
    jobset_name = f"xmc-{xid}-{wid}"

    async def created() -> bool:
        return system.sim.store.find(JOBSET, "default", jobset_name) is not None

    await eventually(created, True, within=30)
    await eventually(lambda: system.state(name), S.SCHEDULING, within=30)
    writes_before = metrics.WRITES_TOTAL.labels("jobset")._value.get()

    system.sim.store.update(
        JOBSET, "default", jobset_name, lambda obj: obj["spec"].update(suspend=False)
    )
    for restarts in range(100):  # 100 status changes in one go, the last one RUNNING
        ready = 1 if restarts == 99 else 0

        def mutate(obj: dict[str, Any], restarts: int = restarts, ready: int = ready) -> None:
            obj["status"] = {
                "restarts": restarts,
                "replicatedJobsStatus": _jobs(active=1, ready=ready),
            }

        system.sim.store.update(JOBSET, "default", jobset_name, mutate, subresource="status")

    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    work_unit = await system.ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE
    )
    detailed = work_unit.current_work_unit_execution.status.detailed_status.jobset_status
    assert detailed.restarts == 99, "the latest observation wins"
    writes = metrics.WRITES_TOTAL.labels("jobset")._value.get() - writes_before
    assert writes <= 10, f"101 observations became {writes} writes"


async def test_a_jobset_seen_before_its_conditions_advances_with_the_cluster_behind(
    ess_factory: Any,
) -> None:
    """The first sighting of a JobSet has no conditions: its time must be the cluster's
    (creationTimestamp), not the Reconciler's clock, or the admission the cluster stamps
    5 s "earlier" is refused as stale and the unit stays SCHEDULING."""
    offset = timedelta(seconds=-5)
    async with running_system(ess_factory, controllers=False, clock_offset=offset) as system:
        name = await create(system)
        await eventually(lambda: system.state(name), S.SCHEDULING, within=30)
        xid, wid = name.split("/")[1::2]

        def admit(obj: dict[str, Any]) -> None:
            obj["spec"]["suspend"] = False

        def admitted(obj: dict[str, Any]) -> None:
            now = system.sim.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
            obj["status"] = {
                "conditions": [_condition("Suspended", "False") | {"lastTransitionTime": now}],
                "replicatedJobsStatus": _jobs(active=1),
            }

        system.sim.store.update(JOBSET, "default", f"xmc-{xid}-{wid}", admit)
        system.sim.store.update(
            JOBSET, "default", f"xmc-{xid}-{wid}", admitted, subresource="status"
        )

        await eventually(lambda: system.state(name), S.STARTING, within=30)


async def test_a_500_during_an_orphan_sweep_does_not_stop_the_next_sweep(ess_factory: Any) -> None:
    async with running_system(ess_factory, controllers=True, orphan_interval=0.2) as system:
        labels = {MANAGED_BY: MANAGED_BY_VALUE, EXPERIMENT_ID: "999", WORK_UNIT_ID: "1",
                  EXECUTION_ID: "1"}  # fmt: skip
        faults = system.sim.faults
        faults.fail("delete", "jobsets", code=500, times=2)
        async with await KubeClient.for_url(system.sim.url) as kube:
            await kube.create(JOBSETS, "default", jobset("xmc-999-1", labels=labels))

            async def present() -> bool:
                return system.sim.store.find(JOBSET, "default", "xmc-999-1") is not None

            # No such work unit: an orphan, deleted after two sweeps that got a 500.
            await eventually(present, False, within=30)
        assert not faults.pending, "both injected 500s were served"
