"""What the Reconciler keeps of each watched object: only the fields it reads.

Its caches hold every live JobSet, Workload and pod of the namespace. Full objects carry
pod templates, container specs, ``managedFields`` and ``kubectl``'s last-applied
annotation, none of which any observer reads; at 5,000 live JobSets they were most of
the Reconciler's memory (issue 14). Like client-go's informer ``SetTransform``, each
object is cut down once, as it arrives, to what the observers, the failure reasons and
the finalizer use (``observe/``, ``failure.py``, ``finalizer.py``); status is kept
whole, since every decision reads it.

What is kept is then *compacted*: JSON decoding makes a fresh string for every key and
value of every object, so 5,000 pods hold 5,000 copies of ``"lastTransitionTime"``,
``"True"`` and ``"jobset.sigs.k8s.io/jobset-name"``. Interning the keys and short
values shares one copy among all of them, which more than halves each cached object
(measured in docs/reconciler.md).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, Final

from reconciler.failure import (
    JOB_NAME_LABEL,
    JOB_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    RESTART_ATTEMPT_LABEL,
)
from reconciler.observe import JOBSET_NAME_LABEL, JOBSET_UID_LABEL
from xmc.kjson import as_mapping, as_sequence
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, WORK_UNIT_ID
from xmc.model.jobset import owns_suspend

Obj = dict[str, Any]
#: The pod labels something reads: the JobSet and Job a pod belongs to (pods by JobSet,
#: ``belongs_to``, the failure reasons' Job), its restart attempt and XMC's ids. JobSet
#: copies its whole vocabulary onto every pod (job keys, indexes), which nothing reads.
POD_LABELS: Final = frozenset(
    {
        JOBSET_NAME_LABEL,
        JOBSET_UID_LABEL,
        JOB_NAME_LABEL,
        LEGACY_JOB_NAME_LABEL,
        JOB_UID_LABEL,
        RESTART_ATTEMPT_LABEL,
        EXPERIMENT_ID,
        WORK_UNIT_ID,
        EXECUTION_ID,
    }
)
#: Strings up to this long are interned: keys, states, reasons, label values, names and
#: timestamps (shared by every object stamped in the same second). Longer ones (messages)
#: are mostly unique, and interning them would only cost.
INTERN_UP_TO = 96


def compact(value: Any) -> Any:
    """``value`` with its dict keys and short strings interned (same content, shared)."""
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(item) for item in value]
    if isinstance(value, str) and len(value) <= INTERN_UP_TO:
        return sys.intern(value)
    return value


def _at(source: Mapping[str, Any], *path: str) -> Any:
    for key in path:
        source = as_mapping(source.get(key))
    return source


def slim_metadata(metadata: Any) -> Obj:
    """Everything but ``managedFields`` and the annotations (kubectl's last-applied
    configuration among them), which no observer, failure reason or finalizer reads."""
    return {
        k: v for k, v in as_mapping(metadata).items() if k not in ("managedFields", "annotations")
    }


def _envelope(obj: Mapping[str, Any], spec: Obj) -> Obj:
    slim: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    slim["metadata"] = slim_metadata(obj.get("metadata"))
    slim["spec"] = spec
    if "status" in obj:
        slim["status"] = obj["status"]
    compacted: Obj = compact(slim)
    return compacted


def slim_jobset(jobset: Obj) -> Obj:
    """``suspend`` and, per replicated job, its name, ``replicas`` and pod template
    ``serviceAccountName`` (the JobSet mapping and ``observe_jobset`` read no more); of
    ``managedFields``, when ``spec.suspend`` last changed."""
    spec = as_mapping(jobset.get("spec"))
    replicated: list[Obj] = []
    for rjob in map(as_mapping, as_sequence(spec.get("replicatedJobs"))):
        kept: Obj = {k: rjob[k] for k in ("name", "replicas") if k in rjob}
        account = _at(rjob, "template", "spec", "template", "spec").get("serviceAccountName")
        if account is not None:
            kept["template"] = {"spec": {"template": {"spec": {"serviceAccountName": account}}}}
        replicated.append(kept)
    slim_spec: Obj = {"replicatedJobs": replicated}
    if "suspend" in spec:
        slim_spec["suspend"] = spec["suspend"]
    slim = _envelope(jobset, slim_spec)
    owners = _suspend_owners(as_mapping(jobset.get("metadata")).get("managedFields"))
    if owners:
        slim["metadata"]["managedFields"] = owners
    return slim


def _suspend_owners(managed_fields: Any) -> list[Obj]:
    """Of ``managedFields``, the time of each entry that owns ``spec.suspend``, in the
    entry's own shape: the state's time reads it while the ``Suspended`` condition lags
    the spec (``xmc.model.jobset.suspend_changed_at``)."""
    return [
        compact({"time": entry.get("time"), "fieldsV1": {"f:spec": {"f:suspend": {}}}})
        for entry in map(as_mapping, as_sequence(managed_fields))
        if owns_suspend(entry)
    ]


def slim_workload(workload: Obj) -> Obj:
    """``queueName``, the priority fields and, per pod set, its name, count and template
    ``nodeSelector`` (the scheduling information reads no more)."""
    spec = as_mapping(workload.get("spec"))
    slim_spec: Obj = {
        k: spec[k] for k in ("queueName", "priority", "priorityClassName") if k in spec
    }
    pod_sets: list[Obj] = []
    for pod_set in map(as_mapping, as_sequence(spec.get("podSets"))):
        kept: Obj = {k: pod_set[k] for k in ("name", "count") if k in pod_set}
        selector = _at(pod_set, "template", "spec").get("nodeSelector")
        if selector is not None:
            kept["template"] = {"spec": {"nodeSelector": selector}}
        pod_sets.append(kept)
    slim_spec["podSets"] = pod_sets
    return _envelope(workload, slim_spec)


#: What a pod's status is read for: its phase (R4's terminating pods), a pod-level failure
#: reason and message, and its containers' states (startup diagnostics, failure reasons).
#: Conditions, addresses and times are not read.
POD_STATUS: Final = ("phase", "reason", "message", "containerStatuses", "initContainerStatuses")
#: Of each container status: image names and runtime ids are long, unique and unread.
CONTAINER_STATUS_DROPPED: Final = frozenset({"image", "imageID", "containerID"})


def _slim_pod_status(status: Mapping[str, Any]) -> Obj:
    kept: Obj = {k: status[k] for k in POD_STATUS if k in status}
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in kept:
            kept[key] = [
                {k: v for k, v in as_mapping(c).items() if k not in CONTAINER_STATUS_DROPPED}
                for c in as_sequence(kept[key])
            ]
    return kept


def slim_pod(pod: Obj) -> Obj:
    """Metadata with only the ``POD_LABELS``, and the ``POD_STATUS`` fields: the startup
    diagnostics, R4's terminating pods and the failure reasons read labels, the phase and
    container *states*, never the pod's spec or conditions."""
    metadata = as_mapping(pod.get("metadata"))
    labels = {k: v for k, v in as_mapping(metadata.get("labels")).items() if k in POD_LABELS}
    slim = {**pod, "metadata": {**metadata, "labels": labels}}
    if "status" in pod:
        slim["status"] = _slim_pod_status(as_mapping(pod["status"]))
    return _envelope(slim, {})
