"""The Kueue simulator's upstream behaviours XMC depends on, observed through the real
kubernetes-asyncio client over HTTP: two-phase eviction, the priority-class label
followed after admission, a missing WorkloadPriorityClass, the queue-name label's
immutability, no preemption without ``spec.preemption``, and the waiting reasons of both
simulated Kueue versions (kueue v0.19.2 and main)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiException
from kubernetes_asyncio.watch import Watch

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

from tests.kubesim.controller_support import (
    cluster_queue,
    condition_is,
    conditions,
    local_queue,
    make_jobset,
    replicated_job,
)
from tests.kubesim.support import MERGE_PATCH, MakeKubeSim, client_for, failure
from tests.kubesim.test_api_scenarios import KUEUE, Cluster
from tests.waiting import eventually

Obj = dict[str, Any]
LOW = "xmc-priority-low-low"
HIGH = "xmc-priority-high-high"
FOREVER = {"run_seconds": None}
VERSIONS = [pytest.param("0.19", id="kueue-0.19"), pytest.param("0.20", id="kueue-0.20")]
#: QuotaReserved=False reasons per version: v0.19's fallbacks, then the granular ones.
REASONS = {
    "0.19": {
        "misconfigured": "Inadmissible",
        "exceeds": "Pending",
        "quota": "Pending",
        "preempted": "Pending",
        "released": "Pending",
    },
    "0.20": {
        "misconfigured": "Misconfigured",
        "exceeds": "ExceedsMaxQuota",
        "quota": "WaitingForQuota",
        "preempted": "WaitingForPreemptedWorkloads",
        "released": "PendingEvaluation",
    },
}


@pytest.fixture(params=VERSIONS)
async def versioned(make_kubesim: MakeKubeSim, request: pytest.FixtureRequest) -> Any:
    sim = await make_kubesim(controllers=True, time_scale=100.0, kueue_version=request.param)
    async with client_for(sim) as api:
        yield Cluster(api, sim.url), request.param


@pytest.fixture
async def cluster(make_kubesim: MakeKubeSim) -> AsyncIterator[Cluster]:
    sim = await make_kubesim(controllers=True, time_scale=100.0)
    async with client_for(sim) as api:
        yield Cluster(api, sim.url)


async def add_queue(cluster: Cluster, name: str, *, cpu: str, preemption: str | None) -> None:
    kind = {"apiVersion": "kueue.x-k8s.io/v1beta2"}
    await cluster.custom.create_cluster_custom_object(
        *KUEUE,
        "clusterqueues",
        {**kind, "kind": "ClusterQueue", **cluster_queue(name, cpu=cpu, preemption=preemption)},
    )
    await cluster.custom.create_namespaced_custom_object(
        *KUEUE, "default", "localqueues", {**kind, "kind": "LocalQueue", **local_queue(name, name)}
    )


def slow_to_stop(rjob: Obj, grace_seconds: int = 120) -> Obj:
    """A replicated job whose pods stay Terminating ``grace_seconds`` (simulated)."""
    rjob["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace_seconds
    return rjob


async def patch_labels(cluster: Cluster, name: str, labels: dict[str, str | None]) -> None:
    await cluster.custom.patch_namespaced_custom_object(
        "jobset.x-k8s.io",
        "v1alpha2",
        "default",
        "jobsets",
        name,
        {"metadata": {"labels": labels}},
        **MERGE_PATCH,
    )


def reserved(workload: Obj | None) -> dict[str, str]:
    return dict(conditions(workload).get("QuotaReserved") or {})


@asynccontextmanager
async def recording(
    cluster: Cluster, group: str, version: str, plural: str
) -> AsyncIterator[list[Obj]]:
    """Every object a watch of ``plural`` (namespace default) delivers from now on, in order:
    a snapshot can miss a state that lasts a moment, the event stream cannot."""
    listed = await cluster.custom.list_namespaced_custom_object(group, version, "default", plural)
    seen: list[Obj] = []

    async def follow() -> None:
        async with Watch() as watch:
            async for event in watch.stream(
                cluster.custom.list_namespaced_custom_object,
                group,
                version,
                "default",
                plural,
                resource_version=listed["metadata"]["resourceVersion"],
            ):
                seen.append(event["raw_object"])

    task = asyncio.create_task(follow())
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _owned_by(obj: Obj, jobset: str) -> bool:
    return any(ref["name"] == jobset for ref in obj["metadata"].get("ownerReferences") or [])


def _rv(obj: Obj) -> int:
    return int(obj["metadata"]["resourceVersion"])


async def test_eviction_is_two_phase_and_the_preemptor_waits_for_the_victim_to_stop(
    versioned: tuple[Cluster, str],
) -> None:
    """Kueue releases the victim's quota only once its JobSet reports no active Job
    (``IsActive``); a Job's Terminating pods are not active, so that is as soon as the
    victim's pods are all Terminating, not when they are gone."""
    cluster, version = versioned
    await add_queue(cluster, "two", cpu="2", preemption="LowerPriority")
    victim = replicated_job(cpu="2", behavior=FOREVER)
    await cluster.create_jobset(
        make_jobset("low", slow_to_stop(victim), queue="two", priority_class=LOW)
    )
    await eventually(lambda: _running(cluster, "low"), what="low to run")
    async with (
        recording(cluster, *KUEUE, "workloads") as workloads,
        recording(cluster, "jobset.x-k8s.io", "v1alpha2", "jobsets") as jobsets,
    ):
        await cluster.create_jobset(
            make_jobset(
                "high", replicated_job(cpu="2", behavior=FOREVER), queue="two", priority_class=HIGH
            )
        )
        high = await eventually(
            lambda: _admitted(cluster, "high"), what="high to be admitted after the victim stopped"
        )

        def admitted_seen() -> list[Obj]:
            return [w for w in workloads if _owned_by(w, "high") and condition_is(w, "Admitted")]

        async def recorded() -> bool:
            return bool(admitted_seen())

        await eventually(recorded, what="the watch to deliver the admission")
    pods = await cluster.pods("low")
    assert pods, "Kueue does not wait for the victim's Terminating pods to be gone"
    assert all(pod.metadata.deletion_timestamp is not None for pod in pods)
    assert high["status"]["admission"]["clusterQueue"] == "two"

    # Phase one: Evicted and Preempted, the quota still held; the preemptor waits.
    low_states = [w for w in workloads if _owned_by(w, "low")]
    evicted = next(w for w in low_states if condition_is(w, "Evicted"))
    assert conditions(evicted)["Evicted"]["reason"] == "Preempted"
    assert conditions(evicted)["Preempted"]["reason"] == "InClusterQueue"
    assert condition_is(evicted, "QuotaReserved")
    assert evicted["status"]["admission"]["clusterQueue"] == "two"
    waiting = next(
        reserved(w)
        for w in workloads
        if _owned_by(w, "high") and reserved(w).get("status") == "False"
    )
    assert (waiting["status"], waiting["reason"]) == ("False", REASONS[version]["preempted"])
    assert waiting["message"] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default-flavor, 2 more needed. Pending the preemption of 1 workload(s)"
    )

    # Phase two, in this order: the victim's JobSet reports no active Job, its quota goes
    # back, the preemptor is admitted.
    stopped = next(
        j
        for j in jobsets
        if j["metadata"]["name"] == "low"
        and j["spec"].get("suspend")
        and all(s["active"] == 0 for s in j["status"]["replicatedJobsStatus"])
    )
    released = next(
        w for w in low_states if reserved(w).get("status") == "False" and _rv(w) > _rv(evicted)
    )
    assert _rv(evicted) < _rv(stopped) < _rv(released) < _rv(admitted_seen()[0])
    released_conditions = conditions(await cluster.workload_of("low"))
    assert released_conditions["QuotaReserved"]["status"] == "False"
    assert released_conditions["Admitted"]["status"] == "False"
    assert released_conditions["Requeued"]["status"] == "True"
    assert released_conditions["Requeued"]["reason"] == "Preempted"
    assert released_conditions["Evicted"]["status"] == "True"
    assert released_conditions["QuotaReserved"]["reason"] in {
        REASONS[version]["released"],
        REASONS[version]["quota"],  # the next scheduling cycle's verdict
    }
    assert "admission" not in released["status"]


async def test_a_cluster_queue_without_preemption_never_preempts(cluster: Cluster) -> None:
    await add_queue(cluster, "plain", cpu="2", preemption=None)
    forever = replicated_job(cpu="2", behavior=FOREVER)
    await cluster.create_jobset(make_jobset("low", forever, queue="plain", priority_class=LOW))
    await eventually(lambda: _admitted(cluster, "low"), what="low to be admitted")
    await cluster.create_jobset(
        make_jobset("high", replicated_job(cpu="2"), queue="plain", priority_class=HIGH)
    )

    async def high_waits() -> dict[str, str]:
        found = reserved(await cluster.workload_of("high"))
        return found if found.get("status") == "False" else {}

    waiting = await eventually(high_waits, what="high to wait")
    assert waiting["reason"] == "Pending"
    assert "Pending the preemption" not in waiting["message"]
    low = await cluster.workload_of("low")
    assert condition_is(low, "Admitted")
    assert "Evicted" not in conditions(low)


async def test_changing_the_priority_class_of_an_admitted_jobset_updates_its_workload(
    cluster: Cluster,
) -> None:
    await cluster.create_jobset(
        make_jobset("job", replicated_job(behavior=FOREVER), priority_class=LOW)
    )
    await eventually(lambda: _admitted(cluster, "job"), what="the JobSet to be admitted")

    await patch_labels(cluster, "job", {"kueue.x-k8s.io/priority-class": HIGH})

    async def raised() -> Obj | None:
        workload = await cluster.workload_of("job")
        return workload if (workload or {})["spec"].get("priority") == 900 else None

    workload = await eventually(raised, what="the Workload's priority to follow the label")
    assert workload["spec"]["priorityClassName"] == HIGH
    assert workload["spec"]["priorityClassRef"]["name"] == HIGH
    assert condition_is(workload, "Admitted"), "a priority change does not evict"


async def test_an_admitted_workload_keeps_its_class_when_the_label_goes(cluster: Cluster) -> None:
    """Kueue's CEL rule (``priorityClassRef`` cannot be removed while quota is reserved):
    upstream's update is refused, so the Workload keeps its class and priority."""
    await cluster.create_jobset(
        make_jobset("job", replicated_job(behavior=FOREVER), priority_class=LOW)
    )
    await eventually(lambda: _admitted(cluster, "job"), what="the JobSet to be admitted")
    before = await cluster.workload_of("job")
    assert before is not None
    await patch_labels(cluster, "job", {"kueue.x-k8s.io/priority-class": None})
    await patch_labels(cluster, "job", {"xmc.test/touched": "1"})  # another reconcile

    async def seen() -> Obj | None:
        jobset = await cluster.jobset("job")
        touched = (jobset["metadata"].get("labels") or {}).get("xmc.test/touched")
        return await cluster.workload_of("job") if touched else None

    workload: Obj = await eventually(seen, what="the JobSet's next reconcile")
    assert workload["spec"]["priorityClassRef"] == before["spec"]["priorityClassRef"]
    assert workload["spec"]["priority"] == before["spec"]["priority"]


async def test_a_missing_workload_priority_class_creates_no_workload(cluster: Cluster) -> None:
    await cluster.create_jobset(make_jobset("orphan", priority_class="no-such"))

    async def warned() -> list[Any]:
        events = await cluster.core.list_namespaced_event("default")
        return [
            e
            for e in events.items
            if e.involved_object.name == "orphan" and e.reason == "WorkloadPriorityClassNotFound"
        ]

    (event,) = await eventually(warned, what="the WorkloadPriorityClassNotFound event")
    assert event.type == "Warning"
    assert event.message == 'WorkloadPriorityClass "no-such" not found'
    assert await cluster.workload_of("orphan") is None
    assert (await cluster.jobset("orphan"))["spec"]["suspend"] is True
    assert await cluster.pods("orphan") == []

    await cluster.custom.create_cluster_custom_object(
        *KUEUE,
        "workloadpriorityclasses",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": "no-such"},
            "value": 42,
        },
    )
    workload = await eventually(
        lambda: _admitted(cluster, "orphan"), what="a Workload once the class exists"
    )
    assert workload["spec"]["priority"] == 42


async def test_the_queue_name_cannot_change_on_a_running_jobset(cluster: Cluster) -> None:
    await cluster.create_jobset(make_jobset("job", replicated_job(behavior=FOREVER)))
    await eventually(lambda: _admitted(cluster, "job"), what="the JobSet to be admitted")
    await eventually(lambda: _unsuspended(cluster, "job"), what="the JobSet to run")

    with pytest.raises(ApiException) as raised:
        await patch_labels(cluster, "job", {"kueue.x-k8s.io/queue-name": "gpu-queue"})
    assert failure(raised.value) == (422, "Invalid")
    assert "metadata.labels[kueue.x-k8s.io/queue-name]" in str(raised.value.body)
    assert "field is immutable" in str(raised.value.body)
    jobset = await cluster.jobset("job")
    assert jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "cpu-queue"

    await cluster.create_jobset(make_jobset("queued", queue="nowhere"))
    await patch_labels(cluster, "queued", {"kueue.x-k8s.io/queue-name": "gpu-queue"})

    async def requeued() -> Obj | None:
        workload = await cluster.workload_of("queued")
        return workload if (workload or {})["spec"]["queueName"] == "gpu-queue" else None

    await eventually(requeued, what="a suspended JobSet's queue change to reach its Workload")


async def test_waiting_reasons_and_messages_follow_the_kueue_version(
    versioned: tuple[Cluster, str],
) -> None:
    cluster, version = versioned
    await add_queue(cluster, "small", cpu="2", preemption=None)
    await cluster.create_jobset(make_jobset("lost", queue="nope"))
    await cluster.create_jobset(make_jobset("big", replicated_job(cpu="6"), queue="small"))
    await cluster.create_jobset(
        make_jobset("first", replicated_job(cpu="2", behavior=FOREVER), queue="small")
    )
    await eventually(lambda: _admitted(cluster, "first"), what="first to be admitted")
    await cluster.create_jobset(make_jobset("second", replicated_job(cpu="1"), queue="small"))

    async def waiting(name: str) -> dict[str, str]:
        found = reserved(await cluster.workload_of(name))
        return found if found.get("status") == "False" else {}

    expected = REASONS[version]
    lost = await eventually(lambda: waiting("lost"), what="lost to wait")
    assert (lost["reason"], lost["message"]) == (
        expected["misconfigured"],
        "LocalQueue nope doesn't exist",
    )
    big = await eventually(lambda: waiting("big"), what="big to wait")
    assert (big["reason"], big["message"]) == (
        expected["exceeds"],
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
        "default-flavor, previously considered podsets requests (0) + current podset request "
        "(6) > maximum capacity (2)",
    )
    second = await eventually(lambda: waiting("second"), what="second to wait")
    assert (second["reason"], second["message"]) == (
        expected["quota"],
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
        "default-flavor, 1 more needed",
    )


async def _admitted(cluster: Cluster, jobset: str) -> Obj | None:
    workload = await cluster.workload_of(jobset)
    return workload if condition_is(workload, "Admitted") else None


async def _running(cluster: Cluster, jobset: str) -> bool:
    pods = await cluster.pods(jobset)
    return bool(pods) and all(pod.status.phase == "Running" for pod in pods)


async def _suspended(cluster: Cluster, jobset: str) -> bool:
    return bool((await cluster.jobset(jobset))["spec"].get("suspend"))


async def _unsuspended(cluster: Cluster, jobset: str) -> bool:
    return not (await cluster.jobset(jobset))["spec"].get("suspend")


async def test_a_jobset_naming_a_queue_is_created_suspended(cluster: Cluster) -> None:
    """Kueue's mutating webhook suspends it on create, so no pod can start before
    admission; a JobSet without a queue is left alone (``manageJobsWithoutQueueName``
    off)."""
    G, V = "jobset.x-k8s.io", "v1alpha2"
    queued = {"apiVersion": f"{G}/{V}", "kind": "JobSet", **make_jobset("q", suspend=False)}
    created = await cluster.custom.create_namespaced_custom_object(
        G, V, "default", "jobsets", queued
    )
    assert created["spec"]["suspend"] is True
    free = {
        "apiVersion": f"{G}/{V}",
        "kind": "JobSet",
        **make_jobset("free", queue=None, suspend=False),
    }
    created = await cluster.custom.create_namespaced_custom_object(G, V, "default", "jobsets", free)
    assert created["spec"]["suspend"] is False
