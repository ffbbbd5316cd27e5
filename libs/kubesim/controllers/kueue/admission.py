"""One scheduling cycle — pure: the queues in admission order and ``admit``, which says
what to admit, evict and leave pending, with Kueue's reasons (upstream ``scheduler``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from decimal import Decimal

from .flavors import assign_flavors
from .model import (
    AdmissionDecision,
    QueuedWorkload,
    QueueState,
    Usage,
    Verdict,
    WorkloadDecision,
    WorkloadKey,
    add_usage,
    usage_of,
)
from .preemption import choose_victims, preempt
from .vocabulary import WaitReason


def queue_order(workloads: Iterable[QueuedWorkload]) -> list[QueuedWorkload]:
    """Admission order: higher priority first, then first queued."""
    return sorted(workloads, key=lambda w: w.order)


def _resolve(state: QueueState, workload: QueuedWorkload) -> tuple[str | None, str]:
    """(ClusterQueue name, "") or (None, why it is inadmissible)."""
    cq = state.local_queues.get((workload.namespace, workload.queue_name))
    if cq is None:
        return None, f"LocalQueue {workload.queue_name} doesn't exist"
    if cq not in state.cluster_queues:
        return None, f"ClusterQueue {cq} doesn't exist"
    return cq, ""


def pending_by_cluster_queue(
    state: QueueState, workloads: Iterable[QueuedWorkload]
) -> dict[str, list[QueuedWorkload]]:
    """Workloads waiting for quota, per ClusterQueue, in admission order."""
    queues: dict[str, list[QueuedWorkload]] = defaultdict(list)
    for workload in workloads:
        if workload.finished or workload.admitted_to is not None or not workload.active:
            continue
        cq, _ = _resolve(state, workload)
        if cq is not None:
            queues[cq].append(workload)
    return {cq: queue_order(queue) for cq, queue in queues.items()}


def admit(state: QueueState, workloads: Sequence[QueuedWorkload]) -> AdmissionDecision:
    """One scheduling cycle: which pending workloads to admit, which admitted ones to
    evict so a higher priority fits, and why the others wait.

    A preemptor is never admitted in the cycle that evicts: its victims keep their quota
    until their jobs have stopped (the JobSet pass releases it), so it waits with
    ``WaitingForPreemptedWorkloads`` and, as upstream's ``cq.AddUsage``, its request is
    held for it in this cycle so nothing behind it takes the room being freed."""
    decisions: list[WorkloadDecision] = []
    usage: dict[str, Usage] = defaultdict(lambda: defaultdict(Decimal))
    admitted: dict[str, list[QueuedWorkload]] = defaultdict(list)
    for workload in workloads:
        holder = workload.admitted_to
        if holder is not None and holder in state.cluster_queues and not workload.finished:
            usage[holder] = add_usage(usage[holder], workload.usage)
            admitted[holder].append(workload)
    for workload in workloads:
        pending = not workload.finished and workload.admitted_to is None and workload.active
        cq_name, why = _resolve(state, workload)
        if pending and cq_name is None:
            decisions.append(
                WorkloadDecision(
                    workload.key, Verdict.INADMISSIBLE, message=why, reason=WaitReason.MISCONFIGURED
                )
            )
    targeted: set[WorkloadKey] = set()
    for cq_name, queue in sorted(pending_by_cluster_queue(state, workloads).items()):
        cq = state.cluster_queues[cq_name]
        blocked = False
        for workload in queue:
            fit = assign_flavors(cq, workload, usage[cq_name])
            if fit.fits and not blocked and fit.assignments is not None:
                usage[cq_name] = add_usage(usage[cq_name], usage_of(fit.assignments))
                admitted[cq_name].append(workload)
                decisions.append(
                    WorkloadDecision(
                        workload.key, Verdict.ADMIT, cq_name, fit.assignments, "", cq.cluster_name
                    )
                )
                continue
            victims: tuple[QueuedWorkload, ...] = ()
            if not fit.fits and not blocked:
                victims = choose_victims(cq, workload, admitted[cq_name], usage[cq_name])
            if victims and targeted.isdisjoint(v.key for v in victims):
                decisions += preempt(cq_name, workload, victims)
                targeted.update(v.key for v in victims)
                freed = usage[cq_name]
                for victim in victims:
                    freed = add_usage(freed, victim.usage, -1)
                after = assign_flavors(cq, workload, freed).assignments or ()
                usage[cq_name] = add_usage(usage[cq_name], usage_of(after))
                message = f"{fit.message}. Pending the preemption of {len(victims)} workload(s)"
                decisions.append(
                    WorkloadDecision(
                        workload.key,
                        Verdict.PENDING,
                        cq_name,
                        message=message,
                        reason=WaitReason.WAITING_FOR_PREEMPTED_WORKLOADS,
                    )
                )
                continue
            if victims:
                message = "Workload has overlapping preemption targets with another workload"
                reason = WaitReason.WAITING_FOR_QUOTA
            elif fit.fits:
                message = f"Workload is waiting behind others in ClusterQueue {cq_name}"
                reason = WaitReason.PENDING_EVALUATION
            else:
                message, reason = fit.message, fit.reason
            decisions.append(
                WorkloadDecision(
                    workload.key, Verdict.PENDING, cq_name, message=message, reason=reason
                )
            )
            blocked = blocked or cq.strict_fifo
    return AdmissionDecision(tuple(decisions))
