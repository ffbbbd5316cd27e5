"""API objects into the scheduling model: Workloads (with their pods' effective requests)
and ClusterQueues — pure — and the queue topology read from the store (``queue_state``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from kubequantity import parse_quantity
from kubesim.controllers.conditions import condition, condition_true
from kubesim.resources import CLUSTER_QUEUE, LOCAL_QUEUE
from kubesim.store import ObjectStore

from .model import (
    ClusterQueueModel,
    FlavorQuota,
    PodSetAssignment,
    PodSetRequest,
    QueuedWorkload,
    QueueState,
    ResourceGroup,
    Usage,
    usage_of,
)
from .vocabulary import JOB_UID_LABEL, MULTIKUEUE_CLUSTER_ANNOTATION, SEQUENCE_ANNOTATION


def quantity_or_zero(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError):
        return Decimal(0)


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Effective requests of one pod: the sum over containers, or the largest init
    container when that is larger; a limit stands in for a missing request."""

    def of(container: Mapping[str, Any]) -> dict[str, Decimal]:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        return {name: quantity_or_zero(q) for name, q in merged.items()}

    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in pod_spec.get("containers") or []:
        for name, quantity in of(container).items():
            total[name] += quantity
    for container in pod_spec.get("initContainers") or []:
        for name, quantity in of(container).items():
            total[name] = max(total[name], quantity)
    return {name: q for name, q in total.items() if q > 0}


def is_admitted(workload: Mapping[str, Any]) -> bool:
    status = workload.get("status") or {}
    return bool(status.get("admission")) and condition_true(workload, "QuotaReserved")


def parse_workload(obj: Mapping[str, Any]) -> QueuedWorkload:
    meta = obj["metadata"]
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    pod_sets = tuple(
        PodSetRequest(
            ps.get("name", "main"),
            int(ps.get("count", 1)),
            pod_requests((ps.get("template") or {}).get("spec") or {}),
        )
        for ps in spec.get("podSets") or []
    )
    admitted_to = None
    usage: Usage = defaultdict(Decimal)
    admitted_at = ""
    if is_admitted(obj):
        admission = status["admission"]
        admitted_to = admission.get("clusterQueue")
        assignments = [
            PodSetAssignment(
                a.get("name", ""),
                a.get("flavors") or {},
                {r: quantity_or_zero(q) for r, q in (a.get("resourceUsage") or {}).items()},
                int(a.get("count") or 0),
            )
            for a in admission.get("podSetAssignments") or []
        ]
        usage = usage_of(assignments)
        admitted_at = (condition(obj, "QuotaReserved") or {}).get("lastTransitionTime", "")
    evicted = condition(obj, "Evicted")
    queued_at = meta.get("creationTimestamp", "")
    was_evicted = evicted is not None and evicted.get("status") == "True"
    if evicted is not None and was_evicted:
        queued_at = evicted.get("lastTransitionTime", queued_at)
    sequence = (meta.get("annotations") or {}).get(SEQUENCE_ANNOTATION, "0")
    return QueuedWorkload(
        namespace=meta.get("namespace", ""),
        name=meta["name"],
        uid=meta.get("uid", ""),
        job_uid=(meta.get("labels") or {}).get(JOB_UID_LABEL, ""),
        queue_name=spec.get("queueName", ""),
        priority=int(spec.get("priority") or 0),
        queued_at=queued_at,
        sequence=int(sequence) if sequence.isdigit() else 0,
        pod_sets=pod_sets,
        admitted_to=admitted_to,
        usage=dict(usage),
        admitted_at=admitted_at,
        finished=condition_true(obj, "Finished"),
        active=spec.get("active", True) is not False,
        evicted=was_evicted,
    )


def parse_cluster_queue(obj: Mapping[str, Any]) -> ClusterQueueModel:
    spec = obj.get("spec") or {}
    groups = []
    for group in spec.get("resourceGroups") or []:
        flavors = tuple(
            FlavorQuota(
                f.get("name", ""),
                {
                    r.get("name", ""): quantity_or_zero(r.get("nominalQuota", 0))
                    for r in f.get("resources") or []
                },
            )
            for f in group.get("flavors") or []
        )
        covered = set(group.get("coveredResources") or [])
        covered |= {r for f in flavors for r in f.nominal}
        groups.append(ResourceGroup(frozenset(covered), flavors))
    preemption = (spec.get("preemption") or {}).get("withinClusterQueue") or "Never"
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return ClusterQueueModel(
        name=obj["metadata"]["name"],
        groups=tuple(groups),
        preemption=preemption,
        strict_fifo=spec.get("queueingStrategy") == "StrictFIFO",
        cluster_name=annotations.get(MULTIKUEUE_CLUSTER_ANNOTATION) or None,
    )


def queue_state(store: ObjectStore) -> QueueState:
    return QueueState(
        {cq["metadata"]["name"]: parse_cluster_queue(cq) for cq in store.list(CLUSTER_QUEUE)},
        {
            (lq["metadata"]["namespace"], lq["metadata"]["name"]): (lq.get("spec") or {}).get(
                "clusterQueue", ""
            )
            for lq in store.list(LOCAL_QUEUE)
        },
    )
