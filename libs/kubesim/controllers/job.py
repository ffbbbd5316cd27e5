"""The slice of the batch/v1 Job controller the JobSet simulator runs — pure: a Job's
status from its pods (``job_status``) and which pods to create or delete
(``plan_job_pods``), the pods themselves (``build_pod``) and its deadline
(``active_deadline``). ``jobset.py`` explains the semantics; ``job_failure.py`` holds the
pod failure policy and the replacement backoff.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from .conditions import annotations_of, condition_true, controller_ref, labels_of, set_condition
from .job_failure import backoff_record, fail_job_message, match_pod_failure_policy, replacement_due

Obj = dict[str, Any]

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
NODE_NAME = "kubesim-node"
DEFAULT_BACKOFF_LIMIT = 6
"""batch/v1 defaults ``spec.backoffLimit`` to 6."""

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


def job_shape(job_spec: Mapping[str, Any]) -> tuple[int, int]:
    """(completions, parallelism) with batch/v1 defaulting (each defaults to the other, then 1)."""
    parallelism = job_spec.get("parallelism")
    completions = job_spec.get("completions")
    parallelism = 1 if parallelism is None else int(parallelism)
    completions = parallelism if completions is None else int(completions)
    return completions, parallelism


def pods_per_job(job_spec: Mapping[str, Any]) -> int:
    """Pods a Job runs at once: min(parallelism, completions) — what Kueue counts."""
    completions, parallelism = job_shape(job_spec)
    return min(completions, parallelism)


def job_finished(job: Mapping[str, Any]) -> str | None:
    """ "Complete", "Failed" or None."""
    for type_ in ("Complete", "Failed"):
        if condition_true(job, type_):
            return type_
    return None


def _pod_index(pod: Mapping[str, Any]) -> int | None:
    value = labels_of(pod).get(COMPLETION_INDEX) or annotations_of(pod).get(COMPLETION_INDEX)
    return int(value) if value is not None and value.isdigit() else None


def _phase(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _terminating(pod: Mapping[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def _live(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [p for p in pods if not _terminating(p)]


def _unfinished(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Pods not yet Succeeded or Failed, Terminating ones included (they still run)."""
    return [p for p in pods if _phase(p) not in _TERMINAL_PHASES]


def _active(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """batch/v1's active pods: unfinished and not Terminating."""
    return _live(_unfinished(pods))


def _terminating_pods(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """batch/v1's terminating pods: unfinished, with a ``deletionTimestamp``."""
    return [p for p in _unfinished(pods) if _terminating(p)]


def replaces_terminating_pods(job_spec: Mapping[str, Any]) -> bool:
    """``podReplacementPolicy: TerminatingOrFailed``: a Terminating pod is replaced at once.
    It defaults to ``Failed`` (replace only once the pod is gone or failed) when the Job
    has a ``podFailurePolicy``, which then wins over an explicit ``TerminatingOrFailed``."""
    if job_spec.get("podFailurePolicy") is not None:
        return False
    return bool(job_spec.get("podReplacementPolicy", "TerminatingOrFailed") != "Failed")


def format_indexes(indexes: Iterable[int]) -> str:
    """batch/v1 ``completedIndexes`` notation: ``0,2-4``."""
    ranges: list[list[int]] = []
    for index in sorted(set(indexes)):
        if ranges and index == ranges[-1][1] + 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def job_status(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: str) -> Obj:
    """The Job's status from its pods; a finished Job keeps its conditions."""
    status: Obj = copy.deepcopy(dict(job.get("status") or {}))
    spec = job.get("spec") or {}
    completions, _ = job_shape(spec)
    backoff_limit = spec.get("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    live = _live(pods)
    active = _active(pods)
    succeeded = [p for p in live if _phase(p) == "Succeeded"]
    policy = spec.get("podFailurePolicy")
    failed_pods = [p for p in live if _phase(p) == "Failed"]
    # An ``Ignore`` rule keeps a failure out of ``failed`` and so off the backoff limit.
    failed = sum(1 for p in failed_pods if match_pod_failure_policy(policy, p).counts)
    done = {i for p in succeeded if (i := _pod_index(p)) is not None}
    status.update(
        active=len(active),
        ready=sum(1 for p in active if condition_true(p, "Ready")),
        terminating=len(_terminating_pods(pods)),
        succeeded=len(succeeded),
        failed=failed,
    )
    if spec.get("completionMode", "Indexed") == "Indexed" and done:
        status["completedIndexes"] = format_indexes(done)
    if job_finished(job):
        return status
    conditions = status.get("conditions") or []
    if _resumed(conditions, spec):
        # Upstream restarts the activeDeadlineSeconds clock on every resume: the deadline
        # counts time continuously active, never time spent suspended in a queue.
        status["startTime"] = now
    if (policy_message := fail_job_message(policy, failed_pods)) is not None:
        conditions = set_condition(
            conditions, "Failed", True, "PodFailurePolicy", policy_message, now
        )
    elif failed > backoff_limit:
        conditions = set_condition(
            conditions,
            "Failed",
            True,
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
            now,
        )
    elif past_active_deadline(spec, status, now):
        conditions = set_condition(
            conditions,
            "Failed",
            True,
            "DeadlineExceeded",
            "Job was active longer than specified deadline",
            now,
        )
    elif len(done) >= completions:
        conditions = set_condition(
            conditions,
            "Complete",
            True,
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        )
        status["completionTime"] = now
    elif spec.get("suspend"):
        conditions = set_condition(
            conditions, "Suspended", True, "JobSuspended", "Job suspended", now
        )
    elif any(c.get("type") == "Suspended" for c in conditions):
        conditions = set_condition(conditions, "Suspended", False, "JobResumed", "Job resumed", now)
    if not spec.get("suspend") and "startTime" not in status:
        status["startTime"] = now
    if conditions:
        status["conditions"] = conditions
    return status


def _resumed(conditions: Sequence[Mapping[str, Any]], spec: Mapping[str, Any]) -> bool:
    """The Job was suspended and its spec no longer is: this pass resumes it."""
    return not spec.get("suspend") and any(
        c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions
    )


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def active_deadline(job: Mapping[str, Any]) -> datetime | None:
    """When an unfinished, running Job runs out of ``activeDeadlineSeconds`` (from its
    ``startTime``); None when it has no deadline, has not started, is suspended or done."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    deadline = _seconds(spec.get("activeDeadlineSeconds"))
    start = status.get("startTime")
    if deadline is None or not start or spec.get("suspend") or job_finished(job):
        return None
    return datetime.fromisoformat(start) + timedelta(seconds=deadline)


def past_active_deadline(spec: Mapping[str, Any], status: Mapping[str, Any], now: str) -> bool:
    """batch/v1's ``pastActiveDeadline``: running at least ``activeDeadlineSeconds`` since
    ``startTime``; never while suspended."""
    due = active_deadline({"spec": spec, "status": status})
    return due is not None and datetime.fromisoformat(now) >= due


@dataclass(frozen=True)
class JobPodPlan:
    create_indexes: tuple[int, ...] = ()
    delete_pods: tuple[str, ...] = ()
    retry_at: datetime | None = None
    """Pods are missing but the failure backoff holds them back until then."""


def plan_job_pods(
    job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], now: str
) -> JobPodPlan:
    """Pods to create (missing completion indexes, up to parallelism) or delete. A
    Terminating pod is not deleted again; it keeps its index (and its place within
    parallelism) until it is gone only when the Job does not replace Terminating pods
    (``replaces_terminating_pods``). After failures, no pod is created before the
    backoff (10 s, doubling per consecutive failure) has passed since the last one."""
    spec = job.get("spec") or {}
    active = _active(pods)
    if job_finished(job) or spec.get("suspend"):
        return JobPodPlan(delete_pods=tuple(p["metadata"]["name"] for p in active))
    if not replaces_terminating_pods(spec):
        active = _unfinished(pods)
    completions, parallelism = job_shape(spec)
    done = {_pod_index(p) for p in _live(pods) if _phase(p) == "Succeeded"}
    running = {_pod_index(p) for p in active}
    budget = parallelism - len(active)
    missing = [i for i in range(completions) if i not in done and i not in running]
    create = tuple(missing[: max(budget, 0)])
    if create:
        live = _live(pods)
        due = replacement_due(
            backoff_record(
                (p for p in live if _phase(p) == "Succeeded"),
                (p for p in live if _phase(p) == "Failed"),
            )
        )
        if due is not None and datetime.fromisoformat(now) < due:
            return JobPodPlan(retry_at=due)
    return JobPodPlan(create_indexes=create)


def build_pod(
    job: Mapping[str, Any], index: int, suffix: str, *, finalizers: Sequence[str] = ()
) -> Obj:
    """An Indexed Job's pod ``{job}-{index}-{suffix}``, bound to the simulated node."""
    name = job["metadata"]["name"]
    uid = job["metadata"]["uid"]
    template = copy.deepcopy((job.get("spec") or {}).get("template") or {})
    meta = template.get("metadata") or {}
    jobset_labels = {k: v for k, v in labels_of(job).items() if k.startswith("jobset.sigs.k8s.io/")}
    labels = {
        **(meta.get("labels") or {}),
        **jobset_labels,
        JOB_NAME_LABEL: name,
        "job-name": name,
        CONTROLLER_UID_LABEL: uid,
        "controller-uid": uid,
        COMPLETION_INDEX: str(index),
    }
    annotations = {**(meta.get("annotations") or {}), COMPLETION_INDEX: str(index)}
    spec = template.get("spec") or {}
    spec["nodeName"] = NODE_NAME
    spec.setdefault("hostname", f"{name}-{index}")
    metadata: Obj = {
        "name": f"{name}-{index}-{suffix}",
        "namespace": job["metadata"]["namespace"],
        "labels": labels,
        "annotations": annotations,
        "ownerReferences": [controller_ref(job)],
    }
    if finalizers:
        metadata["finalizers"] = list(finalizers)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
