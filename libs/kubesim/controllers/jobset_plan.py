"""The JobSet controller's decisions — pure: ``plan_jobset`` gives a JobSet's next status
and what to do with its child Jobs (create, delete, suspend, resume), ``build_job`` the
child Jobs and ``replicated_job_statuses`` their counts. ``jobset.py`` explains the
semantics and applies the plan; ``jobset_failure.py`` holds the failure policy.
"""

from __future__ import annotations

import copy
import enum
import hashlib
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .conditions import condition, condition_true, controller_ref, labels_of, set_condition
from .job import DEFAULT_BACKOFF_LIMIT, JOB_NAME_LABEL, job_finished, job_shape, pods_per_job
from .jobset_failure import RESTARTING, decide_failure

Obj = dict[str, Any]

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
JOB_KEY_LABEL = "jobset.sigs.k8s.io/job-key"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"


def jobset_finished(jobset: Mapping[str, Any]) -> bool:
    return condition_true(jobset, "Completed") or condition_true(jobset, "Failed")


def _replicas(rjob: Mapping[str, Any]) -> int:
    value = rjob.get("replicas")
    return 1 if value is None else int(value)


def _attempt(job: Mapping[str, Any]) -> int:
    value = labels_of(job).get(RESTART_ATTEMPT_LABEL, "0")
    return int(value) if value.isdigit() else 0


def _rjob_of(job: Mapping[str, Any]) -> str:
    return labels_of(job).get(REPLICATED_JOB_LABEL, "")


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
        labels = labels_of(pod)
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
        not conditions and QUEUE_NAME_LABEL in labels_of(jobset)
    ):
        status["conditions"] = set_condition(
            conditions, "Suspended", False, "ResumeJobs", "jobset is resumed", now
        )
    resume = _names(j for j in unfinished if (j.get("spec") or {}).get("suspend"))
    return JobSetPlan(JobSetStep.RUNNING, status, stale, create, resume_jobs=resume)
