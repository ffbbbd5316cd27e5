"""Table tests of the pure failure decisions: the Job controller's ``podFailurePolicy``
and replacement backoff (``job_failure``), and the JobSet's ``failurePolicy``
(``jobset_failure``, and how ``plan_jobset`` recreates the Jobs of a restart)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubesim.controllers.job import job_status, plan_job_pods
from kubesim.controllers.job_failure import (
    BackoffRecord,
    PodFailureMatch,
    backoff_record,
    backoff_seconds,
    match_pod_failure_policy,
    pod_finished_at,
    replacement_due,
)
from kubesim.controllers.jobset_failure import FailureDecision, decide_failure
from kubesim.controllers.jobset_plan import JobSetStep, plan_jobset
from tests.kubesim.controller_support import plain_jobset

T0 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)


def _at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pod(
    phase: str = "Failed",
    *,
    exit_code: int = 1,
    container: str = "worker",
    init_exit_code: int | None = None,
    conditions: list[dict[str, Any]] | None = None,
    finished: float = 0.0,
    name: str = "js-main-0-0-abcde",
    index: int = 0,
) -> dict[str, Any]:
    terminated = {"exitCode": exit_code, "finishedAt": _at(finished)}
    status: dict[str, Any] = {
        "phase": phase,
        "containerStatuses": [{"name": container, "state": {"terminated": terminated}}],
        "conditions": conditions or [],
    }
    if init_exit_code is not None:
        status["initContainerStatuses"] = [
            {"name": "init", "state": {"terminated": {"exitCode": init_exit_code}}}
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"batch.kubernetes.io/job-completion-index": str(index)},
        },
        "status": status,
    }


def _exit_rule(action: str, operator: str, *codes: int, **extra: Any) -> dict[str, Any]:
    return {"action": action, "onExitCodes": {"operator": operator, "values": list(codes), **extra}}


DISRUPTION = {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}
"""The rule XMC's Actuator puts on every Job (``services/actuator/manifest/jobset.py``)."""


# --- podFailurePolicy -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rules", "pod", "want"),
    [
        pytest.param(None, _pod(), PodFailureMatch(), id="no policy: counts"),
        pytest.param(
            [_exit_rule("FailJob", "In", 42)],
            _pod(exit_code=42),
            PodFailureMatch(
                "FailJob",
                fail_job_message="Container worker for pod default/js-main-0-0-abcde failed "
                "with exit code 42 matching FailJob rule at index 0",
            ),
            id="FailJob on an exit code",
        ),
        pytest.param(
            [_exit_rule("FailJob", "In", 42)], _pod(exit_code=1), PodFailureMatch(), id="no match"
        ),
        pytest.param(
            [_exit_rule("Ignore", "NotIn", 1, 2)],
            _pod(exit_code=3),
            PodFailureMatch("Ignore", counts=False),
            id="NotIn",
        ),
        pytest.param(
            [_exit_rule("Ignore", "NotIn", 1)],
            _pod(exit_code=0),
            PodFailureMatch(),
            id="exit code 0 never matches",
        ),
        pytest.param(
            [_exit_rule("Ignore", "In", 5, containerName="sidecar")],
            _pod(exit_code=5),
            PodFailureMatch(),
            id="another container's exit code",
        ),
        pytest.param(
            [_exit_rule("Count", "In", 7)],
            _pod(exit_code=0, init_exit_code=7),
            PodFailureMatch("Count"),
            id="init containers after the regular ones",
        ),
        pytest.param(
            [DISRUPTION],
            _pod(conditions=[{"type": "DisruptionTarget", "status": "True"}]),
            PodFailureMatch("Ignore", counts=False),
            id="XMC's DisruptionTarget rule ignores a disrupted pod (status defaults to True)",
        ),
        pytest.param(
            [DISRUPTION], _pod(), PodFailureMatch(), id="XMC's rule counts a plain failure"
        ),
        pytest.param(
            [{"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]}],
            _pod(conditions=[{"type": "ConfigIssue", "status": "True"}]),
            PodFailureMatch(
                "FailJob",
                fail_job_message="Pod default/js-main-0-0-abcde has condition ConfigIssue "
                "matching FailJob rule at index 0",
            ),
            id="FailJob on a pod condition",
        ),
        pytest.param(
            [_exit_rule("Ignore", "In", 1), _exit_rule("FailJob", "In", 1)],
            _pod(exit_code=1),
            PodFailureMatch("Ignore", counts=False),
            id="the first matching rule decides",
        ),
        pytest.param(
            [_exit_rule("FailIndex", "In", 1), _exit_rule("Count", "In", 1)],
            _pod(exit_code=1),
            PodFailureMatch("Count"),
            id="FailIndex (needs backoffLimitPerIndex) is skipped",
        ),
    ],
)
def test_match_pod_failure_policy(
    rules: list[dict[str, Any]] | None, pod: dict[str, Any], want: PodFailureMatch
) -> None:
    policy = None if rules is None else {"rules": rules}
    assert match_pod_failure_policy(policy, pod) == want


def _job(rules: list[dict[str, Any]] | None, backoff_limit: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"completions": 1, "parallelism": 1, "backoffLimit": backoff_limit}
    if rules is not None:
        spec["podFailurePolicy"] = {"rules": rules}
    return {"metadata": {"name": "js-main-0"}, "spec": spec, "status": {"startTime": _at(0)}}


def _failed(status: dict[str, Any]) -> tuple[str, str] | None:
    for item in status.get("conditions") or []:
        if item["type"] == "Failed" and item["status"] == "True":
            return item["reason"], item["message"]
    return None


@pytest.mark.parametrize(
    ("rules", "pods", "failed", "condition"),
    [
        pytest.param(
            None,
            [_pod()],
            1,
            ("BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            id="no policy: the failure counts",
        ),
        pytest.param(
            [_exit_rule("Ignore", "In", 1)], [_pod()], 0, None, id="Ignore spares backoffLimit"
        ),
        pytest.param(
            [_exit_rule("FailJob", "In", 1)],
            [_pod()],
            1,
            (
                "PodFailurePolicy",
                "Container worker for pod default/js-main-0-0-abcde failed with exit code 1 "
                "matching FailJob rule at index 0",
            ),
            id="FailJob comes before the backoff limit",
        ),
        pytest.param(
            [DISRUPTION],
            [_pod(conditions=[{"type": "DisruptionTarget", "status": "True"}])],
            0,
            None,
            id="a disrupted pod does not use up XMC's retry_limit",
        ),
    ],
)
def test_job_status_under_a_pod_failure_policy(
    rules: list[dict[str, Any]] | None,
    pods: list[dict[str, Any]],
    failed: int,
    condition: tuple[str, str] | None,
) -> None:
    status = job_status(_job(rules), pods, _at(5))
    assert status["failed"] == failed
    assert _failed(status) == condition


# --- replacement backoff ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("failures", "seconds"),
    [(0, 0), (1, 10), (2, 20), (3, 40), (6, 320), (7, 600), (30, 600)],
)
def test_backoff_doubles_from_10_seconds_capped_at_10_minutes(
    failures: int, seconds: float
) -> None:
    assert backoff_seconds(failures) == seconds


@pytest.mark.parametrize(
    ("pod", "finished"),
    [
        pytest.param(_pod(finished=7), _at(7), id="the containers' finishedAt"),
        pytest.param(
            {
                "metadata": {"creationTimestamp": _at(0)},
                "status": {
                    "conditions": [
                        {"type": "Ready", "status": "False", "lastTransitionTime": _at(4)}
                    ]
                },
            },
            _at(4),
            id="else the Ready=False transition",
        ),
        pytest.param(
            {
                "metadata": {
                    "creationTimestamp": _at(0),
                    "deletionTimestamp": _at(40),
                    "deletionGracePeriodSeconds": 30,
                },
                "status": {},
            },
            _at(10),
            id="else deletion minus grace",
        ),
        pytest.param(
            {"metadata": {"creationTimestamp": _at(2)}, "status": {}},
            _at(2),
            id="else creation",
        ),
    ],
)
def test_pod_finished_at(pod: dict[str, Any], finished: str) -> None:
    assert pod_finished_at(pod) == datetime.fromisoformat(finished)


@pytest.mark.parametrize(
    ("succeeded", "failed", "record"),
    [
        pytest.param([], [], BackoffRecord(), id="nothing failed"),
        pytest.param(
            [],
            [_pod(finished=3), _pod(finished=20)],
            BackoffRecord(2, datetime.fromisoformat(_at(20))),
            id="consecutive failures",
        ),
        pytest.param(
            [_pod("Succeeded", exit_code=0, finished=10)],
            [_pod(finished=3), _pod(finished=20)],
            BackoffRecord(1, datetime.fromisoformat(_at(20))),
            id="a success resets the count",
        ),
    ],
)
def test_backoff_record(
    succeeded: list[dict[str, Any]], failed: list[dict[str, Any]], record: BackoffRecord
) -> None:
    assert backoff_record(succeeded, failed) == record


def test_replacement_due() -> None:
    assert replacement_due(BackoffRecord()) is None
    last = datetime.fromisoformat(_at(20))
    assert replacement_due(BackoffRecord(3, last)) == last + timedelta(seconds=40)


@pytest.mark.parametrize(
    ("now", "created", "retry_at"),
    [
        pytest.param(_at(9), (), _at(15), id="within the backoff: nothing, retry at the end"),
        pytest.param(_at(15), (0,), None, id="after it: the replacement"),
    ],
)
def test_plan_job_pods_waits_out_the_backoff(
    now: str, created: tuple[int, ...], retry_at: str | None
) -> None:
    plan = plan_job_pods(_job(None, backoff_limit=3), [_pod(finished=5)], now)
    assert plan.create_indexes == created
    assert plan.retry_at == (None if retry_at is None else datetime.fromisoformat(retry_at))


# --- the JobSet's failurePolicy ---------------------------------------------------------


def _failed_job(
    rjob: str = "main", index: int = 0, *, reason: str = "BackoffLimitExceeded", at: float = 0
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"js-{rjob}-{index}",
            "labels": {
                "jobset.sigs.k8s.io/replicatedjob-name": rjob,
                "jobset.sigs.k8s.io/restart-attempt": "0",
            },
        },
        "status": {
            "conditions": [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": reason,
                    "message": "Job has reached the specified backoff limit",
                    "lastTransitionTime": _at(at),
                }
            ]
        },
    }


def _policy_jobset(policy: dict[str, Any] | None, **status: Any) -> dict[str, Any]:
    jobset = plain_jobset().replicated_job("main", replicas=2).status(**status)
    if policy is not None:
        jobset.failure_policy(policy)
    return jobset.obj()


RESTART = "applying RestartJobSet failure policy action"


@pytest.mark.parametrize(
    ("policy", "status", "jobs", "want"),
    [
        pytest.param(
            None,
            {},
            [_failed_job(index=1, at=5), _failed_job(index=0, at=9)],
            FailureDecision(
                False,
                "FailedJobs",
                "jobset failed due to one or more job failures (first failed job: js-main-1)",
            ),
            id="no policy fails, naming the first failed job",
        ),
        pytest.param(
            {"maxRestarts": 2},
            {"restartsCountTowardsMax": 1},
            [_failed_job()],
            FailureDecision(
                True,
                "DefaultFailurePolicy",
                f"{RESTART} (first failed job: js-main-0)",
                counts_towards_max=True,
            ),
            id="no rule: RestartJobSet",
        ),
        pytest.param(
            {"maxRestarts": 2},
            {"restarts": 5, "restartsCountTowardsMax": 2},
            [_failed_job()],
            FailureDecision(
                False,
                "ReachedMaxRestarts",
                "jobset failed due to reaching max number of restarts "
                "(first failed job: js-main-0)",
            ),
            id="restartsCountTowardsMax (not restarts) reaches maxRestarts",
        ),
        pytest.param(
            {
                "maxRestarts": 1,
                "rules": [
                    {
                        "name": "deadline",
                        "action": "FailJobSet",
                        "onJobFailureReasons": ["DeadlineExceeded"],
                    },
                    {"name": "any", "action": "RestartJobSetAndIgnoreMaxRestarts"},
                ],
            },
            {"restartsCountTowardsMax": 1},
            [_failed_job(reason="BackoffLimitExceeded")],
            FailureDecision(
                True,
                "FailurePolicy_any",
                "applying RestartJobSetAndIgnoreMaxRestarts failure policy action "
                "(first failed job: js-main-0)",
            ),
            id="the first applicable rule; IgnoreMaxRestarts does not count",
        ),
        pytest.param(
            {
                "rules": [
                    {"action": "FailJobSet", "onJobFailureMessagePatterns": ["backoff limit$"]}
                ]
            },
            {},
            [_failed_job()],
            FailureDecision(
                False,
                "FailJobSetFailurePolicyAction",
                "applying FailJobSet failure policy action (first failed job: js-main-0)",
            ),
            id="a message pattern",
        ),
        pytest.param(
            {
                "maxRestarts": 3,
                "rules": [{"action": "FailJobSet", "targetReplicatedJobs": ["driver"]}],
            },
            {},
            [_failed_job()],
            FailureDecision(
                True,
                "DefaultFailurePolicy",
                f"{RESTART} (first failed job: js-main-0)",
                counts_towards_max=True,
            ),
            id="a rule for another replicated job does not apply",
        ),
        pytest.param(
            {"maxRestarts": 3, "rules": [{"action": "RestartJob"}]},
            {},
            [_failed_job()],
            None,
            id="RestartJob is behind an alpha gate: refused",
        ),
    ],
)
def test_decide_failure(
    policy: dict[str, Any] | None,
    status: dict[str, Any],
    jobs: list[dict[str, Any]],
    want: FailureDecision | None,
) -> None:
    assert decide_failure(_policy_jobset(policy, **status), jobs) == want


# --- recreating the Jobs of a restart ---------------------------------------------------


def _restarted_jobset(strategy: str | None = None) -> dict[str, Any]:
    policy: dict[str, Any] = {"maxRestarts": 3}
    if strategy:
        policy["restartStrategy"] = strategy
    return (
        plain_jobset()
        .replicated_job("main", replicas=2)
        .failure_policy(policy)
        .restarts(1)
        .condition(
            "RestartingJobSet",
            "True",
            _at(0),
            reason="DefaultFailurePolicy",
            message=f"{RESTART} (first failed job: js-main-0)",
        )
        .obj()
    )


def _old_pod(job: str) -> dict[str, Any]:
    """A pod of attempt 0 whose Job is gone, still Terminating."""
    return {
        "metadata": {
            "name": f"{job}-0-abcde",
            "deletionTimestamp": _at(1),
            "labels": {
                "batch.kubernetes.io/job-name": job,
                "jobset.sigs.k8s.io/restart-attempt": "0",
            },
            "ownerReferences": [{"uid": f"{job}-old-uid", "controller": True}],
        },
    }


@pytest.mark.parametrize(
    ("strategy", "pods", "created"),
    [
        pytest.param(None, [], ("js-main-0", "js-main-1"), id="old jobs and pods gone"),
        pytest.param(
            None,
            [_old_pod("js-main-0")],
            ("js-main-1",),
            id="Recreate: each name waits for its own old pods",
        ),
        pytest.param(
            "BlockingRecreate",
            [_old_pod("js-main-0")],
            (),
            id="BlockingRecreate: every name waits for all old pods",
        ),
    ],
)
def test_restart_recreates_jobs_once_the_old_ones_are_gone(
    strategy: str | None, pods: list[dict[str, Any]], created: tuple[str, ...]
) -> None:
    plan = plan_jobset(_restarted_jobset(strategy), [], _at(5), pods)
    assert plan.step == JobSetStep.RUNNING
    assert tuple(j["metadata"]["name"] for j in plan.create_jobs) == created
    assert all(
        j["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
        for j in plan.create_jobs
    )


def test_restarting_turns_false_once_all_jobs_are_ready() -> None:
    ready = [
        {
            "metadata": {
                "name": f"js-main-{i}",
                "uid": f"u{i}",
                "labels": {
                    "jobset.sigs.k8s.io/replicatedjob-name": "main",
                    "jobset.sigs.k8s.io/restart-attempt": "1",
                },
            },
            "spec": {"parallelism": 1, "completions": 1},
            "status": {"active": 1, "ready": 1},
        }
        for i in range(2)
    ]
    plan = plan_jobset(_restarted_jobset(), ready, _at(9))
    (restarting,) = [c for c in plan.status["conditions"] if c["type"] == "RestartingJobSet"]
    assert (restarting["status"], restarting["reason"], restarting["message"]) == (
        "False",
        "JobsReady",
        "all jobs are ready",
    )
    assert restarting["lastTransitionTime"] == _at(9)
