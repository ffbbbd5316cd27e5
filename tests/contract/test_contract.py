"""Cluster-level contract scenarios: what XMC relies on of JobSet, Kueue and the Job
controller, asserted the same way on kubesim and on a real cluster (kind, GKE).

Scenarios kubesim does not meet yet are expected failures on kubesim only
(``on_kubesim_xfail``, strict: they must start passing when the behaviour lands, and are
un-marked then)."""

from __future__ import annotations

from typing import Any

from tests.contract.cluster import (
    FINALIZER,
    HIGH,
    JOBS,
    Cluster,
    condition_true,
    xmc_jobset,
)
from xmc import labels
from xmc.kube import PODS, WORKLOADS

Obj = dict[str, Any]


async def test_create_stop_restart(cluster: Cluster) -> None:
    """XMC's flow: the Actuator creates execution 1's JobSet, it is admitted and runs; the
    Actuator deletes it and XMC's finalizer holds it (deletionTimestamp set) until the
    Reconciler removes the finalizer; then execution 2's JobSet of the same name runs."""
    first = await cluster.create_work_unit(wid=1, eid=1)
    assert first["spec"]["suspend"] is True  # Kueue unsuspends it on admission
    assert FINALIZER in first["metadata"]["finalizers"]
    await cluster.running(first)

    held = await cluster.stop(first)
    assert held["metadata"]["deletionTimestamp"]
    assert FINALIZER in held["metadata"]["finalizers"]

    name = first["metadata"]["name"]
    await cluster.release(name)
    await cluster.wait(lambda: _gone(cluster, name), within=60, what="the released JobSet is gone")
    # As the Actuator's Restart does (decision 0032): Kueue matches Workloads to a JobSet by
    # name, so execution 1's, left behind, would be taken for execution 2's.
    await cluster.wait(
        lambda: _no_workloads_of(cluster, first), within=60, what="its Workload is gone"
    )

    second = await cluster.create_work_unit(wid=1, eid=2)
    assert second["metadata"]["name"] == name
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    assert second["metadata"]["labels"][labels.EXECUTION_ID] == "2"
    pods = await cluster.running(second)
    assert all(_execution_of(pod) == "2" for pod in pods)


async def test_a_finalizer_held_jobset_keeps_running_until_released(cluster: Cluster) -> None:
    jobset = await cluster.create_work_unit(wid=2)
    await cluster.running(jobset)
    name = jobset["metadata"]["name"]
    await cluster.stop(jobset)

    async def still_running() -> bool:
        jobs = await cluster.owned(JOBS, jobset)
        pods = await cluster.running_pods(jobset)
        return (
            bool(jobs)
            and bool(pods)
            and all(not job["metadata"].get("deletionTimestamp") for job in jobs)
        )

    await cluster.holds(still_running, during=20, what="Jobs and pods of the held JobSet run")

    await cluster.release(name)
    await cluster.wait(lambda: _gone(cluster, name), within=60, what="the JobSet is gone")
    await cluster.wait(
        lambda: _none_of(cluster, PODS, jobset), within=120, what="its pods are gone"
    )
    assert not await cluster.owned(JOBS, jobset)


async def test_a_suspended_jobsets_job_reports_terminating_pods(cluster: Cluster) -> None:
    """Kueue preempts the low-priority JobSet (suspends it); while its pods terminate, its
    Job reports ``active: 0`` and ``terminating > 0`` (Job controller since 1.28)."""
    victim = await cluster.create_work_unit(wid=3)
    await cluster.running(victim)
    await cluster.create_work_unit(wid=4, priority=HIGH)

    async def terminating_job() -> Obj | None:
        current = await cluster.jobset(victim["metadata"]["name"])
        assert current is not None
        if not current["spec"].get("suspend"):
            return None
        for job in await cluster.owned(JOBS, victim):
            status = job.get("status") or {}
            if status.get("active", 0) == 0 and status.get("terminating", 0) > 0:
                return job
        return None

    await cluster.wait(
        terminating_job, within=25, what="the suspended JobSet's Job: active 0, terminating > 0"
    )
    pods = await cluster.owned(PODS, victim)
    assert pods, "its pods are still terminating"
    assert all(pod["metadata"].get("deletionTimestamp") for pod in pods)


async def test_a_preemptor_waits_for_the_victim_to_stop(cluster: Cluster) -> None:
    """Kueue releases the victim's quota once its JobSet reports no active Job (its
    ``IsActive``), and a Job's Terminating pods are not active: so the preemptor is never
    admitted while a victim's Job still has an active pod, but may be while they terminate."""
    victim = await cluster.create_work_unit(wid=5)
    await cluster.running(victim)
    preemptor = await cluster.create_work_unit(wid=6, priority=HIGH)

    async def admitted_only_once_the_victim_stopped() -> bool:
        # The preemptor first, then the victim: a victim's Job that is active now was
        # active at the earlier look too (a suspended Job's active count only falls).
        admitted = await cluster.admitted(preemptor)
        active = [
            job["metadata"]["name"]
            for job in await cluster.owned(JOBS, victim)
            if (job.get("status") or {}).get("active", 0) > 0
        ]
        assert not (admitted and active), f"admitted while the victim's {active} still ran"
        return admitted

    await cluster.wait(
        admitted_only_once_the_victim_stopped, within=120, what="the preemptor is admitted"
    )
    await cluster.running(preemptor)
    victim_workloads = await cluster.owned(WORKLOADS, victim)
    assert all(condition_true(w, "Evicted") or condition_true(w, "Preempted")
               for w in victim_workloads)  # fmt: skip


async def test_a_missing_priority_class_keeps_the_jobset_suspended(cluster: Cluster) -> None:
    """Kueue cannot create the Workload (the class does not exist), so the JobSet stays
    suspended. A JobSet created after it is admitted meanwhile: the queue has room for
    one, and without a class of its own it cannot preempt, so it is admitted only if the
    first one holds no quota."""
    manifest = xmc_jobset(cluster.namespace, 7)
    manifest["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "xmc-contract-no-such-class"
    missing = await cluster.jobsets.create_jobset(cluster.namespace, manifest)
    control_manifest = xmc_jobset(cluster.namespace, 8)
    del control_manifest["metadata"]["labels"]["kueue.x-k8s.io/priority-class"]  # priority 0
    control = await cluster.jobsets.create_jobset(cluster.namespace, control_manifest)
    await cluster.wait(
        lambda: cluster.admitted(control), within=60, what="the later JobSet is admitted"
    )

    async def still_suspended() -> bool:
        current = await cluster.jobset(missing["metadata"]["name"])
        assert current is not None
        return bool(current["spec"].get("suspend")) and not await cluster.admitted(current)

    await cluster.holds(still_suspended, during=10, what="the JobSet stays suspended")


# --- helpers ----------------------------------------------------------------------------


async def _gone(cluster: Cluster, name: str) -> bool:
    return await cluster.jobset(name) is None


async def _none_of(cluster: Cluster, resource: Any, jobset: Obj) -> bool:
    return not await cluster.owned(resource, jobset)


async def _no_workloads_of(cluster: Cluster, jobset: Obj) -> bool:
    """The Actuator's own check: no Workload labelled with the JobSet's uid is left."""
    uid = jobset["metadata"]["uid"]
    return not await cluster.jobsets.workloads_of(cluster.namespace, uid)


def _execution_of(pod: Obj) -> str | None:
    value = (pod["metadata"].get("labels") or {}).get(labels.EXECUTION_ID)
    return None if value is None else str(value)
