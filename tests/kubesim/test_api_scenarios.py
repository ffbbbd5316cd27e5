"""Each simulated controller behaviour, observed the way XMC observes it: through the real
kubernetes-asyncio client over HTTP (admission, inadmissible and pending messages, queue
positions, preemption with requeue, success and failure policies, image-pull errors)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, CoreV1Api, CustomObjectsApi

from tests.waiting import eventually

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

from tests.kubesim.controller_support import (
    cluster_queue,
    condition_is,
    conditions,
    local_queue,
    make_jobset,
    replicated_job,
)
from tests.kubesim.support import JOBSET_API, MakeKubeSim, client_for

G, V = JOBSET_API
KUEUE = ("kueue.x-k8s.io", "v1beta2")
Obj = dict[str, Any]


class Cluster:
    """Typed helpers over one kubesim with its controllers on."""

    def __init__(self, api: ApiClient, url: str) -> None:
        self.custom = CustomObjectsApi(api)
        self.core = CoreV1Api(api)
        self.url = url

    async def create_jobset(self, manifest: Obj) -> None:
        body = {"apiVersion": f"{G}/{V}", "kind": "JobSet", **manifest}
        await self.custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)

    async def jobset(self, name: str) -> Obj:
        found: Obj = await self.custom.get_namespaced_custom_object(
            G, V, "default", "jobsets", name
        )
        return found

    async def workload_of(self, jobset: str) -> Obj | None:
        listed = await self.custom.list_namespaced_custom_object(*KUEUE, "default", "workloads")
        for item in listed["items"]:
            owners = item["metadata"].get("ownerReferences") or []
            if any(ref["name"] == jobset for ref in owners):
                return dict(item)
        return None

    async def add_queue(self, name: str, *, cpu: str) -> None:
        kind = {"apiVersion": "kueue.x-k8s.io/v1beta2"}
        await self.custom.create_cluster_custom_object(
            *KUEUE,
            "clusterqueues",
            {**kind, "kind": "ClusterQueue", **cluster_queue(name, cpu=cpu)},
        )
        await self.custom.create_namespaced_custom_object(
            *KUEUE,
            "default",
            "localqueues",
            {**kind, "kind": "LocalQueue", **local_queue(name, name)},
        )

    async def pending(self, cluster_queue_name: str) -> list[Obj]:
        path = (
            f"{self.url}/apis/visibility.kueue.x-k8s.io/v1beta1/clusterqueues/"
            f"{cluster_queue_name}/pendingworkloads"
        )
        async with aiohttp.ClientSession() as session, session.get(path) as response:
            assert response.status == 200
            body = await response.json()
        return list(body["items"])

    async def pods(self, jobset: str) -> list[Any]:
        listed = await self.core.list_namespaced_pod(
            "default", label_selector=f"jobset.sigs.k8s.io/jobset-name={jobset}"
        )
        return list(listed.items)


async def started(make_kubesim: MakeKubeSim) -> tuple[Cluster, ApiClient]:
    sim = await make_kubesim(controllers=True, time_scale=100.0)
    api = client_for(sim)
    return Cluster(api, sim.url), api


@pytest.fixture
async def cluster(make_kubesim: MakeKubeSim) -> Any:
    made, api = await started(make_kubesim)
    async with api:
        yield made


async def test_admission_unsuspends_and_the_jobset_completes(cluster: Cluster) -> None:
    await cluster.create_jobset(make_jobset("ok"))
    workload = await eventually(
        lambda: _admitted_workload(cluster, "ok"), what="the workload to be admitted"
    )
    assignment = workload["status"]["admission"]["podSetAssignments"][0]
    assert assignment["flavors"]["cpu"] == "default-flavor"
    await eventually(lambda: _condition(cluster, "ok", "Completed"), what="the JobSet to complete")
    jobset = await cluster.jobset("ok")
    assert jobset["spec"]["suspend"] is False
    assert condition_is(jobset, "Suspended", "False")
    assert conditions(jobset)["Suspended"]["reason"] == "ResumeJobs"


async def test_a_missing_queue_is_inadmissible_with_a_message(cluster: Cluster) -> None:
    await cluster.create_jobset(make_jobset("lost", queue="no-such-queue"))

    async def inadmissible() -> Mapping[str, Any] | None:
        workload = await cluster.workload_of("lost")
        reserved = conditions(workload).get("QuotaReserved")
        return reserved if reserved and reserved["reason"] == "Inadmissible" else None

    reserved = await eventually(inadmissible, what="an Inadmissible workload")
    assert reserved["status"] == "False"
    assert "no-such-queue" in reserved["message"]
    assert (await cluster.jobset("lost"))["spec"]["suspend"] is True


async def test_pending_workloads_get_a_quota_message_and_queue_positions(
    cluster: Cluster,
) -> None:
    await cluster.add_queue("small", cpu="1")
    forever = replicated_job(behavior={"run_seconds": None})
    await cluster.create_jobset(make_jobset("first", forever, queue="small"))
    await eventually(lambda: _admitted_workload(cluster, "first"), what="the first admission")
    for name in ("second", "third"):
        await cluster.create_jobset(make_jobset(name, forever, queue="small"))

    async def both_pending() -> list[Obj]:
        items = await cluster.pending("small")
        return items if len(items) == 2 else []

    items = await eventually(both_pending, what="two pending workloads")
    positions = {
        item["metadata"]["ownerReferences"][0]["name"]: item["positionInClusterQueue"]
        for item in items
    }
    assert positions == {"second": 0, "third": 1}
    second = await cluster.workload_of("second")
    reserved = conditions(second)["QuotaReserved"]
    assert (reserved["status"], reserved["reason"]) == ("False", "Pending")
    assert "insufficient unused quota for cpu" in reserved["message"]


async def test_preemption_suspends_the_lower_priority_jobset_and_requeues_it(
    cluster: Cluster,
) -> None:
    await cluster.add_queue("one-cpu", cpu="1")
    low = make_jobset(
        "low",
        replicated_job(behavior={"run_seconds": 50}),
        queue="one-cpu",
        priority_class="xmc-priority-low-low",
    )
    await cluster.create_jobset(low)
    await eventually(lambda: _running_pods(cluster, "low"), what="the low-priority pods to run")

    # high outlasts low's 30 s termination grace, so low is pod-less before it is re-admitted
    high = make_jobset(
        "high",
        replicated_job(behavior={"run_seconds": 60}),
        queue="one-cpu",
        priority_class="xmc-priority-high-high",
    )
    await cluster.create_jobset(high)

    async def evicted() -> Obj | None:
        workload = await cluster.workload_of("low")
        evicted = conditions(workload).get("Evicted")
        return workload if evicted and evicted["status"] == "True" else None

    workload = await eventually(evicted, what="the low-priority workload to be evicted")
    assert conditions(workload)["Evicted"]["reason"] == "Preempted"
    assert (await cluster.jobset("low"))["spec"]["suspend"] is True
    await eventually(lambda: _no_pods(cluster, "low"), what="the preempted pods to go")
    await eventually(lambda: _condition(cluster, "high", "Completed"), what="high to complete")
    await eventually(lambda: _admitted_workload(cluster, "low"), what="low to be re-admitted")
    assert (await cluster.jobset("low"))["spec"]["suspend"] is False


async def test_success_policy_any_completes_when_a_target_succeeds(cluster: Cluster) -> None:
    manifest = make_jobset(
        "any",
        replicated_job("leader", behavior={"run_seconds": 1}),
        replicated_job("workers", behavior={"run_seconds": None}),
        success_policy={"operator": "Any", "targetReplicatedJobs": ["leader"]},
    )
    await cluster.create_jobset(manifest)
    await eventually(lambda: _condition(cluster, "any", "Completed"), what="Any to complete")
    assert (await cluster.jobset("any"))["status"]["terminalState"] == "Completed"


async def test_failure_policy_restarts_then_fails(cluster: Cluster) -> None:
    manifest = make_jobset(
        "flaky",
        replicated_job(behavior={"crash": True}),
        failure_policy={"maxRestarts": 2},
    )
    await cluster.create_jobset(manifest)
    await eventually(lambda: _condition(cluster, "flaky", "Failed"), what="the JobSet to fail")
    jobset = await cluster.jobset("flaky")
    assert jobset["status"]["restarts"] == 2
    assert conditions(jobset)["Failed"]["reason"] == "ReachedMaxRestarts"


async def test_an_image_pull_error_shows_on_the_right_container(cluster: Cluster) -> None:
    manifest = make_jobset(
        "badimage",
        replicated_job(
            containers=("trainer", "logger"),
            container_behaviors={"trainer": {"image_pull_error": True}},
        ),
    )
    await cluster.create_jobset(manifest)

    async def pull_failed() -> dict[str, str]:
        pods = await cluster.pods("badimage")
        if not pods or not pods[0].status.container_statuses:
            return {}
        reasons = {
            s.name: s.state.waiting.reason
            for s in pods[0].status.container_statuses
            if s.state.waiting is not None
        }
        return reasons if reasons.get("trainer") in {"ErrImagePull", "ImagePullBackOff"} else {}

    reasons = await eventually(pull_failed, what="the image-pull waiting reason")
    assert "logger" not in reasons, "the other container starts normally"
    assert (await cluster.pods("badimage"))[0].status.phase == "Pending"


async def _admitted_workload(cluster: Cluster, jobset: str) -> Obj | None:
    workload = await cluster.workload_of(jobset)
    return workload if condition_is(workload, "Admitted") else None


async def _condition(cluster: Cluster, jobset: str, type_: str) -> bool:
    return condition_is(await cluster.jobset(jobset), type_)


async def _running_pods(cluster: Cluster, jobset: str) -> bool:
    pods = await cluster.pods(jobset)
    return bool(pods) and all(pod.status.phase == "Running" for pod in pods)


async def _no_pods(cluster: Cluster, jobset: str) -> bool:
    return not await cluster.pods(jobset)
