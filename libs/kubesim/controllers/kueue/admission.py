"""One scheduling cycle — pure: the queues in admission order and ``admit``, which says
what to admit, evict and leave pending, with Kueue's reasons, in the numbered steps of
upstream's ``Scheduler.schedule`` (``pkg/scheduler/scheduler.go``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from .flavors import assign_flavors
from .model import (
    AdmissionDecision,
    ClusterQueueModel,
    FlavorFit,
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


def _no_usage() -> Usage:
    return defaultdict(Decimal)


@dataclass
class _Cycle:
    """What one cycle has decided so far, per ClusterQueue: the usage (the snapshot's, then
    what the entries processed took or hold) and the workloads holding quota."""

    state: QueueState
    decisions: list[WorkloadDecision] = field(default_factory=list)
    usage: dict[str, Usage] = field(default_factory=lambda: defaultdict(_no_usage))
    admitted: dict[str, list[QueuedWorkload]] = field(default_factory=lambda: defaultdict(list))
    #: Every workload some entry of this cycle preempts (upstream ``preemptedWorkloads``).
    targeted: set[WorkloadKey] = field(default_factory=set)

    def take_snapshot(self, workloads: Sequence[QueuedWorkload]) -> None:
        """Each ClusterQueue's usage, summed over the unfinished workloads holding a quota
        reservation in it (upstream ``Cache.Snapshot``)."""
        for workload in workloads:
            holder = workload.admitted_to
            if holder is not None and holder in self.state.cluster_queues and not workload.finished:
                self.usage[holder] = add_usage(self.usage[holder], workload.usage)
                self.admitted[holder].append(workload)

    def reject_misconfigured(self, workloads: Sequence[QueuedWorkload]) -> None:
        """A pending workload whose LocalQueue or ClusterQueue does not exist is inadmissible
        (upstream's workload controller, ``getQueueBlocker``, says so, not its scheduler)."""
        for workload in workloads:
            pending = not workload.finished and workload.admitted_to is None and workload.active
            cq_name, why = _resolve(self.state, workload)
            if pending and cq_name is None:
                self.decisions.append(
                    WorkloadDecision(
                        workload.key,
                        Verdict.INADMISSIBLE,
                        message=why,
                        reason=WaitReason.MISCONFIGURED,
                    )
                )

    def process_entry(
        self,
        cq_name: str,
        cq: ClusterQueueModel,
        workload: QueuedWorkload,
        fit: FlavorFit,
        victims: tuple[QueuedWorkload, ...],
        *,
        behind_waiting_head: bool,
    ) -> bool:
        """Upstream ``processEntry`` for a nominated workload (step 5 of :func:`admit`);
        True when it is admitted or preempting, False when it waits.
        ``behind_waiting_head``: a StrictFIFO queue's head waits before it."""
        usage = self.usage[cq_name]
        # 5a. It fits: admitted, its usage taken (``admit``, ``cq.AddUsage``).
        if fit.assignments is not None and not behind_waiting_head:
            self.usage[cq_name] = add_usage(usage, usage_of(fit.assignments))
            self.admitted[cq_name].append(workload)
            self.decisions.append(
                WorkloadDecision(
                    workload.key,
                    Verdict.ADMIT,
                    cq_name,
                    fit.assignments,
                    "",
                    cq.cluster_name,
                )
            )
            return True
        # 5b. Victims no other entry targets: evicted (``issuePreemptions`` →
        #     ``IssuePreemptions``), the preemptor waits with its request held
        #     (``cq.AddUsage``) and "Pending the preemption of N workload(s)"
        #     (``markPreemptionOutcome``).
        if victims and self.targeted.isdisjoint(v.key for v in victims):
            self.decisions += preempt(cq_name, workload, victims)
            self.targeted.update(v.key for v in victims)
            freed = usage
            for victim in victims:
                freed = add_usage(freed, victim.usage, -1)
            after = assign_flavors(cq, workload, freed).assignments or ()
            self.usage[cq_name] = add_usage(usage, usage_of(after))
            self._wait(
                cq_name,
                workload,
                f"{fit.message}. Pending the preemption of {len(victims)} workload(s)",
                WaitReason.WAITING_FOR_PREEMPTED_WORKLOADS,
            )
            return True
        # 5c. Victims another entry targets already (``preemptedWorkloads.HasAny``).
        if victims:
            self._wait(
                cq_name,
                workload,
                "Workload has overlapping preemption targets with another workload",
                WaitReason.WAITING_FOR_QUOTA,
            )
        # 5d. It would fit, but a StrictFIFO head waits before it (kubesim's own words).
        elif fit.fits:
            self._wait(
                cq_name,
                workload,
                f"Workload is waiting behind others in ClusterQueue {cq_name}",
                WaitReason.PENDING_EVALUATION,
            )
        # 5e. No fit, nothing to preempt: the flavor assigner's message and reason
        #     (``NoFit``: ``NoFitReason``; ``Preempt`` without targets: WaitingForQuota).
        else:
            self._wait(cq_name, workload, fit.message, fit.reason)
        return False

    def _wait(
        self, cq_name: str, workload: QueuedWorkload, message: str, reason: WaitReason
    ) -> None:
        self.decisions.append(
            WorkloadDecision(workload.key, Verdict.PENDING, cq_name, message=message, reason=reason)
        )


def admit(state: QueueState, workloads: Sequence[QueuedWorkload]) -> AdmissionDecision:
    """One scheduling cycle: which pending workloads to admit, which admitted ones to
    evict so a higher priority fits, and why the others wait. The steps are upstream's
    ``Scheduler.schedule`` (``pkg/scheduler/scheduler.go``, the same in v0.19.2 and main),
    without cohorts, fair sharing, topology or admission checks:

    1. *Heads* (``Manager.Heads``, ``pkg/cache/queue/manager.go``). Upstream pops one
       head per ClusterQueue per cycle; kubesim takes every pending workload of each
       ClusterQueue (``pending_by_cluster_queue``) in queue order (``queue_order``, as
       ``baseCompareFunc`` in ``pkg/cache/queue/cluster_queue.go``: priority, then time),
       as successive upstream cycles would meet them while nothing else changes. A
       StrictFIFO head that cannot be admitted stays the head
       (``ClusterQueue.RequeueIfNotPresent``), so nothing behind it is admitted or
       preempts; kubesim tries those behind a preempting head, against the usage with its
       request held.
    2. *Snapshot* (``Cache.Snapshot``, ``pkg/cache/scheduler/snapshot.go``): each
       ClusterQueue's usage. Before any ClusterQueue, a pending workload whose LocalQueue
       or ClusterQueue does not exist is inadmissible (upstream's workload controller,
       ``pkg/controller/core/workload_controller.go`` ``getQueueBlocker``).
    3. *Nominate* (``nominate`` → ``getAssignments``): the flavors the free quota holds
       (``FlavorAssigner.Assign``, ``pkg/scheduler/flavorassigner/flavorassigner.go``:
       ``assign_flavors``) and, when none do, the admitted workloads whose eviction
       would make room (``Preemptor.GetTargets``, ``pkg/scheduler/preemption/
       preemption.go``: ``choose_victims``). Each is nominated against the usage the
       entries before it left, so upstream's "Workload no longer fits after processing
       another workload" never arises.
    4. *Order* (``makeIterator``): without cohorts each ClusterQueue is alone, and step
       1's queue order is the order; the ClusterQueues go one after another by name.
    5. *Process the entry* (``processEntry``): :meth:`_Cycle.process_entry`.
    6. *Requeue the rest* (``requeueAndUpdate``): each workload not admitted keeps its
       reason and message, which ``status.py`` writes as ``QuotaReserved=False``.

    A preemptor is never admitted in the cycle that evicts: its victims keep their quota
    until their jobs have stopped (the JobSet pass releases it), so it waits with
    ``WaitingForPreemptedWorkloads`` and, as upstream's ``cq.AddUsage``, its request is
    held for it in this cycle so nothing behind it takes the room being freed. kubesim
    holds the whole request in the flavors it gets once the victims are gone; upstream
    the part of it free now (``quotaResourcesToReserve``)."""
    cycle = _Cycle(state)
    # 2. The snapshot, and the workloads no ClusterQueue can take.
    cycle.take_snapshot(workloads)
    cycle.reject_misconfigured(workloads)
    # 1. and 4. Each ClusterQueue's pending workloads, in queue order.
    for cq_name, queue in sorted(pending_by_cluster_queue(state, workloads).items()):
        cq = state.cluster_queues[cq_name]
        head_waits = False
        for workload in queue:
            # 3. Nominate: the flavors, else the victims (none behind a waiting head).
            usage = cycle.usage[cq_name]
            fit = assign_flavors(cq, workload, usage)
            victims: tuple[QueuedWorkload, ...] = ()
            if not fit.fits and not head_waits:
                victims = choose_victims(cq, workload, cycle.admitted[cq_name], usage)
            # 5. Process it; 6. one not admitted keeps its reason (its PENDING decision).
            proceeds = cycle.process_entry(
                cq_name, cq, workload, fit, victims, behind_waiting_head=head_waits
            )
            head_waits = head_waits or (cq.strict_fifo and not proceeds)
    return AdmissionDecision(tuple(cycle.decisions))
