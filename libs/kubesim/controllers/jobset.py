"""A simulated JobSet controller (``jobset.x-k8s.io/v1alpha2``), together with the slice
of the batch/v1 Job controller it needs (a Job's pods and status).

One reconcile pass per JobSet, level-triggered: list its Jobs and Pods, then
1. per Job, ``job_status`` recomputes the Job's status (``Failed`` with upstream's
   ``PodFailurePolicy``, then ``BackoffLimitExceeded`` counting the failures the
   ``podFailurePolicy`` does not ignore, then ``DeadlineExceeded`` past
   ``activeDeadlineSeconds``) and ``plan_job_pods`` says which pods to create (while not
   suspended, and not before the failure backoff has passed) or delete (suspended or
   finished); see ``job_failure.py``;
2. ``plan_jobset`` decides the JobSet's status and which Jobs to create, delete, suspend
   or resume: failure policy (``jobset_failure.py``: fail, or restart all Jobs, each
   recreated once its old Job and pods are gone), success policy (``All``/``Any`` of
   ``targetReplicatedJobs``), suspend/resume (Kueue's lever) and ``dependsOn`` (a
   replicated job's Jobs are created once its dependency is Ready or Complete).
The shell applies the plan; the writes it makes come back as events and trigger the next
pass, which converges because every write of an unchanged object is a no-op. Nothing
happens at a Job's deadline or when its backoff ends, so the shell also wakes itself then
(upstream's ``queue.AddAfter``).

Shapes follow upstream: child Job ``{jobset}-{rjob}-{index}`` with the
``jobset.sigs.k8s.io/*`` labels, pods ``{job}-{index}-{random5}`` of an Indexed Job, the
``Completed``/``Failed``/``Suspended`` conditions with upstream reasons and messages (the
``Failed`` message names the first failed Job), and
``status.replicatedJobsStatus`` counting Jobs (not pods). A JobSet being deleted (held by
a foreign finalizer such as XMC's) is not reconciled at all, as upstream's ``Reconcile``
returns early for it: its status stays as it was and its Jobs keep running (their Job
controller part still runs); once the last finalizer goes, garbage collection deletes the
Jobs and so, gracefully, their pods. Its finalizers are never touched.

Pods carry the kubelet's finalizer (when the kubelet simulator runs), so a deleted pod stays
Terminating for its grace period (see ``kubelet.py``). As in batch/v1, a Terminating pod is
not ``active`` (nor ``ready``) but counted in ``terminating``, so a suspended JobSet's Jobs
stop being active at once. Whether it still holds its completion index and its place within
``parallelism`` follows ``podReplacementPolicy``: it does under ``Failed`` (the default
when the Job has a ``podFailurePolicy``), not under ``TerminatingOrFailed``, where its
replacement is created at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import enum
import hashlib
import logging
import random
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubesim.clock import SimClock
from kubesim.controllers.mutate import set_status, set_suspend
from kubesim.errors import ApiError
from kubesim.resources import JOB, JOBSET, POD, Resource
from kubesim.selectors import Requirement
from kubesim.store import Event, ObjectStore, rfc3339

from .job_failure import (
    backoff_record,
    fail_job_message,
    match_pod_failure_policy,
    replacement_due,
)
from .jobset_failure import RESTARTING, decide_failure
from .kubelet import KUBELET_FINALIZER

log = logging.getLogger(__name__)

Obj = dict[str, Any]

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
NODE_NAME = "kubesim-node"
DEFAULT_BACKOFF_LIMIT = 6
"""batch/v1 defaults ``spec.backoffLimit`` to 6."""

_POD_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


# --- conditions and references (shared with the Kueue simulator) ---------------------


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    for item in (obj.get("status") or {}).get("conditions") or []:
        if item.get("type") == type_:
            return item  # type: ignore[no-any-return]
    return None


def condition_true(obj: Mapping[str, Any], type_: str) -> bool:
    found = condition(obj, type_)
    return found is not None and found.get("status") == "True"


def set_condition(
    conditions: Sequence[Mapping[str, Any]],
    type_: str,
    status: bool,
    reason: str,
    message: str,
    now: str,
) -> list[dict[str, Any]]:
    """metav1.Condition semantics: ``lastTransitionTime`` moves only when status flips."""
    wanted = "True" if status else "False"
    result = [dict(c) for c in conditions]
    for item in result:
        if item.get("type") == type_:
            if item.get("status") != wanted:
                item["lastTransitionTime"] = now
            item.update(status=wanted, reason=reason, message=message)
            return result
    result.append(
        {
            "type": type_,
            "status": wanted,
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
    )
    return result


def controller_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: Mapping[str, Any], owner_uid: str) -> bool:
    return any(
        ref.get("uid") == owner_uid and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def jobset_finished(jobset: Mapping[str, Any]) -> bool:
    return condition_true(jobset, "Completed") or condition_true(jobset, "Failed")


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("labels") or {})


def _annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    return dict((obj.get("metadata") or {}).get("annotations") or {})


# --- batch/v1 Job: pure ---------------------------------------------------------------


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
    value = _labels(pod).get(COMPLETION_INDEX) or _annotations(pod).get(COMPLETION_INDEX)
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
    jobset_labels = {k: v for k, v in _labels(job).items() if k.startswith("jobset.sigs.k8s.io/")}
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


# --- JobSet: pure ---------------------------------------------------------------------


def _replicas(rjob: Mapping[str, Any]) -> int:
    value = rjob.get("replicas")
    return 1 if value is None else int(value)


def _attempt(job: Mapping[str, Any]) -> int:
    value = _labels(job).get(RESTART_ATTEMPT_LABEL, "0")
    return int(value) if value.isdigit() else 0


def _rjob_of(job: Mapping[str, Any]) -> str:
    return _labels(job).get(REPLICATED_JOB_LABEL, "")


def job_name(jobset_name: str, rjob_name: str, index: int) -> str:
    return f"{jobset_name}-{rjob_name}-{index}"


def build_job(
    jobset: Mapping[str, Any], rjob: Mapping[str, Any], index: int, global_index: int
) -> Obj:
    """Child Job of one replicated job: labels (and annotations) as upstream sets them."""
    meta = jobset["metadata"]
    namespace, name = meta["namespace"], job_name(meta["name"], rjob["name"], index)
    template = copy.deepcopy(rjob.get("template") or {})
    job_meta = template.get("metadata") or {}
    spec = template.get("spec") or {}
    pod_template = spec.setdefault("template", {})
    pod_meta = pod_template.setdefault("metadata", {})
    restarts = int((jobset.get("status") or {}).get("restarts") or 0)
    jobset_labels = {
        JOBSET_NAME_LABEL: meta["name"],
        JOBSET_UID_LABEL: meta["uid"],
        REPLICATED_JOB_LABEL: rjob["name"],
        REPLICATED_JOB_REPLICAS_LABEL: str(_replicas(rjob)),
        JOB_INDEX_LABEL: str(index),
        JOB_GLOBAL_INDEX_LABEL: str(global_index),
        JOB_KEY_LABEL: hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest(),
        RESTART_ATTEMPT_LABEL: str(restarts),
    }
    pod_labels = {**(pod_meta.get("labels") or {}), **jobset_labels}
    pod_meta["labels"] = pod_labels
    pod_meta["annotations"] = {**(pod_meta.get("annotations") or {}), **jobset_labels}
    completions, parallelism = job_shape(spec)
    spec.update(
        parallelism=parallelism,
        completions=completions,
        suspend=bool((jobset.get("spec") or {}).get("suspend")),
    )
    spec.setdefault("completionMode", "Indexed")
    spec.setdefault("backoffLimit", DEFAULT_BACKOFF_LIMIT)
    network = (jobset.get("spec") or {}).get("network") or {}
    if network.get("enableDNSHostnames", True):
        pod_spec = pod_template.setdefault("spec", {})
        pod_spec.setdefault("subdomain", network.get("subdomain") or meta["name"])
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**(job_meta.get("labels") or {}), **pod_labels},
            "annotations": {**(job_meta.get("annotations") or {}), **jobset_labels},
            "ownerReferences": [controller_ref(jobset)],
        },
        "spec": spec,
    }


def replicated_job_statuses(
    jobset: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]
) -> list[Obj]:
    """Counts of Jobs per replicated job, in spec order (upstream's semantics: ``ready``
    when ready + succeeded pods cover the Job's pod count, ``active`` when it has an
    unfinished pod, ``suspended`` when its spec says so; the last three only for
    unfinished Jobs)."""
    zero = {"ready": 0, "succeeded": 0, "failed": 0, "active": 0, "suspended": 0}
    counts: dict[str, Obj] = {
        r["name"]: {"name": r["name"], **zero}
        for r in (jobset.get("spec") or {}).get("replicatedJobs") or []
    }
    for job in jobs:
        entry = counts.get(_rjob_of(job))
        if entry is None:
            continue
        finished = job_finished(job)
        status = job.get("status") or {}
        if finished == "Complete":
            entry["succeeded"] += 1
        elif finished == "Failed":
            entry["failed"] += 1
        else:
            pods = pods_per_job(job.get("spec") or {})
            if int(status.get("ready") or 0) + int(status.get("succeeded") or 0) >= pods:
                entry["ready"] += 1
            if int(status.get("active") or 0) > 0:
                entry["active"] += 1
            if (job.get("spec") or {}).get("suspend"):
                entry["suspended"] += 1
    return list(counts.values())


def success_policy_met(jobset: Mapping[str, Any], jobs: Sequence[Mapping[str, Any]]) -> bool:
    spec = jobset.get("spec") or {}
    rjobs = spec.get("replicatedJobs") or []
    policy = spec.get("successPolicy") or {}
    targets = set(policy.get("targetReplicatedJobs") or [r["name"] for r in rjobs])
    succeeded: dict[str, int] = defaultdict(int)
    for job in jobs:
        if job_finished(job) == "Complete":
            succeeded[_rjob_of(job)] += 1
    if policy.get("operator") == "Any":
        return any(succeeded[name] > 0 for name in targets)
    return bool(targets) and all(
        succeeded[r["name"]] >= _replicas(r) for r in rjobs if r["name"] in targets
    )


def _dependencies_reached(
    rjob: Mapping[str, Any], statuses: Mapping[str, Mapping[str, int]], replicas: Mapping[str, int]
) -> bool:
    for dependency in rjob.get("dependsOn") or []:
        counts = statuses.get(dependency.get("name", ""), {})
        expected = replicas.get(dependency.get("name", ""), 0)
        if dependency.get("status") == "Complete":
            reached = counts.get("succeeded", 0) >= expected
        else:
            done = counts.get("ready", 0) + counts.get("succeeded", 0) + counts.get("failed", 0)
            reached = done >= expected
        if not reached:
            return False
    return True


class JobSetStep(enum.StrEnum):
    """What a pass decided; low-cardinality, for logs and tests."""

    FINISHED = "Finished"
    FAILED = "Failed"
    RESTARTING = "Restarting"
    COMPLETED = "Completed"
    SUSPENDED = "Suspended"
    RUNNING = "Running"


@dataclass(frozen=True)
class JobSetPlan:
    step: JobSetStep
    status: Obj
    delete_jobs: tuple[str, ...] = ()
    create_jobs: tuple[Obj, ...] = ()
    suspend_jobs: tuple[str, ...] = ()
    resume_jobs: tuple[str, ...] = ()


def _names(jobs: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    return tuple(j["metadata"]["name"] for j in jobs)


def _jobs_to_create(
    jobset: Mapping[str, Any], existing: set[str], statuses: Sequence[Mapping[str, Any]]
) -> tuple[Obj, ...]:
    rjobs = (jobset.get("spec") or {}).get("replicatedJobs") or []
    by_name = {s["name"]: s for s in statuses}
    replicas = {r["name"]: _replicas(r) for r in rjobs}
    created: list[Obj] = []
    global_index = 0
    for rjob in rjobs:
        reached = _dependencies_reached(rjob, by_name, replicas)
        for index in range(_replicas(rjob)):
            name = job_name(jobset["metadata"]["name"], rjob["name"], index)
            if reached and name not in existing:
                created.append(build_job(jobset, rjob, index, global_index))
            global_index += 1
    return tuple(created)


def _terminal(status: Obj, type_: str, reason: str, message: str, now: str) -> Obj:
    status = dict(status)
    status["conditions"] = set_condition(
        status.get("conditions") or [], type_, True, reason, message, now
    )
    status["terminalState"] = type_
    return status


def _restart_settled(status: Obj, reason: str, message: str, now: str) -> Obj:
    """``RestartingJobSet`` turns False (with why) if the JobSet has one; upstream never
    adds a False condition that was not there."""
    if condition({"status": status}, RESTARTING) is None:
        return status
    conditions = set_condition(status["conditions"], RESTARTING, False, reason, message, now)
    return {**status, "conditions": conditions}


def _all_jobs_ready(jobset: Mapping[str, Any], statuses: Sequence[Mapping[str, Any]]) -> bool:
    total = sum(_replicas(r) for r in (jobset.get("spec") or {}).get("replicatedJobs") or [])
    return total == sum(int(s["ready"]) + int(s["succeeded"]) for s in statuses)


def lingering_jobs(
    restarts: int, jobs: Sequence[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]
) -> set[str]:
    """Names of Jobs of an earlier attempt that are gone while their pods still run down.

    Upstream deletes those Jobs with ``propagationPolicy: Foreground``, so each stays (and
    holds its name) until its pods are gone; kubesim's API serves Foreground as
    Background, so the controller holds the name itself while such pods remain."""
    listed = {j["metadata"].get("uid") for j in jobs}
    names: set[str] = set()
    for pod in pods:
        labels = _labels(pod)
        owner = next(
            (
                r.get("uid")
                for r in pod["metadata"].get("ownerReferences") or []
                if r.get("controller")
            ),
            None,
        )
        attempt = labels.get(RESTART_ATTEMPT_LABEL, "0")
        name = labels.get(JOB_NAME_LABEL)
        if name and owner not in listed and attempt.isdigit() and int(attempt) < restarts:
            names.add(name)
    return names


def plan_jobset(
    jobset: Mapping[str, Any],
    jobs: Sequence[Mapping[str, Any]],
    now: str,
    pods: Sequence[Mapping[str, Any]] = (),
) -> JobSetPlan:
    """The JobSet's next status and child-Job actions, from the JobSet, its Jobs (whose
    statuses are already current) and its pods (for Jobs of an earlier attempt that are
    still stopping)."""
    spec = jobset.get("spec") or {}
    status: Obj = copy.deepcopy(dict(jobset.get("status") or {}))
    restarts = int(status.get("restarts") or 0)
    status["restarts"] = restarts
    current = [j for j in jobs if _attempt(j) >= restarts]
    previous = [j for j in jobs if _attempt(j) < restarts]
    unfinished = [j for j in current if not job_finished(j)]
    status["replicatedJobsStatus"] = replicated_job_statuses(jobset, current)

    # 1. (A JobSet being deleted never gets here: ``reconcile`` leaves it alone.)
    # 2. Already finished: clean up Jobs that are still running.
    if jobset_finished(jobset):
        return JobSetPlan(JobSetStep.FINISHED, status, delete_jobs=_names(unfinished))
    stale = _names(previous)
    if not spec.get("suspend") and _all_jobs_ready(jobset, status["replicatedJobsStatus"]):
        status = _restart_settled(status, "JobsReady", "all jobs are ready", now)
    # 3. A Job failed: the failure policy fails the JobSet or restarts all its Jobs.
    failed = [j for j in current if job_finished(j) == "Failed"]
    if failed:
        decision = decide_failure({**jobset, "status": status}, failed)
        if decision is None:  # an action upstream refuses: nothing happens
            return JobSetPlan(JobSetStep.RUNNING, status, stale)
        if not decision.restart:
            status = _terminal(status, "Failed", decision.reason, decision.message, now)
            status = _restart_settled(status, "JobSetFailed", "jobset failed", now)
            return JobSetPlan(JobSetStep.FAILED, status, delete_jobs=stale + _names(unfinished))
        # Every Job now belongs to an earlier attempt: they are deleted, and each is
        # recreated once it (and its pods) are gone.
        status["restarts"] = restarts + 1
        if decision.counts_towards_max:
            status["restartsCountTowardsMax"] = int(status.get("restartsCountTowardsMax") or 0) + 1
        status["conditions"] = set_condition(
            status.get("conditions") or [], RESTARTING, True, decision.reason, decision.message, now
        )
        return JobSetPlan(JobSetStep.RESTARTING, status, delete_jobs=_names(jobs))
    # 4. The success policy is met.
    if success_policy_met(jobset, current):
        status = _terminal(
            status, "Completed", "AllJobsCompleted", "jobset completed successfully", now
        )
        status = _restart_settled(status, "JobSetCompleted", "jobset completed successfully", now)
        return JobSetPlan(JobSetStep.COMPLETED, status, delete_jobs=stale + _names(unfinished))
    # 5. Create missing Jobs (a name still held by an earlier attempt's Job waits; with
    #    ``BlockingRecreate`` every name waits for all of them), then suspend or resume
    #    the unfinished ones.
    lingering = lingering_jobs(restarts, jobs, pods)
    blocking = (spec.get("failurePolicy") or {}).get("restartStrategy") == "BlockingRecreate"
    create: tuple[Obj, ...] = ()
    if not (blocking and (previous or lingering)):
        held = set(_names(jobs)) | lingering
        create = _jobs_to_create(jobset, held, status["replicatedJobsStatus"])
    conditions = status.get("conditions") or []
    if spec.get("suspend"):
        status["conditions"] = set_condition(
            conditions, "Suspended", True, "SuspendedJobs", "jobset is suspended", now
        )
        status = _restart_settled(status, "JobSetSuspended", "jobset is suspended", now)
        suspend = _names(j for j in unfinished if not (j.get("spec") or {}).get("suspend"))
        return JobSetPlan(JobSetStep.SUSPENDED, status, stale, create, suspend_jobs=suspend)
    # Kueue's webhook suspends a queued JobSet at creation, so a queued JobSet never seen
    # suspended was resumed before this controller first looked: record the resume.
    if condition(jobset, "Suspended") is not None or (
        not conditions and QUEUE_NAME_LABEL in _labels(jobset)
    ):
        status["conditions"] = set_condition(
            conditions, "Suspended", False, "ResumeJobs", "jobset is resumed", now
        )
    resume = _names(j for j in unfinished if (j.get("spec") or {}).get("suspend"))
    return JobSetPlan(JobSetStep.RUNNING, status, stale, create, resume_jobs=resume)


# --- the shell ------------------------------------------------------------------------


class JobSetController:
    name = "jobset"
    watches: tuple[Resource, ...] = (JOBSET, JOB, POD)

    def __init__(
        self,
        store: ObjectStore,
        clock: SimClock,
        *,
        rng: random.Random | None = None,
        kubelet_finalizer: bool = True,
    ) -> None:
        """``kubelet_finalizer``: pods carry the kubelet simulator's finalizer (only when
        the kubelet runs, or deleted pods would stay Terminating forever)."""
        self._store = store
        self._clock = clock
        self._rng = rng or random.Random()
        self._pod_finalizers = (KUBELET_FINALIZER,) if kubelet_finalizer else ()
        #: One wake-up per JobSet whose Jobs have an ``activeDeadlineSeconds`` running or
        #: wait out a failure backoff: nothing else happens then, so no event would
        #: reconcile it (upstream's ``queue.AddAfter``).
        self._deadline_timers: dict[Hashable, tuple[datetime, asyncio.Task[None]]] = {}

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        meta = event.object.get("metadata", {})
        if event.resource.key == JOBSET.key:
            return [(meta.get("namespace", ""), meta.get("name", ""))]
        jobset_name = (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)
        return [(meta.get("namespace", ""), jobset_name)] if jobset_name else []

    def initial_keys(self) -> Iterable[Hashable]:
        return [
            (j["metadata"]["namespace"], j["metadata"]["name"]) for j in self._store.list(JOBSET)
        ]

    async def close(self) -> None:
        timers = [task for _, task in self._deadline_timers.values()]
        self._deadline_timers.clear()
        for task in timers:
            task.cancel()
        for task in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _wake_at(self, key: Hashable, due: datetime | None) -> None:
        """Reconcile ``key`` again at ``due`` (None: no deadline pending)."""
        current = self._deadline_timers.get(key)
        if current is not None and (current[0] == due and not current[1].done()):
            return
        if current is not None:
            current[1].cancel()
            del self._deadline_timers[key]
        if due is not None:
            task = asyncio.create_task(self._wake(key, due))
            self._deadline_timers[key] = (due, task)

    async def _wake(self, key: Hashable, due: datetime) -> None:
        # A little past ``due``: the pass compares whole seconds, and must see it passed.
        await self._clock.sleep((due - self._clock.now()).total_seconds() + 0.01)
        if self._deadline_timers.get(key, (None, None))[1] is asyncio.current_task():
            del self._deadline_timers[key]
        try:
            self.reconcile(key)
        except Exception:
            log.exception("jobset: reconcile %s at a Job deadline or backoff failed", key)

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        jobset = self._store.find(JOBSET, namespace, name)
        if jobset is None:
            self._wake_at(key, None)
            return  # its Jobs and pods go by garbage collection
        uid = jobset["metadata"]["uid"]
        selector = (Requirement(JOBSET_NAME_LABEL, "=", frozenset({name})),)
        jobs = [
            j for j in self._store.list(JOB, namespace, labels=selector) if controlled_by(j, uid)
        ]
        pods_by_job: dict[str, list[Obj]] = defaultdict(list)
        for pod in self._store.list(POD, namespace, labels=selector):
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("controller"):
                    pods_by_job[ref.get("uid", "")].append(pod)
        now = rfc3339(self._clock.now())
        synced = [self._sync_job(job, pods_by_job[job["metadata"]["uid"]], now) for job in jobs]
        jobs = [job for job, _ in synced]
        pods = [
            p
            for group in pods_by_job.values()
            for p in group
            if _labels(p).get(JOBSET_UID_LABEL) == uid  # not an earlier namesake's
        ]
        # Upstream's Reconcile returns at once for a JobSet marked for deletion: no status
        # write and no Job changes until garbage collection takes its Jobs (the Job
        # controller, above, still runs them).
        if not jobset["metadata"].get("deletionTimestamp"):
            self._apply(namespace, name, plan_jobset(jobset, jobs, now, pods))
        deadlines = [d for d in map(active_deadline, jobs) if d is not None]
        retries = [retry for _, retry in synced if retry is not None]
        self._wake_at(key, min(deadlines + retries, default=None))

    def _sync_job(self, job: Obj, pods: list[Obj], now: str) -> tuple[Obj, datetime | None]:
        """The Job controller's part: status from pods, then create/delete pods; returns
        the Job and when its failure backoff ends (None: not waiting)."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        job = self._store.update(
            JOB, namespace, name, set_status(job_status(job, pods, now)), subresource="status"
        )
        plan = plan_job_pods(job, pods, now)
        for pod_name in plan.delete_pods:
            self._delete(POD, namespace, pod_name)
        for index in plan.create_indexes:
            suffix = "".join(self._rng.choices(_POD_SUFFIX_ALPHABET, k=5))
            pod = build_pod(job, index, suffix, finalizers=self._pod_finalizers)
            self._store.create(POD, pod)
        return job, plan.retry_at

    def _apply(self, namespace: str, name: str, plan: JobSetPlan) -> None:
        for job_name_ in plan.delete_jobs:
            self._delete(JOB, namespace, job_name_)
        for job in plan.create_jobs:
            self._store.create(JOB, job)
        for job_name_ in plan.suspend_jobs:
            self._store.update(JOB, namespace, job_name_, set_suspend(True))
        for job_name_ in plan.resume_jobs:
            self._store.update(JOB, namespace, job_name_, set_suspend(False))
        self._store.update(JOBSET, namespace, name, set_status(plan.status), subresource="status")

    def _delete(self, resource: Resource, namespace: str, name: str) -> None:
        try:
            self._store.delete(resource, namespace, name)
        except ApiError as error:
            if error.code != 404:
                raise
