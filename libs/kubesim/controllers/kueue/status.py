"""Status writers — pure: the Workload status a scheduling decision or a released
eviction writes, and the queues' counters and flavor usage.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any

from kubequantity import format_quantity
from kubesim.controllers.conditions import set_condition

from .model import QueuedWorkload, Usage, Verdict, WorkloadDecision, add_usage
from .vocabulary import KueueVersion, WaitReason, quota_reserved_reason

Obj = dict[str, Any]


def admitted_status(status: Mapping[str, Any], decision: WorkloadDecision, now: str) -> Obj:
    conditions = status.get("conditions") or []
    reserved = f"Quota reserved in ClusterQueue {decision.cluster_queue}"
    conditions = set_condition(conditions, "QuotaReserved", True, "QuotaReserved", reserved, now)
    conditions = set_condition(
        conditions, "Admitted", True, "Admitted", "The workload is admitted", now
    )
    for type_ in ("Evicted", "Preempted"):  # upstream resetActiveCondition
        previous = next((c for c in conditions if c.get("type") == type_), None)
        if previous is not None and previous.get("status") == "True":
            message = f"Previously: {previous.get('message', '')}"
            conditions = set_condition(conditions, type_, False, "QuotaReserved", message, now)
    result: Obj = {
        **status,
        "conditions": conditions,
        "admission": {
            "clusterQueue": decision.cluster_queue,
            "podSetAssignments": [a.to_api() for a in decision.assignments],
        },
    }
    if decision.cluster_name:
        result["clusterName"] = decision.cluster_name
    return result


def evicted_status(status: Mapping[str, Any], decision: WorkloadDecision, now: str) -> Obj:
    """Phase one of a preemption (upstream ``Evict`` + ``SetPreemptedCondition``): the
    Workload keeps its admission and quota until its job has stopped."""
    conditions = status.get("conditions") or []
    conditions = set_condition(conditions, "Evicted", True, "Preempted", decision.message, now)
    conditions = set_condition(
        conditions, "Preempted", True, "InClusterQueue", decision.message, now
    )
    result = {k: v for k, v in status.items() if k != "clusterName"}
    return {**result, "conditions": conditions}


def released_status(status: Mapping[str, Any], version: KueueVersion, now: str) -> Obj:
    """Phase two, once the evicted Workload's job has no active pods (upstream job
    framework, "handle eviction"): ``Requeued`` and the quota given back."""
    conditions = status.get("conditions") or []
    evicted: Mapping[str, Any] = next((c for c in conditions if c.get("type") == "Evicted"), {})
    reason, message = evicted.get("reason", "Preempted"), evicted.get("message", "")
    conditions = set_condition(conditions, "Requeued", True, reason, message, now)
    waiting = quota_reserved_reason(WaitReason.PENDING_EVALUATION, version)
    conditions = set_condition(conditions, "QuotaReserved", False, waiting, message, now)
    conditions = set_condition(
        conditions, "Admitted", False, "NoReservation", "The workload has no reservation", now
    )
    result = {k: v for k, v in status.items() if k not in ("admission", "clusterName")}
    return {**result, "conditions": conditions}


def waiting_status(
    status: Mapping[str, Any], decision: WorkloadDecision, now: str, version: KueueVersion
) -> Obj:
    conditions = set_condition(
        status.get("conditions") or [],
        "QuotaReserved",
        False,
        quota_reserved_reason(decision.reason, version),
        decision.message,
        now,
    )
    return {**status, "conditions": conditions}


def decided_status(
    status: Mapping[str, Any], decision: WorkloadDecision, now: str, version: KueueVersion
) -> Obj:
    """The Workload status one scheduling decision writes."""
    if decision.verdict == Verdict.ADMIT:
        return admitted_status(status, decision, now)
    if decision.verdict == Verdict.EVICT:
        return evicted_status(status, decision, now)
    return waiting_status(status, decision, now, version)


def _counts(workloads: Iterable[QueuedWorkload], pending: int) -> Obj:
    reserving = [w for w in workloads if not w.finished]
    return {
        "pendingWorkloads": pending,
        "reservingWorkloads": len(reserving),
        "admittedWorkloads": len(reserving),
    }


def cluster_queue_status(
    cq: Mapping[str, Any], admitted: Sequence[QueuedWorkload], pending: int, now: str
) -> Obj:
    status = dict(cq.get("status") or {})
    usage: Usage = defaultdict(Decimal)
    for workload in admitted:
        if not workload.finished:
            usage = add_usage(usage, workload.usage)
    flavors = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            resources = [
                {
                    "name": r.get("name", ""),
                    "total": format_quantity(
                        usage[(flavor.get("name", ""), r.get("name", ""))], r.get("name", "")
                    ),
                    "borrowed": "0",
                }
                for r in flavor.get("resources") or []
            ]
            flavors.append({"name": flavor.get("name", ""), "resources": resources})
    conditions = set_condition(
        status.get("conditions") or [], "Active", True, "Ready", "Can admit new workloads", now
    )
    return {
        **status,
        **_counts(admitted, pending),
        "flavorsReservation": flavors,
        "flavorsUsage": flavors,
        "conditions": conditions,
    }


def local_queue_status(
    lq: Mapping[str, Any],
    cq_exists: bool,
    admitted: Sequence[QueuedWorkload],
    pending: int,
    now: str,
) -> Obj:
    status = dict(lq.get("status") or {})
    if cq_exists:
        active = (True, "Ready", "Can submit new workloads to localQueue")
    else:
        active = (False, "ClusterQueueDoesNotExist", "Can't submit new workloads to clusterQueue")
    conditions = set_condition(status.get("conditions") or [], "Active", *active, now)
    return {**status, **_counts(admitted, pending), "conditions": conditions}
