"""Deletion and termination as upstream does them, seen through kubernetes-asyncio over
HTTP: a JobSet held by a finalizer is left alone until the finalizer goes (jobset's
``Reconcile`` returns early; Kueue finishes its Workload with ``OwnerNotFound``), and
Terminating pods are not ``active`` in their Job but ``terminating`` (batch/v1)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import BatchV1Api, CoreV1Api, CustomObjectsApi

from tests.waiting import eventually

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

from tests.kubesim.controller_support import (
    XMC_FINALIZER,
    condition_is,
    conditions,
    make_jobset,
    replicated_job,
)
from tests.kubesim.support import JOBSET_API, MERGE_PATCH, MakeKubeSim, client_for

G, V = JOBSET_API
KUEUE = ("kueue.x-k8s.io", "v1beta2")
SCALE = 100.0
FOREVER = {"run_seconds": None}


def with_grace(rjob: dict[str, Any], seconds: int) -> dict[str, Any]:
    rjob["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = seconds
    return rjob


def rjob_counts(jobset: dict[str, Any]) -> dict[str, dict[str, int]]:
    entries = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    return {e["name"]: e for e in entries}


async def test_a_jobset_held_by_a_finalizer_is_left_alone_until_the_finalizer_goes(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(controllers=True, time_scale=SCALE)
    # Six real seconds: long enough that a loaded machine still sees it ready with the
    # others (at 20 simulated seconds it had completed before the forever pods were ready).
    quick = replicated_job("quick", behavior={"run_seconds": 600})
    forever = with_grace(replicated_job("forever", replicas=2, behavior=FOREVER), 60)
    body = {"apiVersion": f"{G}/{V}", "kind": "JobSet", **make_jobset("held", quick, forever)}
    selector = "jobset.sigs.k8s.io/jobset-name=held"
    async with client_for(sim) as api:
        custom, batch, core = CustomObjectsApi(api), BatchV1Api(api), CoreV1Api(api)

        async def get_jobset() -> dict[str, Any]:
            result: dict[str, Any] = await custom.get_namespaced_custom_object(
                G, V, "default", "jobsets", "held"
            )
            return result

        async def workloads() -> list[dict[str, Any]]:
            found = await custom.list_namespaced_custom_object(*KUEUE, "default", "workloads")
            return list(found["items"])

        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
        running = await eventually(
            get_jobset,
            lambda js: (
                rjob_counts(js).get("forever", {}).get("ready") == 2
                and rjob_counts(js).get("quick", {}).get("ready") == 1
            ),
            what="every job ready",
        )

        await custom.delete_namespaced_custom_object(
            G, V, "default", "jobsets", "held", propagation_policy="Background"
        )
        # The Job controller keeps running the Jobs: the quick one completes ...
        await eventually(
            lambda: batch.read_namespaced_job("held-quick-0", "default"),
            lambda job: any(
                c.type == "Complete" and c.status == "True" for c in job.status.conditions or []
            ),
            within=30.0,
            what="the quick Job to complete while the JobSet is held",
        )
        # ... but the JobSet is not reconciled: its status is the one it had.
        held = await get_jobset()
        assert held["metadata"]["deletionTimestamp"]
        assert held["metadata"]["finalizers"] == [XMC_FINALIZER]
        assert held["status"] == running["status"], "the JobSet's status is frozen"
        assert not condition_is(held, "Completed")
        jobs = await batch.list_namespaced_job("default", label_selector=selector)
        assert len(jobs.items) == 3, "no Job is deleted while the finalizer holds"
        pods = await core.list_namespaced_pod("default", label_selector=selector)
        forever_pods = [p for p in pods.items if "forever" in p.metadata.name]
        assert len(forever_pods) == 2
        assert all(p.metadata.deletion_timestamp is None for p in forever_pods)
        assert {p.status.phase for p in forever_pods} == {"Running"}
        # Kueue finishes the Workload of a job being deleted, which releases its quota.
        (workload,) = await workloads()
        finished = conditions(workload)["Finished"]
        assert (finished["status"], finished["reason"]) == ("True", "OwnerNotFound")
        assert finished["message"] == "The workload's owner no longer exists"

        # The finalizer goes: garbage collection takes the Jobs, the pods terminate.
        await custom.patch_namespaced_custom_object(
            G, V, "default", "jobsets", "held", {"metadata": {"finalizers": None}}, **MERGE_PATCH
        )
        jobs = await batch.list_namespaced_job("default", label_selector=selector)
        assert jobs.items == []
        assert await workloads() == [], "the Workload goes with its owner"
        terminating = await core.list_namespaced_pod("default", label_selector=selector)
        unfinished = [p for p in terminating.items if p.status.phase == "Running"]
        assert len(unfinished) == 2
        assert all(p.metadata.deletion_timestamp is not None for p in unfinished)
        assert all(p.metadata.deletion_grace_period_seconds == 60 for p in unfinished)
        await eventually(
            lambda: core.list_namespaced_pod("default", label_selector=selector),
            lambda pods: not pods.items,
            what="the pods to go after their grace",
        )


async def test_a_suspended_jobset_s_terminating_pods_are_not_active(
    make_kubesim: MakeKubeSim,
) -> None:
    sim = await make_kubesim(controllers=True, time_scale=SCALE)
    rjob = with_grace(replicated_job(replicas=2, behavior=FOREVER), 120)
    body = {
        "apiVersion": f"{G}/{V}",
        "kind": "JobSet",
        **make_jobset("evicted", rjob, queue=None, suspend=False),
    }
    selector = "jobset.sigs.k8s.io/jobset-name=evicted"
    async with client_for(sim) as api:
        custom, batch, core = CustomObjectsApi(api), BatchV1Api(api), CoreV1Api(api)

        async def get_jobset() -> dict[str, Any]:
            result: dict[str, Any] = await custom.get_namespaced_custom_object(
                G, V, "default", "jobsets", "evicted"
            )
            return result

        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
        await eventually(
            get_jobset, lambda js: rjob_counts(js).get("main", {}).get("ready") == 2, what="ready"
        )
        await custom.patch_namespaced_custom_object(
            G, V, "default", "jobsets", "evicted", {"spec": {"suspend": True}}, **MERGE_PATCH
        )

        jobs = await eventually(
            lambda: batch.list_namespaced_job("default", label_selector=selector),
            lambda jobs: all(
                j.spec.suspend and j.status.terminating == 1 and j.status.active == 0
                for j in jobs.items
            ),
            what="both Jobs suspended, their pods terminating and not active",
        )
        assert all(j.status.ready == 0 for j in jobs.items)
        suspended = await eventually(
            get_jobset,
            lambda js: condition_is(js, "Suspended") and rjob_counts(js)["main"]["suspended"] == 2,
            what="the JobSet to report its Jobs suspended",
        )
        # upstream counts Jobs with active pods: a Job whose pods all terminate has none
        counts = rjob_counts(suspended)["main"]
        assert (counts["active"], counts["ready"]) == (0, 0)
        pods = await core.list_namespaced_pod("default", label_selector=selector)
        assert len(pods.items) == 2, "the pods are still there, Terminating"
        assert all(p.metadata.deletion_timestamp is not None for p in pods.items)

        await eventually(
            lambda: batch.list_namespaced_job("default", label_selector=selector),
            lambda jobs: all(j.status.terminating == 0 for j in jobs.items),
            what="the pods to be gone",
        )
        pods = await core.list_namespaced_pod("default", label_selector=selector)
        assert pods.items == []


async def test_a_terminating_pod_is_replaced_at_once_by_default(
    make_kubesim: MakeKubeSim,
) -> None:
    """``podReplacementPolicy: TerminatingOrFailed`` (the default without a
    ``podFailurePolicy``): the replacement does not wait for the old pod to go."""
    sim = await make_kubesim(controllers=True, time_scale=SCALE)
    rjob = with_grace(replicated_job(behavior=FOREVER), 120)
    body = {
        "apiVersion": f"{G}/{V}",
        "kind": "JobSet",
        **make_jobset("direct", rjob, queue=None, suspend=False),
    }
    selector = "jobset.sigs.k8s.io/jobset-name=direct"
    async with client_for(sim) as api:
        custom, batch, core = CustomObjectsApi(api), BatchV1Api(api), CoreV1Api(api)
        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
        first = await eventually(
            lambda: core.list_namespaced_pod("default", label_selector=selector),
            lambda pods: len(pods.items) == 1,
            what="a pod",
        )
        old = first.items[0].metadata.name
        await core.delete_namespaced_pod(old, "default")

        pods = await eventually(
            lambda: core.list_namespaced_pod("default", label_selector=selector),
            lambda pods: len(pods.items) == 2,
            what="a replacement beside the Terminating pod",
        )
        by_name = {p.metadata.name: p for p in pods.items}
        assert by_name[old].metadata.deletion_timestamp is not None
        (new,) = (p for name, p in by_name.items() if name != old)
        assert new.metadata.deletion_timestamp is None
        assert new.metadata.annotations["batch.kubernetes.io/job-completion-index"] == "0"
        await eventually(
            lambda: batch.read_namespaced_job("direct-main-0", "default"),
            lambda job: job.status.terminating == 1 and job.status.active == 1,
            what="the Job to count one terminating and one active pod",
        )
