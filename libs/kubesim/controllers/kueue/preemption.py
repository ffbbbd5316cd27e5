"""Preemption within a ClusterQueue — pure: which admitted Workloads to evict so a
higher-priority one fits (upstream ``preemption``), and the eviction decisions.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from .flavors import assign_flavors
from .model import ClusterQueueModel, QueuedWorkload, Usage, Verdict, WorkloadDecision, add_usage


def _preemptible(cq: ClusterQueueModel, preemptor: QueuedWorkload, other: QueuedWorkload) -> bool:
    if cq.preemption == "LowerPriority":
        return other.priority < preemptor.priority
    if cq.preemption == "LowerOrNewerEqualPriority":
        return other.priority < preemptor.priority or (
            other.priority == preemptor.priority and other.queued_at > preemptor.queued_at
        )
    return False


def choose_victims(
    cq: ClusterQueueModel,
    preemptor: QueuedWorkload,
    admitted: Sequence[QueuedWorkload],
    usage: Mapping[tuple[str, str], Decimal],
) -> tuple[QueuedWorkload, ...]:
    """The fewest admitted workloads to evict so ``preemptor`` fits: candidates already
    being evicted first, then from the lowest priority and, within it, the most recently
    admitted (upstream ``CandidatesOrdering``); then any victim whose quota turns out not
    to be needed is spared. Empty when eviction would not help."""
    candidates = sorted(
        (w for w in admitted if _preemptible(cq, preemptor, w)),
        key=lambda w: w.admitted_at,
        reverse=True,
    )
    candidates.sort(key=lambda w: w.priority)
    candidates.sort(key=lambda w: not w.evicted)
    remaining: Usage = defaultdict(Decimal, usage)
    chosen: list[QueuedWorkload] = []
    for candidate in candidates:
        remaining = add_usage(remaining, candidate.usage, -1)
        chosen.append(candidate)
        if assign_flavors(cq, preemptor, remaining).fits:
            break
    else:
        return ()
    for candidate in reversed(chosen[:-1]):
        trial = add_usage(remaining, candidate.usage)
        if assign_flavors(cq, preemptor, trial).fits:
            remaining = trial
            chosen.remove(candidate)
    return tuple(chosen)


def preemption_message(preemptor: QueuedWorkload, cluster_queue: str) -> str:
    """Upstream ``preemptionMessage`` for ``InClusterQueue`` (a path is ``/<cq>`` without
    cohorts)."""
    return (
        f"Preempted to accommodate a workload (UID: {preemptor.uid or 'UNKNOWN'}, JobUID: "
        f"{preemptor.job_uid or 'UNKNOWN'}) due to prioritization in the ClusterQueue; "
        f"preemptor path: /{cluster_queue}; preemptee path: /{cluster_queue}"
    )


def preempt(
    cq_name: str, preemptor: QueuedWorkload, victims: Iterable[QueuedWorkload]
) -> list[WorkloadDecision]:
    """EVICT the victims not already being evicted (upstream ``IssuePreemptions`` counts
    those as preempted without writing them again)."""
    message = preemption_message(preemptor, cq_name)
    return [
        WorkloadDecision(victim.key, Verdict.EVICT, cq_name, message=message)
        for victim in victims
        if not victim.evicted
    ]
