"""How the simulators fail, field for field as upstream does, so the Reconciler's failure
reasons (docs/reconciler.md) are tested against what a cluster writes: a container that
is OOMKilled, a Job past its ``activeDeadlineSeconds`` (``DeadlineExceeded``) or its
``backoffLimit`` (``BackoffLimitExceeded``), and the JobSet's ``Failed`` message naming
the first failed Job."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from kubesim.controllers.behavior import ContainerBehavior, parse_behaviors
from kubesim.controllers.job import job_status, plan_job_pods
from kubesim.controllers.jobset_failure import first_failed_job
from kubesim.controllers.jobset_plan import plan_jobset
from kubesim.controllers.pod_status import pod_status_at
from kubesim.resources import JOB, JOBSET
from tests.kubesim.controller_support import (
    condition_is,
    conditions,
    make_jobset,
    replicated_job,
    running_sim,
)

NOW = "2026-01-02T03:04:05Z"
T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)


# --- OOMKilled ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "want"),
    [
        pytest.param(
            {"oom_killed": True},
            ContainerBehavior(1.0, 3.0, 137, terminated_reason="OOMKilled"),
            id="OOMKilled after the default run exits 137",
        ),
        pytest.param(
            {"oom_killed": True, "run_seconds": None},
            ContainerBehavior(1.0, 0.0, 137, terminated_reason="OOMKilled"),
            id="OOMKilled at once when it would run forever",
        ),
        pytest.param(
            {"oom_killed": True, "exit_code": 9, "run_seconds": 5},
            ContainerBehavior(1.0, 5.0, 9, terminated_reason="OOMKilled"),
            id="the exit code may be given",
        ),
    ],
)
def test_oom_killed_behaviour(annotation: dict[str, Any], want: ContainerBehavior) -> None:
    behaviors = parse_behaviors(
        {"kubesim.xmc/behavior": json.dumps(annotation)},
        ["main"],
        start_seconds=1.0,
        run_seconds=3.0,
    )
    assert behaviors["main"] == want


def test_an_oom_killed_container_terminates_with_its_reason() -> None:
    pod = {"spec": {"containers": [{"name": "main", "image": "img"}]}}
    behaviors = {"main": ContainerBehavior(1.0, 2.0, 137, terminated_reason="OOMKilled")}
    snapshot = pod_status_at(pod, behaviors, started_at=T0, elapsed=10.0)
    assert snapshot.status["phase"] == "Failed"
    (container,) = snapshot.status["containerStatuses"]
    terminated = container["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (137, "OOMKilled")


# --- activeDeadlineSeconds ------------------------------------------------------------


def _job(
    *,
    deadline: int | None = 60,
    start: str | None = "2026-01-02T03:03:00Z",
    suspend: bool = False,
    conditions: list[dict[str, Any]] | None = None,
    backoff: int = 0,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": 1,
        "completions": 1,
        "backoffLimit": backoff,
        "suspend": suspend,
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    status: dict[str, Any] = {"conditions": conditions or []}
    if start is not None:
        status["startTime"] = start
    return {
        "metadata": {"name": "js-main-0", "namespace": "default", "uid": "u"},
        "spec": spec,
        "status": status,
    }


def _pod(phase: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "js-main-0-0-abcde",
            "labels": {"batch.kubernetes.io/job-completion-index": "0"},
        },
        "status": {"phase": phase, "conditions": []},
    }


_SUSPENDED = [{"type": "Suspended", "status": "True", "reason": "JobSuspended"}]


@pytest.mark.parametrize(
    ("job", "pods", "failed", "start"),
    [
        pytest.param(
            _job(), [_pod("Running")], ("DeadlineExceeded",), None, id="past the deadline"
        ),
        pytest.param(
            _job(start="2026-01-02T03:03:05Z"),
            [_pod("Running")],
            ("DeadlineExceeded",),
            None,
            id="exactly at the deadline (upstream's >=)",
        ),
        pytest.param(
            _job(start="2026-01-02T03:03:06Z"),
            [_pod("Running")],
            None,
            None,
            id="a second before the deadline",
        ),
        pytest.param(_job(deadline=None), [_pod("Running")], None, None, id="no deadline"),
        pytest.param(
            _job(), [_pod("Failed")], ("BackoffLimitExceeded",), None, id="backoff limit first"
        ),
        pytest.param(
            _job(suspend=True, conditions=_SUSPENDED),
            [],
            None,
            None,
            id="never while suspended",
        ),
        pytest.param(
            _job(conditions=_SUSPENDED),
            [],
            None,
            NOW,
            id="a resume restarts the clock",
        ),
    ],
)
def test_job_deadline(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    failed: tuple[str] | None,
    start: str | None,
) -> None:
    status = job_status(job, pods, NOW)
    found = conditions({"status": status}).get("Failed")
    got = None if found is None else (found["reason"],)
    assert got == failed
    if failed == ("DeadlineExceeded",):
        assert found is not None
        assert found["message"] == "Job was active longer than specified deadline"
    if start is not None:
        assert status["startTime"] == start


def test_a_job_past_its_deadline_deletes_its_active_pods() -> None:
    job = _job()
    job["status"] = job_status(job, [_pod("Running")], NOW)
    assert plan_job_pods(job, [_pod("Running")], NOW).delete_pods == ("js-main-0-0-abcde",)


# --- the JobSet's failure message -----------------------------------------------------


def _failed_child(name: str, at: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": name.split("-")[1],
                "jobset.sigs.k8s.io/restart-attempt": "0",
            },
        },
        "spec": {"parallelism": 1},
        "status": {
            "conditions": [{"type": "Failed", "status": "True", "lastTransitionTime": at}],
        },
    }


@pytest.mark.parametrize(
    ("jobs", "first"),
    [
        pytest.param([], "", id="none failed"),
        pytest.param(
            [_failed_child("js-b-0", "2026-01-02T03:00:02Z"), _failed_child("js-a-0", NOW)],
            "js-b-0",
            id="the oldest Failed condition, not the first name",
        ),
        pytest.param(
            [_failed_child("js-a-0", NOW), _failed_child("js-b-0", NOW)],
            "js-a-0",
            id="a tie goes to list order",
        ),
    ],
)
def test_first_failed_job(jobs: list[dict[str, Any]], first: str) -> None:
    assert first_failed_job(jobs) == first


def test_the_jobset_failure_message_names_the_first_failed_job() -> None:
    jobset = {
        "metadata": {"name": "js", "namespace": "default", "uid": "js-uid"},
        "spec": {
            "replicatedJobs": [
                {"name": n, "replicas": 1, "template": {"spec": {"parallelism": 1}}}
                for n in ("a", "b")
            ]
        },
        "status": {},
    }
    jobs = [_failed_child("js-a-0", NOW), _failed_child("js-b-0", "2026-01-02T03:00:00Z")]
    plan = plan_jobset(jobset, copy.deepcopy(jobs), NOW)
    failed = conditions({"status": plan.status})["Failed"]
    assert failed["reason"] == "FailedJobs"
    assert failed["message"] == (
        "jobset failed due to one or more job failures (first failed job: js-b-0)"
    )


# --- end to end in the simulators -----------------------------------------------------


def _with_deadline(rjob: dict[str, Any], seconds: int) -> dict[str, Any]:
    rjob["template"]["spec"]["activeDeadlineSeconds"] = seconds
    return rjob


async def test_a_job_that_outlives_its_deadline_fails_the_jobset() -> None:
    # Scale 10: the 2 s of slack below are 200 ms of real time, not 20 ms (CI flaked at 100).
    async with running_sim(scale=10.0) as sim:
        rjob = _with_deadline(replicated_job(behavior={"run_seconds": None}), 20)
        sim.create(JOBSET, make_jobset("slow", rjob))
        failed = await sim.until(
            lambda: sim.jobset("slow"),
            lambda js: condition_is(js, "Failed"),
            "the JobSet to fail at the Job's deadline",
        )
        assert conditions(failed)["Failed"]["message"].endswith("(first failed job: slow-main-0)")
        job = sim.store.get(JOB, "default", "slow-main-0")
        assert conditions(job)["Failed"]["reason"] == "DeadlineExceeded"
        start = datetime.fromisoformat(job["status"]["startTime"])
        ended = datetime.fromisoformat(conditions(job)["Failed"]["lastTransitionTime"])
        assert 20 <= (ended - start).total_seconds() <= 22
        await sim.wait_for(
            lambda: all(p["metadata"].get("deletionTimestamp") for p in sim.pods("slow")),
            "the running pod to be stopped",
        )


async def test_an_oom_killed_pod_fails_its_job_after_the_backoff_limit() -> None:
    async with running_sim() as sim:
        sim.create(JOBSET, make_jobset("oom", replicated_job(behavior={"oom_killed": True})))
        await sim.until(
            lambda: sim.jobset("oom"),
            lambda js: condition_is(js, "Failed"),
            "the JobSet to fail",
        )
        job = sim.store.get(JOB, "default", "oom-main-0")
        assert conditions(job)["Failed"]["reason"] == "BackoffLimitExceeded"
        (pod,) = sim.pods("oom")
        (container,) = pod["status"]["containerStatuses"]
        assert container["state"]["terminated"]["reason"] == "OOMKilled"
        assert container["state"]["terminated"]["exitCode"] == 137
