"""The Kueue simulator end to end: Workloads, admission, pending reasons, queue
positions and preemption, against the in-process store."""

from __future__ import annotations

from datetime import datetime
from functools import partial

from kubesim.controllers import pending_workloads, pending_workloads_in_local_queue
from kubesim.defaults import XMC_PRIORITY_CLASSES, install_defaults, priority_class_name
from kubesim.resources import CLUSTER_QUEUE, JOBSET, LOCAL_QUEUE, WORKLOAD_PRIORITY_CLASS
from kubesim.store import ObjectStore
from tests.kubesim.controller_support import (
    Sim,
    cluster_queue,
    condition_is,
    conditions,
    local_queue,
    make_jobset,
    replicated_job,
    running_sim,
)

FOREVER = {"run_seconds": None}
LOW = priority_class_name("low", "low")
HIGH = priority_class_name("high", "high")


def quota_reserved(sim: Sim, jobset: str) -> dict[str, str]:
    return dict(conditions(sim.workload(jobset)).get("QuotaReserved") or {})


def small_queue(
    sim: Sim, cpu: str, name: str = "small", preemption: str | None = "LowerPriority"
) -> None:
    sim.create(CLUSTER_QUEUE, cluster_queue(name, cpu=cpu, preemption=preemption))
    sim.create(LOCAL_QUEUE, local_queue(f"{name}-a", name))
    sim.create(LOCAL_QUEUE, local_queue(f"{name}-b", name))


async def test_workload_mirrors_the_jobset_and_its_priority() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "wl", replicated_job(replicas=2, parallelism=3, cpu="500m"), priority_class=HIGH
            ),
        )
        workload = await sim.until(
            lambda: sim.workload("wl"),
            lambda w: condition_is(w, "Admitted"),
            "the Workload to be admitted",
        )
        jobset = sim.jobset("wl")
        assert jobset is not None
        assert workload["metadata"]["name"].startswith("jobset-wl-")
        assert len(workload["metadata"]["name"]) == len("jobset-wl-") + 5
        assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == jobset["metadata"]["uid"]
        owner = workload["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["controller"]) == ("JobSet", "wl", True)
        spec = workload["spec"]
        assert spec["queueName"] == "cpu-queue"
        assert spec["priorityClassName"] == HIGH
        assert spec["priority"] == XMC_PRIORITY_CLASSES[HIGH] == 900
        assert [(p["name"], p["count"]) for p in spec["podSets"]] == [("main", 6)]
        admission = workload["status"]["admission"]
        assert admission == {
            "clusterQueue": "cluster-queue",
            "podSetAssignments": [
                {
                    "name": "main",
                    "flavors": {"cpu": "default-flavor"},
                    "resourceUsage": {"cpu": "3"},
                    "count": 6,
                }
            ],
        }
        assert conditions(workload)["QuotaReserved"]["reason"] == "QuotaReserved"


async def test_missing_local_queue_or_cluster_queue_is_inadmissible() -> None:
    async with running_sim() as sim:
        sim.create(LOCAL_QUEUE, local_queue("orphan", "ghost"))
        sim.create(JOBSET, make_jobset("lost", queue="nope"))
        sim.create(JOBSET, make_jobset("stray", queue="orphan"))

        await sim.wait_for(
            lambda: quota_reserved(sim, "lost").get("reason") == "Inadmissible", "lost"
        )
        await sim.wait_for(
            lambda: quota_reserved(sim, "stray").get("reason") == "Inadmissible", "stray"
        )

        assert quota_reserved(sim, "lost")["message"] == "LocalQueue nope doesn't exist"
        assert quota_reserved(sim, "lost")["status"] == "False"
        assert quota_reserved(sim, "stray")["message"] == "ClusterQueue ghost doesn't exist"
        assert (sim.jobset("lost") or {})["spec"]["suspend"] is True
        assert sim.pods("lost") == []


async def test_too_large_workload_waits_with_the_missing_quota_in_its_message() -> None:
    async with running_sim() as sim:
        small_queue(sim, cpu="2")
        sim.create(JOBSET, make_jobset("big", replicated_job(cpu="6"), queue="small-a"))
        await sim.wait_for(
            lambda: quota_reserved(sim, "big").get("reason") == "Pending", "big to wait"
        )
        assert quota_reserved(sim, "big")["message"] == (
            "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor "
            "default-flavor, previously considered podsets requests (0) + current podset "
            "request (6) > maximum capacity (2)"
        )
        assert (sim.jobset("big") or {})["spec"]["suspend"] is True


async def test_pending_workloads_report_positions_in_admission_order() -> None:
    async with running_sim() as sim:
        small_queue(sim, cpu="1")
        sim.create(JOBSET, make_jobset("first", replicated_job(behavior=FOREVER), queue="small-a"))
        await sim.wait_for(
            lambda: condition_is(sim.workload("first"), "Admitted"), "first admitted"
        )
        for name, queue, priority in [
            ("second", "small-a", None),
            ("third", "small-b", None),
            ("fourth", "small-a", None),
            ("urgent", "small-b", HIGH),
        ]:
            sim.create(JOBSET, make_jobset(name, queue=queue, priority_class=priority))
            await sim.until(partial(sim.workload, name), bool, f"the workload of {name}")

        def positions() -> list[tuple[str, str, int, int]]:
            return [
                (
                    item["metadata"]["ownerReferences"][0]["name"],
                    item["localQueueName"],
                    item["positionInClusterQueue"],
                    item["positionInLocalQueue"],
                )
                for item in pending_workloads(sim.store, "small")
            ]

        # "urgent" (900) preempts "first" (0); the evicted one queues again behind the rest.
        await sim.wait_for(
            lambda: condition_is(sim.workload("urgent"), "Admitted"), "urgent admitted"
        )
        await sim.wait_for(lambda: len(positions()) == 4, "four pending workloads")
        assert positions() == [
            ("second", "small-a", 0, 0),
            ("third", "small-b", 1, 0),
            ("fourth", "small-a", 2, 1),
            ("first", "small-a", 3, 2),
        ]
        local = pending_workloads_in_local_queue(sim.store, "default", "small-b")
        assert [(i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in local] == [(1, 0)]
        assert all(item["priority"] == 0 for item in pending_workloads(sim.store, "small"))
        cq = sim.store.get(CLUSTER_QUEUE, None, "small")
        await sim.wait_for(
            lambda: (
                sim.store.get(CLUSTER_QUEUE, None, "small")["status"].get("pendingWorkloads") == 4
            ),
            "the ClusterQueue to count four pending",
        )
        assert cq["status"]["conditions"][0]["type"] == "Active"


async def test_higher_priority_preempts_and_the_evicted_jobset_is_readmitted_later() -> None:
    async with running_sim() as sim:
        small_queue(sim, cpu="2")
        sim.create(
            JOBSET,
            make_jobset(
                "low",
                replicated_job(cpu="2", behavior=FOREVER),
                queue="small-a",
                priority_class=LOW,
            ),
        )
        running = await sim.until(
            lambda: sim.jobset("low"),
            lambda js: any(
                s["ready"] == 1 for s in js.get("status", {}).get("replicatedJobsStatus", [])
            ),
            "the low-priority JobSet to run",
        )
        first_resume = conditions(running)["Suspended"]["lastTransitionTime"]

        sim.create(
            JOBSET,
            make_jobset(
                "high",
                # outlasts low's 30 s termination grace: low is pod-less before re-admission
                replicated_job(cpu="2", behavior={"run_seconds": 60}),
                queue="small-b",
                priority_class=HIGH,
            ),
        )
        evicted = await sim.until(
            lambda: sim.workload("low"),
            lambda w: condition_is(w, "Evicted"),
            "the low-priority workload to be evicted",
        )
        evicted_conditions = conditions(evicted)
        assert evicted_conditions["Evicted"]["reason"] == "Preempted"
        assert evicted_conditions["Preempted"]["reason"] == "InClusterQueue"
        # phase one: the victim keeps its quota until its pods are gone
        assert evicted_conditions["QuotaReserved"]["status"] == "True"
        assert evicted_conditions["Admitted"]["status"] == "True"
        assert "admission" in evicted["status"]
        assert not condition_is(sim.workload("high"), "QuotaReserved")
        high_uid = (sim.workload("high") or {})["metadata"]["uid"]
        assert f"(UID: {high_uid}," in evicted_conditions["Evicted"]["message"]
        assert evicted_conditions["Evicted"]["message"].endswith(
            "preemptor path: /small; preemptee path: /small"
        )

        released = await sim.until(
            lambda: sim.workload("low"),
            lambda w: condition_is(w, "QuotaReserved", "False"),
            "the evicted workload to give its quota back",
        )
        released_conditions = conditions(released)
        assert released_conditions["Admitted"]["status"] == "False"
        assert released_conditions["Requeued"]["status"] == "True"
        assert released_conditions["Requeued"]["reason"] == "Preempted"
        assert released_conditions["QuotaReserved"]["reason"] == "Pending"
        assert "admission" not in released["status"]
        assert sim.pods("low") == [] or all(
            p["metadata"].get("deletionTimestamp") for p in sim.pods("low")
        )

        suspended = await sim.until(
            lambda: sim.jobset("low"),
            lambda js: (
                js["spec"]["suspend"]
                and not sim.pods("low")
                and js["status"]["replicatedJobsStatus"][0]["active"] == 0
            ),
            "the low-priority JobSet to be suspended with its pods gone",
        )
        assert conditions(suspended)["Suspended"]["status"] == "True"
        assert suspended["status"]["replicatedJobsStatus"][0]["suspended"] == 1
        assert not condition_is(suspended, "Completed")
        assert [i["metadata"]["name"] for i in pending_workloads(sim.store, "small")] == [
            (sim.workload("low") or {})["metadata"]["name"]
        ]

        await sim.wait_for(
            lambda: condition_is(sim.jobset("high"), "Completed"), "high to complete"
        )
        readmitted = await sim.until(
            lambda: sim.jobset("low"),
            lambda js: (
                condition_is(sim.workload("low"), "Admitted")
                and condition_is(js, "Suspended", "False")
                and js["status"]["replicatedJobsStatus"][0]["ready"] == 1
            ),
            "the low-priority JobSet to be re-admitted and run again",
        )
        second_resume = conditions(readmitted)["Suspended"]["lastTransitionTime"]
        assert datetime.fromisoformat(second_resume) > datetime.fromisoformat(first_resume)
        assert condition_is(sim.workload("low"), "Evicted", "False")


async def test_preemption_never_leaves_the_high_priority_workload_pending() -> None:
    async with running_sim() as sim:
        small_queue(sim, cpu="2", preemption="Never")
        sim.create(
            JOBSET,
            make_jobset(
                "low",
                replicated_job(cpu="2", behavior=FOREVER),
                queue="small-a",
                priority_class=LOW,
            ),
        )
        await sim.wait_for(lambda: condition_is(sim.workload("low"), "Admitted"), "low admitted")
        sim.create(
            JOBSET,
            make_jobset("high", replicated_job(cpu="2"), queue="small-b", priority_class=HIGH),
        )
        await sim.wait_for(
            lambda: quota_reserved(sim, "high").get("reason") == "Pending", "high to wait"
        )
        assert condition_is(sim.workload("low"), "Admitted")


async def test_multikueue_annotation_sets_the_cluster_name() -> None:
    async with running_sim() as sim:
        queue = cluster_queue("remote", cpu="8")
        queue["metadata"]["annotations"] = {"kubesim.xmc/multikueue-cluster": "east"}
        sim.create(CLUSTER_QUEUE, queue)
        sim.create(LOCAL_QUEUE, local_queue("remote-q", "remote"))
        sim.create(JOBSET, make_jobset("far", queue="remote-q"))
        workload = await sim.until(
            lambda: sim.workload("far"), lambda w: condition_is(w, "Admitted"), "far admitted"
        )
        assert workload["status"]["clusterName"] == "east"


def test_install_defaults_is_idempotent_and_complete() -> None:
    store = ObjectStore()
    install_defaults(store)
    install_defaults(store)
    assert [q["metadata"]["name"] for q in store.list(LOCAL_QUEUE, "default")] == [
        "cpu-queue",
        "gpu-queue",
    ]
    classes = {c["metadata"]["name"]: c["value"] for c in store.list(WORKLOAD_PRIORITY_CLASS)}
    assert classes == dict(XMC_PRIORITY_CLASSES)
    assert len(classes) == 9
    assert classes["xmc-priority-low-low"] == 100
    assert classes["xmc-priority-high-high"] == 900
    assert sorted(classes.values()) == list(range(100, 1000, 100))
    quota = store.get(CLUSTER_QUEUE, None, "cluster-queue")["spec"]["resourceGroups"][0]["flavors"][
        0
    ]
    assert {r["name"]: r["nominalQuota"] for r in quota["resources"]}["nvidia.com/gpu"] == "8"
