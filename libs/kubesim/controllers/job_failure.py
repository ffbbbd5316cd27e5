"""The batch/v1 Job controller's handling of failed pods (pure): which failures a
``podFailurePolicy`` counts, ignores or turns into a failed Job, and how long the
controller waits before it replaces a failed pod.

Behaviour read from kubernetes/kubernetes ``pkg/controller/job/pod_failure_policy.go``
(``matchPodFailurePolicy``: the first matching rule decides; ``onExitCodes`` looks at
terminated containers, then init containers, with a non-zero exit code; the ``FailJob``
messages) and ``backoff_utils.go`` (``newBackoffRecord``, ``getFinishedTime``,
``getRemainingTimeForFailuresCount``), with the constants of ``job_controller.go``
(``DefaultJobPodFailureBackOff`` 10 s, ``MaxJobPodFailureBackOff`` 10 min). kubesim keeps
every finished pod, so the backoff record upstream keeps in memory is recomputed from
the pods on each pass.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

DEFAULT_POD_FAILURE_BACKOFF = 10.0
"""Seconds before the first replacement of a failed pod (doubling per failure)."""
MAX_POD_FAILURE_BACKOFF = 600.0
"""Cap on that wait: ``MaxJobPodFailureBackOff`` is 10 minutes in the code (the
Kubernetes docs say six)."""

FAIL_JOB = "FailJob"
IGNORE = "Ignore"
COUNT = "Count"


@dataclass(frozen=True)
class PodFailureMatch:
    """How the Job's pod failure policy treats one failed pod."""

    action: str | None = None
    """The matching rule's action; None: no rule matched (the failure counts)."""
    counts: bool = True
    """Counts against ``backoffLimit`` (false only for ``Ignore``)."""
    fail_job_message: str | None = None
    """Set for ``FailJob``: the Job's ``Failed`` message (reason ``PodFailurePolicy``)."""


NO_MATCH = PodFailureMatch()


def _status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return pod.get("status") or {}


def _terminated(container: Mapping[str, Any]) -> Mapping[str, Any] | None:
    found = (container.get("state") or {}).get("terminated")
    return found if isinstance(found, Mapping) else None


def _exit_code_matches(code: int, requirement: Mapping[str, Any]) -> bool:
    values = {int(v) for v in requirement.get("values") or []}
    operator = requirement.get("operator")
    if operator == "In":
        return code in values
    if operator == "NotIn":
        return code not in values
    return False


def matching_container(
    pod: Mapping[str, Any], requirement: Mapping[str, Any]
) -> tuple[str, int] | None:
    """(name, exit code) of the first terminated container — regular ones first, then
    init containers — that ``onExitCodes`` matches; a zero exit code never matches."""
    wanted = requirement.get("containerName")
    status = _status(pod)
    for key in ("containerStatuses", "initContainerStatuses"):
        for container in status.get(key) or []:
            terminated = _terminated(container)
            if terminated is None or (wanted and container.get("name") != wanted):
                continue
            code = int(terminated.get("exitCode") or 0)
            if code != 0 and _exit_code_matches(code, requirement):
                return str(container.get("name", "")), code
    return None


def matching_condition(pod: Mapping[str, Any], patterns: Sequence[Mapping[str, Any]]) -> str | None:
    """The type of the first pod condition an ``onPodConditions`` pattern matches (the
    API server defaults a pattern's ``status`` to ``True``)."""
    for item in _status(pod).get("conditions") or []:
        for pattern in patterns:
            if item.get("type") == pattern.get("type") and item.get("status") == pattern.get(
                "status", "True"
            ):
                return str(item.get("type"))
    return None


def match_pod_failure_policy(
    policy: Mapping[str, Any] | None, pod: Mapping[str, Any]
) -> PodFailureMatch:
    """The first rule of ``policy`` that matches the failed ``pod`` decides; no policy or
    no match: the failure counts."""
    if not policy:
        return NO_MATCH
    meta = pod.get("metadata") or {}
    where = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
    for index, rule in enumerate(policy.get("rules") or []):
        action = rule.get("action")
        if rule.get("onExitCodes") is not None:
            container = matching_container(pod, rule["onExitCodes"])
            if container is None:
                continue
            name, code = container
            message = (
                f"Container {name} for pod {where} failed with exit code {code} "
                f"matching {action} rule at index {index}"
            )
        elif rule.get("onPodConditions") is not None:
            condition_type = matching_condition(pod, rule["onPodConditions"])
            if condition_type is None:
                continue
            message = (
                f"Pod {where} has condition {condition_type} "
                f"matching {action} rule at index {index}"
            )
        else:
            continue
        if action == IGNORE:
            return PodFailureMatch(IGNORE, counts=False)
        if action == COUNT:
            return PodFailureMatch(COUNT)
        if action == FAIL_JOB:
            return PodFailureMatch(FAIL_JOB, fail_job_message=message)
        # FailIndex needs backoffLimitPerIndex, which kubesim does not emulate: the
        # rule is skipped here as upstream skips an action it does not know.
    return NO_MATCH


def fail_job_message(
    policy: Mapping[str, Any] | None, failed_pods: Iterable[Mapping[str, Any]]
) -> str | None:
    """The ``PodFailurePolicy`` message of the first failed pod a ``FailJob`` rule
    matches (upstream's ``getFailJobMessage``); None when no rule fails the Job."""
    if not policy:
        return None
    for pod in failed_pods:
        message = match_pod_failure_policy(policy, pod).fail_job_message
        if message is not None:
            return message
    return None


# --- replacement backoff ---------------------------------------------------------------


def _parse(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def pod_finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When a finished pod finished, as upstream's ``getFinishedTime`` estimates it: the
    last container's ``finishedAt`` (when all have one), else the ``Ready=False``
    transition, else ``deletionTimestamp`` minus the grace, else its creation."""
    status = _status(pod)
    containers = status.get("containerStatuses") or []
    finished = [_parse((_terminated(c) or {}).get("finishedAt")) for c in containers]
    if containers and all(f is not None for f in finished):
        return max(f for f in finished if f is not None)
    for item in status.get("conditions") or []:
        moment = _parse(item.get("lastTransitionTime"))
        if item.get("type") == "Ready" and item.get("status") == "False" and moment is not None:
            return moment
    meta = pod.get("metadata") or {}
    if (deleted := _parse(meta.get("deletionTimestamp"))) is not None:
        return deleted - timedelta(seconds=float(meta.get("deletionGracePeriodSeconds") or 0))
    return _parse(meta.get("creationTimestamp"))


@dataclass(frozen=True)
class BackoffRecord:
    failures_after_last_success: int = 0
    last_failure: datetime | None = None


def backoff_record(
    succeeded: Iterable[Mapping[str, Any]], failed: Iterable[Mapping[str, Any]]
) -> BackoffRecord:
    """Consecutive failures since the last success, and the last failure's time. Every
    failure counts, ignored ones too: the policy spares the ``backoffLimit``, not the
    wait (upstream's ``newBackoffRecord`` sees all new failed pods)."""
    last_success = max((t for t in map(pod_finished_at, succeeded) if t is not None), default=None)
    failures = sorted(t for t in map(pod_finished_at, failed) if t is not None)
    if last_success is not None:
        failures = [t for t in failures if t > last_success]
    return BackoffRecord(len(failures), failures[-1] if failures else None)


def backoff_seconds(failures: int) -> float:
    """10 s for the first failure, doubling for each further one, capped at 10 min."""
    if failures <= 0:
        return 0.0
    delay = DEFAULT_POD_FAILURE_BACKOFF
    for _ in range(1, failures):
        delay *= 2
        if delay >= MAX_POD_FAILURE_BACKOFF:
            return MAX_POD_FAILURE_BACKOFF
    return delay


def replacement_due(record: BackoffRecord) -> datetime | None:
    """When the Job controller may create pods again; None: at once."""
    if record.failures_after_last_success == 0 or record.last_failure is None:
        return None
    return record.last_failure + timedelta(
        seconds=backoff_seconds(record.failures_after_last_success)
    )
