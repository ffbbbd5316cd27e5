"""Graceful pod termination: deleted pods stay Terminating for their grace period (the
kubelet simulator's finalizer); as in batch/v1 they are ``terminating``, not ``active``, in
their Job, and hold their index only under ``podReplacementPolicy: Failed``."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kubesim.controllers import ControllerSettings
from kubesim.controllers.kubelet import (
    KUBELET_FINALIZER,
    MAX_GRACE_SECONDS,
    grace_seconds,
    terminated_status,
)
from kubesim.resources import JOB, JOBSET, POD
from tests.kubesim.controller_support import (
    Obj,
    Sim,
    condition_is,
    make_jobset,
    replicated_job,
    running_sim,
)

FOREVER = {"run_seconds": None}
NO_KUEUE = ControllerSettings(kueue=False)


def rjob_status(sim: Sim, jobset: str) -> dict[str, int]:
    found = sim.jobset(jobset) or {}
    entries = (found.get("status") or {}).get("replicatedJobsStatus") or [{}]
    return dict(entries[0])


def with_grace(rjob: Obj, seconds: int) -> Obj:
    rjob["template"]["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = seconds
    return rjob


def suspend(sim: Sim, name: str) -> None:
    sim.store.update(JOBSET, "default", name, lambda o: o["spec"].update(suspend=True))


def deleted_at(pod: Obj) -> datetime:
    return datetime.fromisoformat(pod["metadata"]["deletionTimestamp"])


def stopped(pod: Obj) -> bool:
    """Terminating, with its containers marked terminated by the kubelet."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return "deletionTimestamp" in pod["metadata"] and all(
        "terminated" in c["state"] for c in statuses
    )


async def start_running(sim: Sim, name: str, rjob: Obj) -> list[Obj]:
    sim.create(JOBSET, make_jobset(name, rjob, queue=None, suspend=False))
    replicas = int(rjob["replicas"])
    await sim.wait_for(lambda: rjob_status(sim, name).get("ready") == replicas, "jobs ready")
    return sim.pods(name)


async def test_a_suspended_jobset_s_terminating_pods_are_not_active() -> None:
    async with running_sim(NO_KUEUE) as sim:
        pods = await start_running(sim, "evicted", replicated_job(replicas=2, behavior=FOREVER))
        assert all(p["metadata"]["finalizers"] == [KUBELET_FINALIZER] for p in pods)

        suspend(sim, "evicted")
        await sim.wait_for(
            lambda: (
                len(sim.pods("evicted")) == 2
                and all(stopped(p) for p in sim.pods("evicted"))
                and condition_is(sim.jobset("evicted"), "Suspended")
                and rjob_status(sim, "evicted")["active"] == 0
                and rjob_status(sim, "evicted")["suspended"] == 2
            ),
            "the pods to be Terminating, and the JobSet to count no active Job",
        )
        terminating = sim.pods("evicted")
        for pod in terminating:
            assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
            assert pod["status"]["phase"] == "Running"
            (container,) = pod["status"]["containerStatuses"]
            assert container["state"]["terminated"]["exitCode"] == 143
            assert condition_is(pod, "Ready"), "readiness is left as it was"
        job = sim.store.get(JOB, "default", "evicted-main-0")
        assert (job["status"]["active"], job["status"]["terminating"]) == (0, 1)

        await sim.wait_for(
            lambda: (
                not sim.pods("evicted")
                and sim.store.get(JOB, "default", "evicted-main-0")["status"]["terminating"] == 0
            ),
            "the pods to go and the terminating count to drop",
        )
        gone_at = sim.clock.now()
        assert gone_at >= max(deleted_at(p) for p in terminating) + timedelta(seconds=30)
        assert rjob_status(sim, "evicted")["ready"] == 0


async def test_a_zero_grace_period_removes_the_pods_at_once() -> None:
    async with running_sim(NO_KUEUE) as sim:
        rjob = with_grace(replicated_job(replicas=2, behavior=FOREVER), 0)
        await start_running(sim, "abrupt", rjob)

        suspended_at = sim.clock.now()
        suspend(sim, "abrupt")
        await sim.wait_for(
            lambda: not sim.pods("abrupt") and rjob_status(sim, "abrupt").get("active") == 0,
            "the pods to go",
        )
        assert sim.clock.now() - suspended_at < timedelta(seconds=30)


async def test_deleting_a_pod_directly_goes_through_graceful_termination() -> None:
    async with running_sim(NO_KUEUE) as sim:
        rjob = with_grace(replicated_job(behavior=FOREVER), 20)
        # With a podFailurePolicy the Job replaces pods only once they are gone (Failed).
        rjob["template"]["spec"]["podFailurePolicy"] = {
            "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
        }
        (pod,) = await start_running(sim, "direct", rjob)
        name = pod["metadata"]["name"]

        sim.store.delete(POD, "default", name)
        held = sim.store.get(POD, "default", name)
        assert held["metadata"]["deletionGracePeriodSeconds"] == 20

        most_pods = 0

        def replaced() -> bool:
            nonlocal most_pods
            pods = sim.pods("direct")
            most_pods = max(most_pods, len(pods))
            return len(pods) == 1 and pods[0]["metadata"]["name"] != name

        await sim.wait_for(replaced, "the pod to go and be replaced")
        assert sim.clock.now() >= deleted_at(held) + timedelta(seconds=20)
        assert most_pods == 1, "the Terminating pod keeps its index until it is gone"
        await sim.wait_for(lambda: rjob_status(sim, "direct").get("ready") == 1, "ready again")


async def test_deleting_a_jobset_removes_its_pods_after_their_grace() -> None:
    async with running_sim(NO_KUEUE) as sim:
        rjob = with_grace(replicated_job(behavior=FOREVER), 10)
        (pod,) = await start_running(sim, "cascade", rjob)
        sim.store.update(
            JOBSET, "default", "cascade", lambda o: o["metadata"].update(finalizers=[])
        )

        sim.store.delete(JOBSET, "default", "cascade")
        assert sim.jobset("cascade") is None
        held = sim.store.get(POD, "default", pod["metadata"]["name"])
        assert "deletionTimestamp" in held["metadata"]
        await sim.wait_for(lambda: not sim.pods("cascade"), "the pods to go")
        assert sim.clock.now() >= deleted_at(held) + timedelta(seconds=10)


async def test_without_the_kubelet_pods_carry_no_finalizer() -> None:
    async with running_sim(ControllerSettings(kueue=False, kubelet=False)) as sim:
        sim.create(JOBSET, make_jobset("bare", queue=None, suspend=False))
        await sim.wait_for(lambda: sim.pods("bare"), "a pod")
        (pod,) = sim.pods("bare")
        assert "finalizers" not in pod["metadata"]
        sim.store.delete(POD, "default", pod["metadata"]["name"])
        assert sim.store.find(POD, "default", pod["metadata"]["name"]) is None


def test_grace_seconds() -> None:
    def pod(meta: dict[str, Any], spec: dict[str, Any]) -> Obj:
        return {"metadata": meta, "spec": spec}

    assert grace_seconds(pod({}, {})) == 30
    assert grace_seconds(pod({}, {"terminationGracePeriodSeconds": 5})) == 5
    assert grace_seconds(pod({"deletionGracePeriodSeconds": 0}, {})) == 0
    assert grace_seconds(pod({"deletionGracePeriodSeconds": 86400}, {})) == MAX_GRACE_SECONDS


def test_terminated_status_stops_unfinished_containers_only() -> None:
    done = {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    running = {
        "name": "b",
        "ready": True,
        "started": True,
        "containerID": "kubesim://b",
        "state": {"running": {"startedAt": "2024-01-01T00:00:00Z"}},
    }
    waiting = {"name": "c", "ready": False, "state": {"waiting": {"reason": "ErrImagePull"}}}
    status = {"phase": "Running", "containerStatuses": [done, running, waiting]}

    stopped = terminated_status(status, "2024-01-01T00:01:00Z")

    assert stopped["phase"] == "Running"
    a, b, c = stopped["containerStatuses"]
    assert a == done
    assert b["ready"] is False
    assert b["state"]["terminated"] == {
        "exitCode": 143,
        "reason": "Error",
        "startedAt": "2024-01-01T00:00:00Z",
        "finishedAt": "2024-01-01T00:01:00Z",
        "containerID": "kubesim://b",
    }
    assert c["state"]["terminated"]["reason"] == "ContainerStatusUnknown"
    assert status["containerStatuses"][1] is running, "the input is not modified"
