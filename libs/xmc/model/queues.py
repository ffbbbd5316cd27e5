"""The queue and quota view (docs/queues.md): Kueue's ClusterQueue, LocalQueue and
Workload objects, as the API server returns them, mapped to ``xmc.v1.Queue`` — pure.

The objects are read as kubesim and real Kueue (v0.17) both write them: quota from
``spec.resourceGroups[].flavors[].resources[]`` (``nominalQuota``, ``borrowingLimit``,
``lendingLimit``), usage from ``status.flavorsReservation`` / ``status.flavorsUsage``,
a Workload admitted while its ``QuotaReserved`` condition is True, waiting while it is
False, and its position from Kueue's visibility API (``positionInClusterQueue``, 0-based;
shown 1-based). Absent, null or ill-typed fields read as empty (``xmc.kjson``), so a
Kueue that writes less still gives a page, never an exception.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from xmc.kjson import as_int, as_mapping, as_sequence, as_str, condition_of, metadata_of
from xmc.labels import parse_jobset_name
from xmc.model.states import WorkUnitState
from xmc.names import work_unit_name
from xmc.timestamps import as_utc, parse_rfc3339, set_timestamp
from xmc_api.xmc.v1.queue_pb2 import FlavorQuota, Queue, QueuedWorkload

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class QueueRef:
    """What a queue name resolved to: a ClusterQueue, and the LocalQueue asked for."""

    cluster_queue: str
    local_queue: str = ""


def named(objects: Iterable[Obj], name: str) -> Obj | None:
    """The object called ``name`` among ``objects``, or None."""
    return next((o for o in objects if metadata_of(o).get("name") == name), None)


def resolve_queue(
    name: str, cluster_queues: Iterable[Obj], local_queues: Iterable[Obj]
) -> QueueRef | None:
    """A ClusterQueue's name wins over a LocalQueue's; None when neither has it."""
    if named(cluster_queues, name) is not None:
        return QueueRef(name)
    local = named(local_queues, name)
    return QueueRef(cluster_queue_of(local), name) if local is not None else None


def cluster_queue_of(local_queue: Obj) -> str:
    return as_str(as_mapping(local_queue.get("spec")).get("clusterQueue"))


def local_queues_of(cluster_queue: str, local_queues: Iterable[Obj]) -> list[str]:
    """The LocalQueues (of the namespace listed) that submit to ``cluster_queue``, sorted."""
    return sorted(
        as_str(metadata_of(lq).get("name"))
        for lq in local_queues
        if cluster_queue_of(lq) == cluster_queue
    )


def flavor_quotas(cluster_queue: Obj) -> list[FlavorQuota]:
    """One row per flavor and resource of the spec, with the status's reservation and
    usage beside it (a resource the status does not mention shows none)."""
    status = as_mapping(cluster_queue.get("status"))
    reserved = _status_amounts(status.get("flavorsReservation"))
    used = _status_amounts(status.get("flavorsUsage"))
    rows = []
    for group in as_sequence(as_mapping(cluster_queue.get("spec")).get("resourceGroups")):
        for flavor in as_sequence(as_mapping(group).get("flavors")):
            flavor_name = as_str(as_mapping(flavor).get("name"))
            for resource in as_sequence(as_mapping(flavor).get("resources")):
                spec = as_mapping(resource)
                key = (flavor_name, as_str(spec.get("name")))
                total, borrowed = reserved.get(key, ("", ""))
                rows.append(
                    FlavorQuota(
                        flavor=flavor_name,
                        resource=key[1],
                        nominal_quota=_quantity(spec.get("nominalQuota")),
                        borrowing_limit=_quantity(spec.get("borrowingLimit")),
                        lending_limit=_quantity(spec.get("lendingLimit")),
                        reserved=total or "0",
                        used=used.get(key, ("0", ""))[0] or "0",
                        borrowed=borrowed or "0",
                    )
                )
    return rows


def _status_amounts(flavors: Any) -> dict[tuple[str, str], tuple[str, str]]:
    """(flavor, resource) → (total, borrowed) of ``flavorsReservation`` / ``flavorsUsage``."""
    amounts = {}
    for flavor in map(as_mapping, as_sequence(flavors)):
        for resource in map(as_mapping, as_sequence(flavor.get("resources"))):
            key = (as_str(flavor.get("name")), as_str(resource.get("name")))
            amounts[key] = (_quantity(resource.get("total")), _quantity(resource.get("borrowed")))
    return amounts


def _quantity(value: Any) -> str:
    """A quantity as written (``"64"``, ``"16Gi"``); JSON numbers are allowed too."""
    if isinstance(value, bool) or value is None:
        return ""
    return str(value) if isinstance(value, int | float | str) else ""


def work_unit_of(workload: Obj) -> tuple[str, str]:
    """(owner job's name, ``experiments/{xid}/workUnits/{wid}`` or "") of a Workload: the
    controlling owner is the JobSet, and XMC names its JobSets ``xmc-{xid}-{wid}``."""
    for ref in map(as_mapping, as_sequence(metadata_of(workload).get("ownerReferences"))):
        if ref.get("controller") is True:
            owner = as_str(ref.get("name"))
            ids = parse_jobset_name(owner) if ref.get("kind") == "JobSet" else None
            return owner, work_unit_name(*ids) if ids else ""
    return "", ""


def is_finished(workload: Obj) -> bool:
    return condition_of(workload, "Finished", status="True") is not None


def is_reserved(workload: Obj) -> bool:
    """Quota reserved (admitted, or about to be): it counts against the ClusterQueue."""
    return condition_of(workload, "QuotaReserved", status="True") is not None


def queued_workload(
    workload: Obj, *, position: int | None, now: datetime, title: str = ""
) -> QueuedWorkload:
    """One row: who, where in the queue (``position`` 0-based, as Kueue gives it), at
    what priority, since when, and why it waits."""
    metadata, spec = metadata_of(workload), as_mapping(workload.get("spec"))
    owner, unit = work_unit_of(workload)
    class_ref = as_mapping(spec.get("priorityClassRef"))
    row = QueuedWorkload(
        workload=as_str(metadata.get("name")),
        local_queue=as_str(spec.get("queueName")),
        work_unit=unit,
        owner=owner,
        priority=as_int(spec.get("priority")),
        priority_class=as_str(class_ref.get("name")) or as_str(spec.get("priorityClassName")),
        experiment_title=title,
    )
    queued = parse_rfc3339(metadata.get("creationTimestamp"))
    set_timestamp(row.queued_time, queued)
    reserved = condition_of(workload, "QuotaReserved")
    if is_reserved(workload):
        admitted = parse_rfc3339(as_mapping(reserved).get("lastTransitionTime"))
        set_timestamp(row.admitted_time, admitted)
        row.flavors.extend(_admitted_flavors(workload))
        _set_wait(row, queued, admitted)
    else:
        row.position = position + 1 if position is not None else 0
        row.reason = as_str(as_mapping(reserved).get("reason"))
        row.message = as_str(as_mapping(reserved).get("message"))
        _set_wait(row, queued, now)
    return row


def _set_wait(row: QueuedWorkload, start: datetime | None, end: datetime | None) -> None:
    if start is not None and end is not None:
        # Two clocks (the API server's stamp, the ESS's now): never a negative wait.
        row.wait.FromTimedelta(max(as_utc(end) - as_utc(start), timedelta(0)))


def _admitted_flavors(workload: Obj) -> list[str]:
    admission = as_mapping(as_mapping(workload.get("status")).get("admission"))
    names: set[str] = set()
    for assignment in map(as_mapping, as_sequence(admission.get("podSetAssignments"))):
        names.update(as_str(f) for f in as_mapping(assignment.get("flavors")).values())
    return sorted(n for n in names if n)


@dataclass(frozen=True)
class Positions:
    """Pending Workload name → 0-based position in the ClusterQueue, from the visibility
    API; ``unavailable`` says why there are none."""

    by_name: Mapping[str, int]
    unavailable: str = ""


def queue_message(
    cluster_queue: Obj,
    local_queues: Sequence[Obj],
    workloads: Sequence[Obj],
    positions: Positions,
    *,
    now: datetime,
    local_queue: str = "",
    titles: Mapping[str, str] | None = None,
    with_workloads: bool = True,
) -> Queue:
    """The whole view of one ClusterQueue. ``workloads`` are the listed namespace's; the
    ones of its LocalQueues (only ``local_queue`` when set) that are not finished are
    split into admitted (oldest admission first) and pending (Kueue's order; unknown
    positions last, oldest first). ``titles``: experiment name → title."""
    name = as_str(metadata_of(cluster_queue).get("name"))
    spec, status = as_mapping(cluster_queue.get("spec")), as_mapping(cluster_queue.get("status"))
    feeding = local_queues_of(name, local_queues)
    active = condition_of(cluster_queue, "Active")
    queue = Queue(
        cluster_queue=name,
        local_queue=local_queue,
        local_queues=feeding,
        cohort=as_str(spec.get("cohortName")) or as_str(spec.get("cohort")),
        queueing_strategy=as_str(spec.get("queueingStrategy")) or "BestEffortFIFO",
        preemption=as_str(as_mapping(spec.get("preemption")).get("withinClusterQueue")) or "Never",
        quotas=flavor_quotas(cluster_queue),
        admitted_workloads=as_int(status.get("admittedWorkloads")),
        pending_workloads=as_int(status.get("pendingWorkloads")),
        positions_unavailable=positions.unavailable,
        inactive_reason=""
        if active is None or active.get("status") == "True"
        else as_str(active.get("message")) or as_str(active.get("reason")),
    )
    set_timestamp(queue.read_time, now)
    if not with_workloads:
        return queue
    wanted = {local_queue} if local_queue else set(feeding)
    mine = [
        w
        for w in workloads
        if as_str(as_mapping(w.get("spec")).get("queueName")) in wanted and not is_finished(w)
    ]
    rows = [
        (
            is_reserved(w),
            queued_workload(
                w,
                position=positions.by_name.get(as_str(metadata_of(w).get("name"))),
                now=now,
                title=_title(w, titles or {}),
            ),
        )
        for w in mine
    ]
    admitted = [row for reserved, row in rows if reserved]
    pending = [row for reserved, row in rows if not reserved]
    admitted.sort(key=lambda r: (r.admitted_time.ToNanoseconds(), r.workload))
    pending.sort(key=lambda r: (r.position or 1 << 31, r.queued_time.ToNanoseconds(), r.workload))
    queue.admitted.extend(admitted)
    queue.pending.extend(pending)
    return queue


def _title(workload: Obj, titles: Mapping[str, str]) -> str:
    _, unit = work_unit_of(workload)
    return titles.get(unit.split("/workUnits/")[0], "") if unit else ""


def experiment_ids(workloads: Iterable[Obj]) -> list[int]:
    """The xids of XMC's Workloads among ``workloads``, each once, sorted."""
    xids = set()
    for workload in workloads:
        ids = parse_jobset_name(work_unit_of(workload)[0])
        if ids is not None:
            xids.add(ids[0])
    return sorted(xids)


#: States in which no JobSet of the execution can be relabelled: none exists while
#: scheduling is paused (the parked create carries the unit's own class), and a relabel of
#: one stopping or ended would move its last-edit label past the pending delete.
_NOT_RELABELLABLE: frozenset[WorkUnitState] = frozenset(
    {
        WorkUnitState.SCHEDULING_PAUSED,
        WorkUnitState.STOPPING,
        WorkUnitState.STOPPED,
        WorkUnitState.COMPLETED,
        WorkUnitState.FAILED,
    }
)


def priority_change_problem(state: WorkUnitState) -> str | None:
    """Why a unit in ``state`` cannot get another priority class now, or None when it
    can. INITIALIZING and RESTARTING are allowed: the stored state lags the cluster, and a
    unit already waiting in Kueue's queue may not have been observed yet (a change that
    meets no JobSet is skipped by the Actuator)."""
    if state not in _NOT_RELABELLABLE:
        return None
    if state is WorkUnitState.SCHEDULING_PAUSED:
        return "scheduling is paused: its JobSet is not created yet"
    return f"its execution is {state.name}: its JobSet is going or gone"
