"""The job framework's pure part: a queued JobSet's Workload (name, pod sets, priority),
whether the JobSet is active, and the Event for a missing priority class.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from kubesim.controllers.conditions import controller_ref
from kubesim.controllers.job import pods_per_job
from kubesim.controllers.jobset_plan import QUEUE_NAME_LABEL
from kubesim.resources import JOBSET, WORKLOAD

from .vocabulary import (
    JOB_UID_LABEL,
    PRIORITY_CLASS_LABEL,
    SEQUENCE_ANNOTATION,
    WORKLOAD_PRIORITY_CLASS_SOURCE,
)

Obj = dict[str, Any]


def workload_name(jobset_name: str, jobset_uid: str) -> str:
    """Kueue's ``jobset-{name}-{hash5}``, the prefix cut so the name stays within 63."""
    digest = hashlib.sha1(jobset_uid.encode()).hexdigest()[:5]
    return f"{f'jobset-{jobset_name}'[:57].rstrip('-.')}-{digest}"


def build_workload(jobset: Mapping[str, Any], *, priority: int, sequence: int) -> Obj:
    meta = jobset["metadata"]
    labels = meta.get("labels") or {}
    pod_sets = []
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        template = job_spec.get("template") or {}
        replicas = 1 if rjob.get("replicas") is None else int(rjob["replicas"])
        pod_sets.append(
            {
                "name": rjob["name"],
                "count": replicas * pods_per_job(job_spec),
                "template": {
                    "metadata": {k: v for k, v in (template.get("metadata") or {}).items() if v},
                    "spec": template.get("spec") or {},
                },
            }
        )
    spec: Obj = {
        "podSets": pod_sets,
        "queueName": labels.get(QUEUE_NAME_LABEL, ""),
        "priority": priority,
        "active": True,
    }
    class_name = labels.get(PRIORITY_CLASS_LABEL)
    if class_name:
        spec.update(priority_fields(class_name))
    return {
        "apiVersion": WORKLOAD.api_version(),
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "annotations": {SEQUENCE_ANNOTATION: str(sequence)},
            "ownerReferences": [controller_ref(jobset)],
        },
        "spec": spec,
    }


def priority_fields(class_name: str) -> Obj:
    """Both spellings: v1beta1's name/source and v1beta2's reference (one stored object)."""
    return {
        "priorityClassName": class_name,
        "priorityClassSource": WORKLOAD_PRIORITY_CLASS_SOURCE,
        "priorityClassRef": {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": class_name,
        },
    }


def jobset_active(jobset: Mapping[str, Any]) -> bool:
    """Upstream's JobSet ``IsActive``: some replicated job reports active Jobs."""
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    return any(int(s.get("active") or 0) > 0 for s in statuses)


def missing_priority_class_event(jobset: Mapping[str, Any], class_name: str, now: str) -> Obj:
    """The Warning upstream's ``ExtractPriority`` records when the label names no
    WorkloadPriorityClass (and no Workload is created)."""
    meta = jobset["metadata"]
    digest = hashlib.sha1(f"{meta.get('uid', '')}/{class_name}".encode()).hexdigest()[:16]
    return {
        "metadata": {"name": f"{meta['name']}.{digest}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": JOBSET.api_version(),
            "kind": "JobSet",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "type": "Warning",
        "reason": "WorkloadPriorityClassNotFound",
        "message": f'WorkloadPriorityClass "{class_name}" not found',
        "source": {"component": "kueue-controller-manager"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
