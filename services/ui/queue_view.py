"""The queue pages' view models (docs/queues.md): ``xmc.v1.Queue`` → row dicts — pure.

The ESS has read and mapped the cluster (``xmc.model.queues``); here it is only laid out:
quota beside usage with a fill in percent, each workload's unit link, position, priority
and wait, and the classes an admin's "raise" and "lower" move a unit to.
"""

from __future__ import annotations

from typing import Any

from kubequantity import parse_quantity
from ui.timeline_view import fmt_duration
from ui.views import fmt_time
from xmc.priority_classes import PRIORITY_CLASSES
from xmc_api.xmc.v1.queue_pb2 import FlavorQuota, Queue, QueuedWorkload

Row = dict[str, Any]


def fill_percent(used: str, nominal: str) -> int | None:
    """``used`` of ``nominal`` in whole percent, rounded down (above 100 when borrowing);
    None when either is not a quantity or nothing is nominal."""
    try:
        amount, whole = parse_quantity(used or "0"), parse_quantity(nominal)
    except ValueError:
        return None
    if whole <= 0:
        return None
    return int(amount * 100 / whole)


def quota_row(quota: FlavorQuota) -> Row:
    return {
        "flavor": quota.flavor,
        "resource": quota.resource,
        "nominal": quota.nominal_quota,
        "borrowing_limit": quota.borrowing_limit or "—",
        "lending_limit": quota.lending_limit or "—",
        "reserved": quota.reserved,
        "used": quota.used,
        "borrowed": quota.borrowed if quota.borrowed not in ("", "0") else "",
        "fill": fill_percent(quota.reserved, quota.nominal_quota),
    }


def neighbour_classes(current: str) -> tuple[str, str]:
    """(one class higher, one lower) among XMC's nine, "" at either end or for a class
    that is not XMC's."""
    if current not in PRIORITY_CLASSES:
        return "", ""
    at = PRIORITY_CLASSES.index(current)
    higher = PRIORITY_CLASSES[at + 1] if at + 1 < len(PRIORITY_CLASSES) else ""
    lower = PRIORITY_CLASSES[at - 1] if at > 0 else ""
    return higher, lower


def workload_row(workload: QueuedWorkload) -> Row:
    xid, wid = _ids(workload.work_unit)
    higher, lower = neighbour_classes(workload.priority_class)
    return {
        "workload": workload.workload,
        "local_queue": workload.local_queue,
        "owner": workload.owner,
        "xid": xid,
        "wid": wid,
        "title": workload.experiment_title,
        "position": workload.position or "",
        "priority": workload.priority,
        "priority_class": workload.priority_class,
        "queued": fmt_time(workload.queued_time),
        "admitted": fmt_time(workload.admitted_time),
        "wait": fmt_duration(workload.wait.ToTimedelta()),
        "reason": workload.reason,
        "message": workload.message,
        "flavors": ", ".join(workload.flavors),
        "raise_to": higher if wid else "",
        "lower_to": lower if wid else "",
    }


def _ids(work_unit: str) -> tuple[int | None, int | None]:
    parts = work_unit.split("/")
    if len(parts) == 4 and parts[1].isdigit() and parts[3].isdigit():
        return int(parts[1]), int(parts[3])
    return None, None


def queue_summary(queue: Queue) -> Row:
    return {
        "name": queue.cluster_queue,
        "local_queue": queue.local_queue,
        "local_queues": list(queue.local_queues),
        "cohort": queue.cohort,
        "strategy": queue.queueing_strategy,
        "preemption": queue.preemption,
        "admitted_count": queue.admitted_workloads,
        "pending_count": queue.pending_workloads,
        "inactive": queue.inactive_reason,
        "quotas": [quota_row(q) for q in queue.quotas],
        "read": fmt_time(queue.read_time),
    }


def queue_view(queue: Queue) -> Row:
    return {
        **queue_summary(queue),
        "admitted": [workload_row(w) for w in queue.admitted],
        "pending": [workload_row(w) for w in queue.pending],
        "positions_unavailable": queue.positions_unavailable,
    }
