"""The JobSet simulator end to end against the in-process store (with Kueue and the
kubelet running, as kubesim runs them)."""

from __future__ import annotations

from datetime import datetime

from kubesim.controllers import ControllerSettings
from kubesim.resources import JOB, JOBSET, WORKLOAD
from tests.kubesim.controller_support import (
    XMC_FINALIZER,
    Sim,
    condition_is,
    conditions,
    make_jobset,
    replicated_job,
    running_sim,
)

FOREVER = {"run_seconds": None}


def rjob_status(sim: Sim, jobset: str, rjob: str) -> dict[str, int]:
    found = sim.jobset(jobset) or {}
    for entry in (found.get("status") or {}).get("replicatedJobsStatus") or []:
        if entry["name"] == rjob:
            return dict(entry)
    return {}


async def test_admitted_jobset_runs_its_pods_to_completion() -> None:
    async with running_sim() as sim:
        sim.create(JOBSET, make_jobset("plain", replicated_job(replicas=2, parallelism=2)))

        done = await sim.until(
            lambda: sim.jobset("plain"),
            lambda js: condition_is(js, "Completed"),
            "the JobSet to complete",
        )

        assert done["spec"]["suspend"] is False
        assert done["status"]["terminalState"] == "Completed"
        assert conditions(done)["Completed"]["reason"] == "AllJobsCompleted"
        assert conditions(done)["Suspended"]["status"] == "False"
        assert conditions(done)["Suspended"]["reason"] == "ResumeJobs"
        assert done["status"]["replicatedJobsStatus"] == [
            {"name": "main", "ready": 0, "succeeded": 2, "failed": 0, "active": 0, "suspended": 0}
        ]
        jobs = sorted(j["metadata"]["name"] for j in sim.store.list(JOB, "default"))
        assert jobs == ["plain-main-0", "plain-main-1"]
        pods = sim.pods("plain")
        assert len(pods) == 4
        assert all(p["status"]["phase"] == "Succeeded" for p in pods)
        pod = next(p for p in pods if p["metadata"]["name"].startswith("plain-main-1-1-"))
        labels = pod["metadata"]["labels"]
        assert labels["jobset.sigs.k8s.io/jobset-name"] == "plain"
        assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "main"
        assert labels["jobset.sigs.k8s.io/job-index"] == "1"
        assert labels["batch.kubernetes.io/job-completion-index"] == "1"
        assert labels["xmc.google.com/work-unit-id"] == "1"
        assert pod["metadata"]["ownerReferences"][0]["name"] == "plain-main-1"
        workload = await sim.until(
            lambda: sim.workload("plain"),
            lambda w: condition_is(w, "Finished"),
            "the Workload to finish",
        )
        assert conditions(workload)["Finished"]["reason"] == "Succeeded"


async def test_suspend_and_resume_without_kueue_record_the_transition_time() -> None:
    async with running_sim(ControllerSettings(kueue=False)) as sim:
        sim.create(JOBSET, make_jobset("held", replicated_job(behavior=FOREVER)))
        held = await sim.until(
            lambda: sim.jobset("held"),
            lambda js: condition_is(js, "Suspended"),
            "the JobSet to report Suspended",
        )
        assert conditions(held)["Suspended"]["reason"] == "SuspendedJobs"
        assert rjob_status(sim, "held", "main")["suspended"] == 1
        assert sim.pods("held") == []
        job = sim.store.get(JOB, "default", "held-main-0")
        assert job["spec"]["suspend"] is True

        before = sim.clock.now().replace(microsecond=0)
        sim.store.update(JOBSET, "default", "held", lambda o: o["spec"].update(suspend=False))
        resumed = await sim.until(
            lambda: sim.jobset("held"),
            lambda js: (
                condition_is(js, "Suspended", "False")
                and rjob_status(sim, "held", "main").get("ready") == 1
            ),
            "the JobSet to resume and its job to be ready",
        )
        condition = conditions(resumed)["Suspended"]
        assert condition["reason"] == "ResumeJobs"
        assert condition["message"] == "jobset is resumed"
        assert datetime.fromisoformat(condition["lastTransitionTime"]) >= before
        assert rjob_status(sim, "held", "main") == {
            "name": "main",
            "ready": 1,
            "succeeded": 0,
            "failed": 0,
            "active": 1,
            "suspended": 0,
        }


async def test_success_policy_any_completes_on_the_target_and_stops_the_rest() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "any",
                replicated_job("driver", behavior={"run_seconds": 2}),
                replicated_job("workers", replicas=2, behavior=FOREVER),
                success_policy={"operator": "Any", "targetReplicatedJobs": ["driver"]},
            ),
        )
        done = await sim.until(
            lambda: sim.jobset("any"),
            lambda js: condition_is(js, "Completed"),
            "the JobSet to complete through its driver",
        )
        assert done["status"]["terminalState"] == "Completed"
        await sim.wait_for(
            lambda: all(
                p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "driver"
                for p in sim.pods("any")
            ),
            "the workers' pods to be deleted",
        )


async def test_success_policy_all_waits_for_every_target() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "all",
                replicated_job("driver", behavior={"run_seconds": 1}),
                replicated_job("workers", replicas=2, behavior={"run_seconds": 30}),
            ),
        )
        await sim.wait_for(
            lambda: rjob_status(sim, "all", "driver").get("succeeded") == 1,
            "the driver to succeed",
        )
        assert not condition_is(sim.jobset("all"), "Completed")
        assert rjob_status(sim, "all", "workers")["active"] == 2

        done = await sim.until(
            lambda: sim.jobset("all"),
            lambda js: condition_is(js, "Completed"),
            "the JobSet to complete once the workers succeed",
        )
        assert rjob_status(sim, "all", "workers")["succeeded"] == 2
        assert done["status"]["terminalState"] == "Completed"


async def test_failure_policy_restarts_up_to_max_then_fails() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "flaky",
                replicated_job(behavior={"run_seconds": 1, "exit_code": 3}),
                failure_policy={"maxRestarts": 2},
            ),
        )
        failed = await sim.until(
            lambda: sim.jobset("flaky"),
            lambda js: condition_is(js, "Failed"),
            "the JobSet to fail after its restarts",
        )
        assert failed["status"]["restarts"] == 2
        assert failed["status"]["terminalState"] == "Failed"
        assert conditions(failed)["Failed"]["reason"] == "ReachedMaxRestarts"
        job = sim.store.get(JOB, "default", "flaky-main-0")
        assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "2"
        assert rjob_status(sim, "flaky", "main")["failed"] == 1


async def test_crashing_container_fails_its_pod_and_job_after_the_backoff_limit() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET, make_jobset("crash", replicated_job(behavior={"crash": True}, backoff_limit=1))
        )
        failed = await sim.until(
            lambda: sim.jobset("crash"),
            lambda js: condition_is(js, "Failed"),
            "the JobSet to fail",
        )
        assert conditions(failed)["Failed"]["reason"] == "FailedJobs"
        job = sim.store.get(JOB, "default", "crash-main-0")
        assert condition_is(job, "Failed")
        assert conditions(job)["Failed"]["reason"] == "BackoffLimitExceeded"
        assert job["status"]["failed"] == 2
        pods = sim.pods("crash")
        assert len(pods) == 2  # the first attempt and one retry (backoffLimit 1)
        for pod in pods:
            assert pod["status"]["phase"] == "Failed"
            state = pod["status"]["containerStatuses"][0]["state"]
            assert state["terminated"]["exitCode"] == 1
            assert state["terminated"]["reason"] == "Error"


async def test_exit_code_is_reported_on_the_failed_container() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "exit",
                replicated_job(
                    containers=("main", "sidecar"),
                    container_behaviors={
                        "main": {"run_seconds": 1, "exit_code": 42},
                        "sidecar": {"run_seconds": 2},
                    },
                ),
            ),
        )
        await sim.wait_for(lambda: condition_is(sim.jobset("exit"), "Failed"), "the JobSet to fail")
        (pod,) = sim.pods("exit")
        states = {c["name"]: c["state"] for c in pod["status"]["containerStatuses"]}
        assert states["main"]["terminated"]["exitCode"] == 42
        assert states["sidecar"]["terminated"]["exitCode"] == 0
        assert pod["status"]["phase"] == "Failed"


async def test_a_jobset_held_by_a_foreign_finalizer_is_left_alone() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "doomed",
                replicated_job(replicas=2, behavior=FOREVER),
                replicated_job("quick", behavior={"run_seconds": 20}),
            ),
        )
        await sim.wait_for(
            lambda: (
                rjob_status(sim, "doomed", "main").get("ready") == 2
                and rjob_status(sim, "doomed", "quick").get("ready") == 1
            ),
            "every job to be ready",
        )
        before = sim.jobset("doomed")
        assert before is not None

        sim.store.delete(JOBSET, "default", "doomed")
        await sim.wait_for(
            lambda: condition_is(sim.store.get(JOB, "default", "doomed-quick-0"), "Complete"),
            "the quick Job to complete while the JobSet is held",
        )
        held = sim.jobset("doomed")
        assert held is not None
        assert held["metadata"]["deletionTimestamp"]
        assert held["metadata"]["finalizers"] == [XMC_FINALIZER]
        assert held["status"] == before["status"], "not reconciled while being deleted"
        assert len(sim.store.list(JOB, "default")) == 3
        running = [p for p in sim.pods("doomed") if "deletionTimestamp" not in p["metadata"]]
        assert len(running) == 3
        workload = sim.workload("doomed")
        assert workload is not None
        assert conditions(workload)["Finished"]["reason"] == "OwnerNotFound"

        sim.store.update(JOBSET, "default", "doomed", lambda o: o["metadata"].update(finalizers=[]))
        assert sim.jobset("doomed") is None
        assert sim.store.list(JOB, "default") == []
        assert sim.store.list(WORKLOAD, "default") == []
        await sim.wait_for(lambda: not sim.pods("doomed"), "the pods to go")


async def test_depends_on_creates_dependent_jobs_once_the_dependency_is_ready() -> None:
    async with running_sim() as sim:
        sim.create(
            JOBSET,
            make_jobset(
                "ordered",
                replicated_job("leader", behavior={"start_seconds": 5, "run_seconds": None}),
                replicated_job(
                    "workers", behavior=FOREVER, depends_on=[{"name": "leader", "status": "Ready"}]
                ),
            ),
        )
        await sim.wait_for(
            lambda: rjob_status(sim, "ordered", "leader").get("active") == 1, "the leader to start"
        )
        assert sim.store.find(JOB, "default", "ordered-workers-0") is None
        await sim.wait_for(
            lambda: rjob_status(sim, "ordered", "workers").get("ready") == 1,
            "the workers to run after the leader is ready",
        )
