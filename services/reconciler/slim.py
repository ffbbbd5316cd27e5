"""What the Reconciler keeps of each watched object: only the fields it reads.

Its caches hold every live JobSet, Workload and pod of the namespace. Full objects carry
pod templates, container specs, ``managedFields`` and ``kubectl``'s last-applied
annotation, none of which any observer reads; at 5,000 live JobSets they were most of
the Reconciler's memory (issue 14). Like client-go's informer ``SetTransform``, each
object is cut down once, as it arrives, to what the observers, the failure reasons and
the finalizer use (``observe/``, ``failure.py``, ``finalizer.py``); status is kept
whole, since every decision reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Obj = dict[str, Any]
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _at(source: Mapping[str, Any], *path: str) -> Any:
    for key in path:
        source = _mapping(source.get(key))
    return source


def slim_metadata(metadata: Any) -> Obj:
    """Everything but ``managedFields`` and the last-applied annotation."""
    kept = {k: v for k, v in _mapping(metadata).items() if k != "managedFields"}
    annotations = _mapping(kept.get("annotations"))
    if LAST_APPLIED in annotations:
        kept["annotations"] = {k: v for k, v in annotations.items() if k != LAST_APPLIED}
    return kept


def _envelope(obj: Mapping[str, Any], spec: Obj) -> Obj:
    slim: Obj = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    slim["metadata"] = slim_metadata(obj.get("metadata"))
    slim["spec"] = spec
    if "status" in obj:
        slim["status"] = obj["status"]
    return slim


def slim_jobset(jobset: Obj) -> Obj:
    """``suspend`` and, per replicated job, its name, ``replicas`` and pod template
    ``serviceAccountName`` (the JobSet mapping and ``observe_jobset`` read no more)."""
    spec = _mapping(jobset.get("spec"))
    replicated: list[Obj] = []
    for rjob in map(_mapping, _sequence(spec.get("replicatedJobs"))):
        kept: Obj = {k: rjob[k] for k in ("name", "replicas") if k in rjob}
        account = _at(rjob, "template", "spec", "template", "spec").get("serviceAccountName")
        if account is not None:
            kept["template"] = {"spec": {"template": {"spec": {"serviceAccountName": account}}}}
        replicated.append(kept)
    slim_spec: Obj = {"replicatedJobs": replicated}
    if "suspend" in spec:
        slim_spec["suspend"] = spec["suspend"]
    return _envelope(jobset, slim_spec)


def slim_workload(workload: Obj) -> Obj:
    """``queueName``, the priority fields and, per pod set, its name, count and template
    ``nodeSelector`` (the scheduling information reads no more)."""
    spec = _mapping(workload.get("spec"))
    slim_spec: Obj = {
        k: spec[k] for k in ("queueName", "priority", "priorityClassName") if k in spec
    }
    pod_sets: list[Obj] = []
    for pod_set in map(_mapping, _sequence(spec.get("podSets"))):
        kept: Obj = {k: pod_set[k] for k in ("name", "count") if k in pod_set}
        selector = _at(pod_set, "template", "spec").get("nodeSelector")
        if selector is not None:
            kept["template"] = {"spec": {"nodeSelector": selector}}
        pod_sets.append(kept)
    slim_spec["podSets"] = pod_sets
    return _envelope(workload, slim_spec)


def slim_pod(pod: Obj) -> Obj:
    """Metadata and status: the startup diagnostics, R4's terminating pods and the
    failure reasons read container *statuses*, never the pod's spec."""
    return _envelope(pod, {})
