"""The JobSet controller's failure policy (pure): what a JobSet does once one of its
current Jobs has failed — fail, or restart every Job (``status.restarts`` + 1).

Behaviour read from kubernetes-sigs/jobset at v0.13.0-devel-43-g08dfbdf (main,
2026-08-18), ``pkg/controllers/failure_policy.go`` (``executeFailurePolicy``,
``findFirstFailedPolicyRuleAndJob``, ``ruleIsApplicable``, the action appliers,
``findFirstFailedJob``, ``messageWithFirstFailedJob``) and ``pkg/constants/constants.go``
(reasons and messages): no ``failurePolicy`` fails the JobSet (``FailedJobs``); otherwise
the first rule that matches a failed Job decides, and without a matching rule the action
is ``RestartJobSet``, which fails the JobSet with ``ReachedMaxRestarts`` once
``restartsCountTowardsMax`` has reached ``maxRestarts`` (also when that is 0). The
``RestartJob`` actions sit behind an alpha feature gate that is off by default: upstream
refuses them (an error, retried), and so does kubesim (no decision).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"

FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
REACHED_MAX_RESTARTS = (
    "ReachedMaxRestarts",
    "jobset failed due to reaching max number of restarts",
)
FAIL_JOBSET_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_MESSAGES = {
    "RestartJobSet": "applying RestartJobSet failure policy action",
    "RestartJobSetAndIgnoreMaxRestarts": (
        "applying RestartJobSetAndIgnoreMaxRestarts failure policy action"
    ),
}
RESTARTING = "RestartingJobSet"
"""The condition type of a JobSet restart (``jobset.JobSetRestarting``)."""
DEFAULT_RULE_REASON = "DefaultFailurePolicy"


@dataclass(frozen=True)
class FailureDecision:
    restart: bool
    """True: restart all Jobs; False: the JobSet fails."""
    reason: str
    """``Failed``'s reason, or ``RestartingJobSet``'s."""
    message: str
    counts_towards_max: bool = False


def _failed_condition(job: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for item in (job.get("status") or {}).get("conditions") or []:
        if item.get("type") == "Failed" and item.get("status") == "True":
            return item  # type: ignore[no-any-return]
    return None


def _failed_at(job: Mapping[str, Any]) -> str:
    return str((_failed_condition(job) or {}).get("lastTransitionTime") or "")


def _earliest(jobs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The Job that failed first; the first in list order on a tie (a strict ``Before``)."""
    failed = [j for j in jobs if _failed_condition(j) is not None]
    return min(failed, key=_failed_at) if failed else None


def first_failed_job(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The Job whose ``Failed`` condition is oldest (the first in list order on a tie),
    which upstream names in the JobSet's failure message; "" when none has failed."""
    first = _earliest(jobs)
    return str(first["metadata"]["name"]) if first is not None else ""


def with_first_failed_job(message: str, job_name: str) -> str:
    return f"{message} (first failed job: {job_name})"


def _any_pattern_matches(patterns: Sequence[str], message: str) -> bool:
    for pattern in patterns:
        try:
            if re.search(pattern, message):
                return True
        except re.error:
            continue  # upstream logs an invalid pattern and tries the next
    return False


def rule_applies(rule: Mapping[str, Any], job: Mapping[str, Any]) -> bool:
    """Upstream's ``ruleIsApplicable``: the Job's failure reason, message and replicated
    job each pass the rule's (empty means any) filter."""
    failed = _failed_condition(job) or {}
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and failed.get("reason") not in reasons:
        return False
    patterns = rule.get("onJobFailureMessagePatterns") or []
    if patterns and not _any_pattern_matches(patterns, str(failed.get("message") or "")):
        return False
    parent = ((job.get("metadata") or {}).get("labels") or {}).get(REPLICATED_JOB_LABEL)
    if not parent:
        return False
    targets = rule.get("targetReplicatedJobs") or []
    return not targets or parent in targets


def matching_rule(
    rules: Sequence[Mapping[str, Any]], failed_jobs: Sequence[Mapping[str, Any]]
) -> tuple[int, Mapping[str, Any], Mapping[str, Any]] | None:
    """(index, rule, the earliest failed Job it matches) of the first rule that matches
    any failed Job."""
    for index, rule in enumerate(rules):
        job = _earliest([j for j in failed_jobs if rule_applies(rule, j)])
        if job is not None:
            return index, rule, job
    return None


def decide_failure(
    jobset: Mapping[str, Any], failed_jobs: Sequence[Mapping[str, Any]]
) -> FailureDecision | None:
    """What the JobSet does now that ``failed_jobs`` (current attempt) have failed; None
    when upstream would refuse the action (a gated ``RestartJob``)."""
    spec = jobset.get("spec") or {}
    policy = spec.get("failurePolicy")
    if policy is None:
        reason, message = FAILED_JOBS
        return FailureDecision(
            False, reason, with_first_failed_job(message, first_failed_job(failed_jobs))
        )
    found = matching_rule(policy.get("rules") or [], failed_jobs)
    if found is None:
        action, rule_reason = "RestartJobSet", DEFAULT_RULE_REASON
        job_name = first_failed_job(failed_jobs)
    else:
        index, rule, job = found
        action = str(rule.get("action") or "")
        rule_reason = f"FailurePolicy_{rule.get('name') or f'failurePolicyRule{index}'}"
        job_name = str(job["metadata"]["name"])
    if action == "FailJobSet":
        reason, message = FAIL_JOBSET_ACTION
        return FailureDecision(False, reason, with_first_failed_job(message, job_name))
    if action not in RESTART_MESSAGES:
        return None
    counts = action == "RestartJobSet"
    status = jobset.get("status") or {}
    if counts and int(status.get("restartsCountTowardsMax") or 0) >= int(
        policy.get("maxRestarts") or 0
    ):
        reason, message = REACHED_MAX_RESTARTS
        return FailureDecision(False, reason, with_first_failed_job(message, job_name))
    message = with_first_failed_job(RESTART_MESSAGES[action], job_name)
    return FailureDecision(True, rule_reason, message, counts_towards_max=counts)
