"""Table tests of the simulators' pure deciders: quantities, behaviours, pod timelines,
Job and JobSet plans, flavor fitting, admission and preemption."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from kubequantity import format_quantity, parse_quantity
from kubesim.controllers.behavior import ContainerBehavior, parse_behaviors
from kubesim.controllers.job import (
    JobPodPlan,
    format_indexes,
    job_status,
    plan_job_pods,
    replaces_terminating_pods,
)
from kubesim.controllers.jobset_plan import JobSetStep, plan_jobset, replicated_job_statuses
from kubesim.controllers.kueue.admission import admit
from kubesim.controllers.kueue.flavors import assign_flavors
from kubesim.controllers.kueue.model import (
    ClusterQueueModel,
    FlavorQuota,
    PodSetRequest,
    QueuedWorkload,
    QueueState,
    ResourceGroup,
    Verdict,
)
from kubesim.controllers.kueue.parse import pod_requests
from kubesim.controllers.kueue.preemption import choose_victims
from kubesim.controllers.kueue.workload import workload_name
from kubesim.controllers.pod_status import pod_status_at
from tests.kubesim.controller_support import plain_jobset

NOW = "2026-01-02T03:04:05Z"
T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)

# --- quantities -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        pytest.param("8", Decimal(8), id="plain integer"),
        pytest.param("500m", Decimal("0.5"), id="millicores"),
        pytest.param("16Gi", Decimal(16 * 2**30), id="binary suffix"),
        pytest.param("1G", Decimal(10**9), id="decimal suffix"),
        pytest.param("1.5", Decimal("1.5"), id="decimal fraction"),
        pytest.param("1e3", Decimal(1000), id="exponent"),
        pytest.param("2E", Decimal(2 * 10**18), id="exa is a suffix, not an exponent"),
        pytest.param(4, Decimal(4), id="a JSON number"),
    ],
)
def test_parse_quantity(text: str | int, value: Decimal) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("8 cores", id="words"),
        pytest.param("1Gb", id="unknown suffix"),
    ],
)
def test_parse_quantity_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="invalid quantity"):
        parse_quantity(text)


@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        pytest.param(Decimal(4), "cpu", "4", id="whole cpus"),
        pytest.param(Decimal("0.25"), "cpu", "250m", id="fractional cpus in millis"),
        pytest.param(Decimal(16 * 2**30), "memory", "16Gi", id="memory in binary units"),
        pytest.param(
            Decimal(1536 * 2**20), "memory", "1536Mi", id="memory in the largest exact unit"
        ),
        pytest.param(Decimal(2048), "nvidia.com/gpu", "2048", id="counts stay plain"),
    ],
)
def test_format_quantity(value: Decimal, resource: str, text: str) -> None:
    assert format_quantity(value, resource) == text


def test_pod_requests_sum_containers_and_respect_init_peaks() -> None:
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            {"resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "4"}}}],
    }
    assert pod_requests(spec) == {
        "cpu": Decimal(4),
        "memory": Decimal(2**30),
        "nvidia.com/gpu": Decimal(1),
    }


def test_workload_name_is_kueue_shaped_and_bounded() -> None:
    assert workload_name("xmc-1-2", "uid-1").startswith("jobset-xmc-1-2-")
    assert len(workload_name("x" * 63, "uid-1")) <= 63
    assert workload_name("a", "uid-1") != workload_name("a", "uid-2")


# --- behaviours -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, ContainerBehavior(1.0, 3.0), id="no annotation runs the defaults"),
        pytest.param(
            {"kubesim.xmc/behavior": {"run_seconds": 30, "exit_code": 1}},
            ContainerBehavior(1.0, 30.0, 1),
            id="pod-wide run time and exit code",
        ),
        pytest.param(
            {
                "kubesim.xmc/behavior": {"run_seconds": 30},
                "kubesim.xmc/behavior.main": {"exit_code": 7},
            },
            ContainerBehavior(1.0, 30.0, 7),
            id="per-container keys override pod-wide ones",
        ),
        pytest.param(
            {"kubesim.xmc/behavior": {"crash": True}},
            ContainerBehavior(1.0, 0.0, 1),
            id="crash exits 1 at once",
        ),
        pytest.param(
            {"kubesim.xmc/behavior": {"crash": True, "exit_code": 137}},
            ContainerBehavior(1.0, 0.0, 137),
            id="crash keeps a given exit code",
        ),
        pytest.param(
            {"kubesim.xmc/behavior": {"image_pull_error": True}},
            ContainerBehavior(1.0, 3.0, waiting_reason="ErrImagePull"),
            id="image pull error",
        ),
        pytest.param(
            {"kubesim.xmc/behavior": {"config_error": True, "message": 'secret "s" not found'}},
            ContainerBehavior(
                1.0,
                3.0,
                waiting_reason="CreateContainerConfigError",
                message='secret "s" not found',
            ),
            id="config error with a message",
        ),
        pytest.param(
            {"kubesim.xmc/behavior": {"start_seconds": 200}},
            ContainerBehavior(200.0, 3.0),
            id="slow start",
        ),
        pytest.param(
            {"kubesim.xmc/behavior": {"run_seconds": None}},
            ContainerBehavior(1.0, None),
            id="runs forever",
        ),
    ],
)
def test_parse_behaviors_of_the_main_container(
    annotations: Mapping[str, Any], expected: ContainerBehavior
) -> None:
    raw = {k: json.dumps(v) for k, v in annotations.items()}
    assert parse_behaviors(raw, ["main"], start_seconds=1.0, run_seconds=3.0)["main"] == expected


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        pytest.param("{not json", "not JSON", id="not JSON"),
        pytest.param("[1]", "must be a JSON object", id="not an object"),
        pytest.param('{"exit_code": "1"}', "exit_code must be an integer", id="wrong type"),
        pytest.param('{"run_secs": 1}', "unknown keys", id="a typo"),
        pytest.param('{"run_seconds": -1}', "non-negative", id="negative time"),
    ],
)
def test_invalid_behavior_becomes_a_config_error(raw: str, fragment: str) -> None:
    behavior = parse_behaviors(
        {"kubesim.xmc/behavior": raw}, ["main"], start_seconds=1.0, run_seconds=3.0
    )["main"]
    assert behavior.waiting_reason == "CreateContainerConfigError"
    assert behavior.message is not None
    assert fragment in behavior.message


def test_init_containers_complete_at_once_unless_named() -> None:
    raw = {
        "kubesim.xmc/behavior": json.dumps({"exit_code": 1}),
        "kubesim.xmc/behavior.b": json.dumps({"run_seconds": 5}),
    }
    behaviors = parse_behaviors(raw, ["main"], ["a", "b"], start_seconds=1.0, run_seconds=3.0)
    assert behaviors["a"] == ContainerBehavior(0.0, 0.0)
    assert behaviors["b"] == ContainerBehavior(0.0, 5.0)
    assert behaviors["main"].exit_code == 1


# --- pod timeline ---------------------------------------------------------------------


def _pod(containers: Sequence[str] = ("main",), inits: Sequence[str] = ()) -> dict[str, Any]:
    return {
        "spec": {
            "containers": [{"name": c, "image": f"img/{c}"} for c in containers],
            "initContainers": [{"name": c, "image": f"img/{c}"} for c in inits],
        }
    }


def _states(status: Mapping[str, Any], key: str = "containerStatuses") -> list[str]:
    result = []
    for container in status.get(key) or []:
        ((state, detail),) = container["state"].items()
        result.append(f"{state}:{detail.get('reason', '')}" if state != "running" else state)
    return result


B = ContainerBehavior


@pytest.mark.parametrize(
    ("containers", "inits", "behaviors", "elapsed", "phase", "states", "next_change"),
    [
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 3)},
            0.0,
            "Pending",
            ["waiting:ContainerCreating"],
            1.0,
            id="just taken: creating",
        ),
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 3)},
            1.5,
            "Running",
            ["running"],
            4.0,
            id="running until it exits",
        ),
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 3)},
            4.0,
            "Succeeded",
            ["terminated:Completed"],
            None,
            id="exit 0 succeeds",
        ),
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 3, 2)},
            9.0,
            "Failed",
            ["terminated:Error"],
            None,
            id="non-zero exit fails",
        ),
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 0, 1)},
            1.0,
            "Failed",
            ["terminated:Error"],
            None,
            id="a crash never shows running",
        ),
        pytest.param(
            ["main"], [], {"main": B(1, None)}, 1e6, "Running", ["running"], None, id="runs forever"
        ),
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 3, waiting_reason="ErrImagePull")},
            2.0,
            "Pending",
            ["waiting:ErrImagePull"],
            11.0,
            id="image pull error first",
        ),
        pytest.param(
            ["main"],
            [],
            {"main": B(1, 3, waiting_reason="ErrImagePull")},
            11.0,
            "Pending",
            ["waiting:ImagePullBackOff"],
            None,
            id="then back-off for good",
        ),
        pytest.param(
            ["a", "b"],
            [],
            {"a": B(1, 10), "b": B(5, 10)},
            2.0,
            "Pending",
            ["running", "waiting:ContainerCreating"],
            5.0,
            id="a container not yet started keeps the pod pending",
        ),
        pytest.param(
            ["a", "b"],
            [],
            {"a": B(1, 1, 3), "b": B(1, 10)},
            3.0,
            "Running",
            ["terminated:Error", "running"],
            11.0,
            id="one failed container while another runs",
        ),
        pytest.param(
            ["main"],
            ["init"],
            {"init": B(0, 2), "main": B(1, 3)},
            1.0,
            "Pending",
            ["waiting:PodInitializing"],
            2.0,
            id="main waits for the init container",
        ),
        pytest.param(
            ["main"],
            ["init"],
            {"init": B(0, 2, 1), "main": B(1, 3)},
            2.0,
            "Failed",
            ["waiting:PodInitializing"],
            None,
            id="failed init container fails the pod",
        ),
    ],
)
def test_pod_status_at(
    containers: list[str],
    inits: list[str],
    behaviors: dict[str, ContainerBehavior],
    elapsed: float,
    phase: str,
    states: list[str],
    next_change: float | None,
) -> None:
    snapshot = pod_status_at(_pod(containers, inits), behaviors, started_at=T0, elapsed=elapsed)
    assert (snapshot.status["phase"], _states(snapshot.status), snapshot.next_change) == (
        phase,
        states,
        next_change,
    )


def test_pod_status_times_come_from_the_timeline() -> None:
    behaviors = {"main": B(1, 3)}
    running = pod_status_at(_pod(), behaviors, started_at=T0, elapsed=2.0).status
    again = pod_status_at(_pod(), behaviors, started_at=T0, elapsed=3.9).status
    assert running == again  # nothing changed between 1 s and 4 s: the write is a no-op
    ready = {c["type"]: c for c in running["conditions"]}["Ready"]
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-01-02T03:00:01Z")
    assert (
        running["containerStatuses"][0]["state"]["running"]["startedAt"] == "2026-01-02T03:00:01Z"
    )


# --- Job ------------------------------------------------------------------------------


def _job(
    *,
    parallelism: int = 1,
    backoff: int = 0,
    suspend: bool = False,
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "js-main-0",
            "namespace": "default",
            "uid": "job-uid",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": "main"},
        },
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "backoffLimit": backoff,
            "suspend": suspend,
        },
        "status": {"conditions": conditions or []},
    }


def _pods(*phases: str, ready: bool = True) -> list[dict[str, Any]]:
    return [
        {
            "metadata": {
                "name": f"p{i}",
                "labels": {"batch.kubernetes.io/job-completion-index": str(i)},
            },
            "status": {
                "phase": phase,
                "conditions": [
                    {"type": "Ready", "status": "True" if ready and phase == "Running" else "False"}
                ],
            },
        }
        for i, phase in enumerate(phases)
    ]


@pytest.mark.parametrize(
    ("job", "pods", "counts", "finished"),
    [
        pytest.param(
            _job(parallelism=2),
            _pods("Running", "Pending"),
            (2, 1, 0, 0),
            None,
            id="active and partly ready",
        ),
        pytest.param(
            _job(parallelism=2),
            _pods("Succeeded", "Succeeded"),
            (0, 0, 2, 0),
            "Complete",
            id="all indexes succeeded",
        ),
        pytest.param(
            _job(backoff=0),
            _pods("Failed"),
            (0, 0, 0, 1),
            "Failed",
            id="failure beyond the backoff limit",
        ),
        pytest.param(
            _job(backoff=1),
            _pods("Failed"),
            (0, 0, 0, 1),
            None,
            id="failure within the backoff limit",
        ),
    ],
)
def test_job_status(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    counts: tuple[int, int, int, int],
    finished: str | None,
) -> None:
    status = job_status(job, pods, NOW)
    assert (status["active"], status["ready"], status["succeeded"], status["failed"]) == counts
    done = [
        c["type"]
        for c in status.get("conditions", [])
        if c["status"] == "True" and c["type"] in ("Complete", "Failed")
    ]
    assert done == ([finished] if finished else [])


@pytest.mark.parametrize(
    ("job", "pods", "plan"),
    [
        pytest.param(
            _job(parallelism=3),
            [],
            JobPodPlan(create_indexes=(0, 1, 2)),
            id="a new job gets every index",
        ),
        pytest.param(
            _job(parallelism=2),
            _pods("Succeeded"),
            JobPodPlan(create_indexes=(1,)),
            id="only missing indexes",
        ),
        pytest.param(
            _job(backoff=1),
            _pods("Failed"),
            JobPodPlan(create_indexes=(0,)),
            id="a failed index is retried",
        ),
        pytest.param(
            _job(suspend=True),
            _pods("Running"),
            JobPodPlan(delete_pods=("p0",)),
            id="suspension deletes active pods",
        ),
        pytest.param(
            _job(conditions=[{"type": "Failed", "status": "True"}], parallelism=2),
            _pods("Failed", "Running"),
            JobPodPlan(delete_pods=("p1",)),
            id="a failed job stops its remaining pods",
        ),
    ],
)
def test_plan_job_pods(job: dict[str, Any], pods: list[dict[str, Any]], plan: JobPodPlan) -> None:
    assert plan_job_pods(job, pods, NOW) == plan


def _deleted(pod: dict[str, Any]) -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "deletionTimestamp": NOW}}


def _with_spec(job: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**job, "spec": {**job["spec"], **spec}}


_POD_FAILURE_POLICY = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "X"}]}]}


@pytest.mark.parametrize(
    ("pods", "counts"),
    [
        pytest.param(_pods("Running", "Running"), (2, 2, 0), id="running pods are active"),
        pytest.param(
            [_deleted(p) for p in _pods("Running", "Running")],
            (0, 0, 2),
            id="Terminating pods are neither active nor ready, but terminating",
        ),
        pytest.param(
            [_deleted(_pods("Running")[0]), _pods("Running", "Pending")[1]],
            (1, 0, 1),
            id="one Terminating, one starting",
        ),
        pytest.param(
            [_deleted(p) for p in _pods("Failed")],
            (0, 0, 0),
            id="a finished pod being deleted is not terminating",
        ),
    ],
)
def test_job_status_terminating(pods: list[dict[str, Any]], counts: tuple[int, int, int]) -> None:
    status = job_status(_job(parallelism=2), pods, NOW)
    assert (status["active"], status["ready"], status["terminating"]) == counts


@pytest.mark.parametrize(
    ("spec", "replaces"),
    [
        pytest.param({}, True, id="default TerminatingOrFailed"),
        pytest.param({"podReplacementPolicy": "Failed"}, False, id="Failed"),
        pytest.param({"podFailurePolicy": _POD_FAILURE_POLICY}, False, id="podFailurePolicy"),
        pytest.param(
            {
                "podFailurePolicy": _POD_FAILURE_POLICY,
                "podReplacementPolicy": "TerminatingOrFailed",
            },
            False,
            id="podFailurePolicy wins",
        ),
    ],
)
def test_replaces_terminating_pods(spec: dict[str, Any], replaces: bool) -> None:
    assert replaces_terminating_pods(spec) is replaces


@pytest.mark.parametrize(
    ("job", "pods", "plan"),
    [
        pytest.param(
            _job(),
            [_deleted(p) for p in _pods("Running")],
            JobPodPlan(create_indexes=(0,)),
            id="TerminatingOrFailed replaces a Terminating pod at once",
        ),
        pytest.param(
            _with_spec(_job(), podFailurePolicy=_POD_FAILURE_POLICY),
            [_deleted(p) for p in _pods("Running")],
            JobPodPlan(),
            id="Failed waits until the Terminating pod is gone",
        ),
        pytest.param(
            _with_spec(_job(), podReplacementPolicy="Failed"),
            [_deleted(p) for p in _pods("Failed")],
            JobPodPlan(create_indexes=(0,)),
            id="Failed replaces a failed pod being deleted",
        ),
        pytest.param(
            _job(suspend=True),
            [_deleted(p) for p in _pods("Running")],
            JobPodPlan(),
            id="a Terminating pod is not deleted again",
        ),
    ],
)
def test_plan_job_pods_with_terminating_pods(
    job: dict[str, Any], pods: list[dict[str, Any]], plan: JobPodPlan
) -> None:
    assert plan_job_pods(job, pods, NOW) == plan


def test_format_indexes() -> None:
    assert format_indexes([4, 0, 2, 3]) == "0,2-4"


# --- JobSet ---------------------------------------------------------------------------


def _jobset(
    rjobs: Sequence[tuple[str, int]] = (("main", 1),),
    *,
    suspend: bool = False,
    status: dict[str, Any] | None = None,
    success: dict[str, Any] | None = None,
    failure: dict[str, Any] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    jobset = plain_jobset().suspend(suspend).status(**(status or {}))
    for name, replicas in rjobs:
        jobset.replicated_job(name, replicas=replicas)
    if success:
        jobset.success_policy(success)
    if failure:
        jobset.failure_policy(failure)
    if deleting:
        jobset.deleting(NOW)
    return jobset.obj()


def _child(
    rjob: str, index: int, state: str = "active", *, attempt: int = 0, suspend: bool = False
) -> dict[str, Any]:
    """``state``: active (pod running, ready), pending, Complete or Failed."""
    conditions = [{"type": state, "status": "True"}] if state in ("Complete", "Failed") else []
    ready = 1 if state == "active" else 0
    active = 1 if state in ("active", "pending") else 0
    return {
        "metadata": {
            "name": f"js-{rjob}-{index}",
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "jobset.sigs.k8s.io/restart-attempt": str(attempt),
            },
        },
        "spec": {"parallelism": 1, "completions": 1, "suspend": suspend},
        "status": {
            "active": active,
            "ready": ready,
            "succeeded": 1 if state == "Complete" else 0,
            "conditions": conditions,
        },
    }


def _true_conditions(plan_status: Mapping[str, Any]) -> dict[str, str]:
    return {
        c["type"]: c["reason"] for c in plan_status.get("conditions") or [] if c["status"] == "True"
    }


@pytest.mark.parametrize(
    ("jobset", "jobs", "step", "conditions", "deleted", "created", "restarts"),
    [
        pytest.param(
            _jobset(suspend=True),
            [],
            JobSetStep.SUSPENDED,
            {"Suspended": "SuspendedJobs"},
            (),
            ("js-main-0",),
            0,
            id="a new suspended jobset creates suspended jobs",
        ),
        pytest.param(
            _jobset(),
            [_child("main", 0)],
            JobSetStep.RUNNING,
            {},
            (),
            (),
            0,
            id="running: nothing to do",
        ),
        pytest.param(
            _jobset(),
            [_child("main", 0, "Complete")],
            JobSetStep.COMPLETED,
            {"Completed": "AllJobsCompleted"},
            (),
            (),
            0,
            id="all jobs succeeded",
        ),
        pytest.param(
            _jobset(
                [("driver", 1), ("workers", 2)],
                success={"operator": "Any", "targetReplicatedJobs": ["driver"]},
            ),
            [_child("driver", 0, "Complete"), _child("workers", 0), _child("workers", 1)],
            JobSetStep.COMPLETED,
            {"Completed": "AllJobsCompleted"},
            ("js-workers-0", "js-workers-1"),
            (),
            0,
            id="any target succeeded completes and stops the rest",
        ),
        pytest.param(
            _jobset(
                [("driver", 1), ("workers", 2)],
                success={"operator": "All", "targetReplicatedJobs": ["workers"]},
            ),
            [
                _child("driver", 0, "Complete"),
                _child("workers", 0, "Complete"),
                _child("workers", 1),
            ],
            JobSetStep.RUNNING,
            {},
            (),
            (),
            0,
            id="all of the targets must succeed",
        ),
        pytest.param(
            _jobset(),
            [_child("main", 0, "Failed")],
            JobSetStep.FAILED,
            {"Failed": "FailedJobs"},
            (),
            (),
            0,
            id="no failure policy fails at once",
        ),
        pytest.param(
            _jobset(
                failure={"maxRestarts": 2}, status={"restarts": 1, "restartsCountTowardsMax": 1}
            ),
            [_child("main", 0, "Failed", attempt=1)],
            JobSetStep.RESTARTING,
            {"RestartingJobSet": "DefaultFailurePolicy"},
            ("js-main-0",),
            (),
            2,
            id="a failure with restarts left deletes the jobs, recreated once gone",
        ),
        pytest.param(
            _jobset(
                failure={"maxRestarts": 2}, status={"restarts": 2, "restartsCountTowardsMax": 2}
            ),
            [_child("main", 0, "Failed", attempt=2)],
            JobSetStep.FAILED,
            {"Failed": "ReachedMaxRestarts"},
            (),
            (),
            2,
            id="no restarts left fails",
        ),
        pytest.param(
            _jobset(failure={"maxRestarts": 0}),
            [_child("main", 0, "Failed")],
            JobSetStep.FAILED,
            {"Failed": "ReachedMaxRestarts"},
            (),
            (),
            0,
            id="a failure policy of maxRestarts 0 fails with ReachedMaxRestarts",
        ),
        pytest.param(
            _jobset(
                failure={"maxRestarts": 5, "rules": [{"name": "r", "action": "FailJobSet"}]},
            ),
            [_child("main", 0, "Failed")],
            JobSetStep.FAILED,
            {"Failed": "FailJobSetFailurePolicyAction"},
            (),
            (),
            0,
            id="a FailJobSet rule fails at once",
        ),
        pytest.param(
            _jobset(status={"restarts": 1}),
            [_child("main", 0, attempt=0)],
            JobSetStep.RUNNING,
            {},
            ("js-main-0",),
            (),
            1,
            id="a job of an older attempt is deleted; its name is held until it is gone",
        ),
        pytest.param(
            _jobset(status={"restarts": 1}),
            [],
            JobSetStep.RUNNING,
            {},
            (),
            ("js-main-0",),
            1,
            id="once the older attempt's job is gone it is recreated",
        ),
        pytest.param(
            _jobset(
                status={
                    "conditions": [
                        {"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}
                    ]
                }
            ),
            [_child("main", 0)],
            JobSetStep.FINISHED,
            {"Completed": "AllJobsCompleted"},
            ("js-main-0",),
            (),
            0,
            id="a finished jobset stops leftover jobs",
        ),
    ],
)
def test_plan_jobset(
    jobset: dict[str, Any],
    jobs: list[dict[str, Any]],
    step: JobSetStep,
    conditions: dict[str, str],
    deleted: tuple[str, ...],
    created: tuple[str, ...],
    restarts: int,
) -> None:
    plan = plan_jobset(jobset, jobs, NOW)
    assert plan.step == step
    assert _true_conditions(plan.status) == conditions
    assert plan.delete_jobs == deleted
    assert tuple(j["metadata"]["name"] for j in plan.create_jobs) == created
    assert plan.status["restarts"] == restarts


def test_plan_jobset_suspends_running_jobs_and_resumes_them() -> None:
    suspended = plan_jobset(_jobset(suspend=True), [_child("main", 0)], NOW)
    assert suspended.suspend_jobs == ("js-main-0",)
    was_suspended = {
        "conditions": [
            {
                "type": "Suspended",
                "status": "True",
                "reason": "SuspendedJobs",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ]
    }
    resumed = plan_jobset(
        _jobset(status=was_suspended), [_child("main", 0, "pending", suspend=True)], NOW
    )
    assert resumed.resume_jobs == ("js-main-0",)
    (condition,) = resumed.status["conditions"]
    assert (condition["status"], condition["reason"], condition["lastTransitionTime"]) == (
        "False",
        "ResumeJobs",
        NOW,
    )


def test_plan_jobset_waits_for_depends_on() -> None:
    jobset = _jobset([("leader", 1), ("workers", 1)])
    jobset["spec"]["replicatedJobs"][1]["dependsOn"] = [{"name": "leader", "status": "Ready"}]
    before = plan_jobset(jobset, [_child("leader", 0, "pending")], NOW)
    after = plan_jobset(jobset, [_child("leader", 0)], NOW)
    assert before.create_jobs == ()
    assert [j["metadata"]["name"] for j in after.create_jobs] == ["js-workers-0"]


def test_replicated_job_statuses_count_jobs() -> None:
    jobs = [
        _child("main", 0),
        _child("main", 1, "pending", suspend=True),
        _child("main", 2, "Complete"),
        _child("main", 3, "Failed"),
    ]
    assert replicated_job_statuses(_jobset([("main", 4)]), jobs) == [
        {"name": "main", "ready": 1, "succeeded": 1, "failed": 1, "active": 2, "suspended": 1}
    ]


# --- admission ------------------------------------------------------------------------

CQ = ClusterQueueModel(
    "cq",
    (
        ResourceGroup(
            frozenset({"cpu", "memory"}),
            (FlavorQuota("default-flavor", {"cpu": Decimal(4), "memory": Decimal(8 * 2**30)}),),
        ),
    ),
    preemption="LowerPriority",
)
SPOT_THEN_ON_DEMAND = ClusterQueueModel(
    "cq",
    (
        ResourceGroup(
            frozenset({"cpu"}),
            (
                FlavorQuota("spot", {"cpu": Decimal(1)}),
                FlavorQuota("on-demand", {"cpu": Decimal(4)}),
            ),
        ),
    ),
)
NO_FIT = "couldn't assign flavors to pod set main: "
STATE = QueueState({"cq": CQ}, {("default", "lq"): "cq", ("default", "dangling"): "ghost"})


def _wl(
    name: str,
    cpu: str = "1",
    *,
    priority: int = 0,
    queue: str = "lq",
    at: str = "2026-01-01T00:00:00Z",
    admitted: bool = False,
    seq: int = 0,
) -> QueuedWorkload:
    usage = {("default-flavor", "cpu"): parse_quantity(cpu)} if admitted else {}
    return QueuedWorkload(
        "default",
        name,
        f"uid-{name}",
        f"job-{name}",
        queue,
        priority,
        at,
        seq,
        (PodSetRequest("main", 1, {"cpu": parse_quantity(cpu)}),),
        admitted_to="cq" if admitted else None,
        usage=usage,
        admitted_at=at,
    )


@pytest.mark.parametrize(
    ("cq", "workload", "usage", "flavors", "message"),
    [
        pytest.param(CQ, _wl("a", "2"), {}, {"cpu": "default-flavor"}, "", id="fits in free quota"),
        pytest.param(
            CQ,
            _wl("a", "6"),
            {},
            None,
            f"{NO_FIT}insufficient quota for cpu in flavor default-flavor, previously "
            "considered podsets requests (0) + current podset request (6) > maximum capacity (4)",
            id="request above nominal quota",
        ),
        pytest.param(
            CQ,
            _wl("a", "1500m"),
            {("default-flavor", "cpu"): Decimal(3)},
            None,
            f"{NO_FIT}insufficient unused quota for cpu in flavor default-flavor, 500m more needed",
            id="not enough left after others",
        ),
        pytest.param(
            SPOT_THEN_ON_DEMAND,
            _wl("a", "2"),
            {},
            {"cpu": "on-demand"},
            "",
            id="next flavor when the first is full",
        ),
    ],
)
def test_assign_flavors(
    cq: ClusterQueueModel,
    workload: QueuedWorkload,
    usage: dict[tuple[str, str], Decimal],
    flavors: dict[str, str] | None,
    message: str,
) -> None:
    fit = assign_flavors(cq, workload, usage)
    assert (None if fit.assignments is None else dict(fit.assignments[0].flavors)) == flavors
    assert fit.message == message


def test_uncovered_resource_is_unavailable() -> None:
    workload = QueuedWorkload(
        "default",
        "g",
        "u",
        "j",
        "lq",
        0,
        "",
        0,
        (PodSetRequest("main", 1, {"nvidia.com/gpu": Decimal(1)}),),
    )
    assert (
        assign_flavors(CQ, workload, {}).message
        == f"{NO_FIT}resource nvidia.com/gpu unavailable in ClusterQueue"
    )


def _verdicts(decision: Any) -> list[tuple[str, str]]:
    return [(d.workload[1], str(d.verdict)) for d in decision.decisions]


@pytest.mark.parametrize(
    ("workloads", "verdicts"),
    [
        pytest.param(
            [_wl("a", "2"), _wl("b", "2")], [("a", "Admit"), ("b", "Admit")], id="both fit"
        ),
        pytest.param(
            [
                _wl("late", "3", at="2026-01-01T00:00:02Z"),
                _wl("early", "3", at="2026-01-01T00:00:01Z"),
            ],
            [("early", "Admit"), ("late", "Pending")],
            id="first in, first admitted",
        ),
        pytest.param(
            [
                _wl("early", "3", at="2026-01-01T00:00:01Z"),
                _wl("vip", "3", priority=900, at="2026-01-01T00:00:09Z"),
            ],
            [("vip", "Admit"), ("early", "Pending")],
            id="priority before arrival",
        ),
        pytest.param(
            [_wl("big", "3"), _wl("small", "1", seq=1), _wl("bigger", "3", seq=2)],
            [("big", "Admit"), ("small", "Admit"), ("bigger", "Pending")],
            id="best effort: a later small one may pass a blocked big one",
        ),
        pytest.param([_wl("x", queue="nope")], [("x", "Inadmissible")], id="missing local queue"),
        pytest.param(
            [_wl("y", queue="dangling")], [("y", "Inadmissible")], id="missing cluster queue"
        ),
        pytest.param(
            [_wl("low", "4", priority=100, admitted=True), _wl("high", "2", priority=900)],
            [("low", "Evict"), ("high", "Pending")],
            id="higher priority preempts and waits for the victim",
        ),
        pytest.param(
            [_wl("same", "4", priority=500, admitted=True), _wl("peer", "2", priority=500)],
            [("peer", "Pending")],
            id="equal priority never preempts",
        ),
    ],
)
def test_admit(workloads: list[QueuedWorkload], verdicts: list[tuple[str, str]]) -> None:
    assert _verdicts(admit(STATE, workloads)) == verdicts


def test_admit_reports_why_inadmissible() -> None:
    (decision,) = admit(STATE, [_wl("x", queue="nope")]).decisions
    assert (decision.verdict, decision.message) == (
        Verdict.INADMISSIBLE,
        "LocalQueue nope doesn't exist",
    )


def test_choose_victims_takes_the_fewest_lowest_newest() -> None:
    admitted = [
        _wl("old-low", "1", priority=100, admitted=True, at="2026-01-01T00:00:01Z"),
        _wl("new-low", "1", priority=100, admitted=True, at="2026-01-01T00:00:05Z"),
        _wl("mid", "2", priority=500, admitted=True, at="2026-01-01T00:00:02Z"),
    ]
    usage = {("default-flavor", "cpu"): Decimal(4)}
    victims = choose_victims(CQ, _wl("high", "1", priority=900), admitted, usage)
    assert [v.name for v in victims] == ["new-low"]
    victims = choose_victims(CQ, _wl("high", "3", priority=900), admitted, usage)
    assert sorted(v.name for v in victims) == ["mid", "new-low"]
    assert choose_victims(CQ, _wl("huge", "9", priority=900), admitted, usage) == ()
