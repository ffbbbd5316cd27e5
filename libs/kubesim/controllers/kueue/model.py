"""The scheduling model — pure, frozen data: Workloads as the scheduler sees them, the
ClusterQueues' quotas, and the decisions a scheduling cycle makes.
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubequantity import format_quantity

from .vocabulary import WaitReason

Obj = dict[str, Any]
WorkloadKey = tuple[str, str]
Usage = dict[tuple[str, str], Decimal]
"""Quota in use, keyed by (flavor, resource)."""


@dataclass(frozen=True)
class PodSetRequest:
    name: str
    count: int
    per_pod: Mapping[str, Decimal]

    def total(self) -> dict[str, Decimal]:
        return {r: q * self.count for r, q in self.per_pod.items()}


@dataclass(frozen=True)
class QueuedWorkload:
    namespace: str
    name: str
    uid: str
    job_uid: str
    queue_name: str
    priority: int
    queued_at: str
    """creationTimestamp, or the eviction time once evicted (Kueue's requeue order)."""
    sequence: int
    pod_sets: tuple[PodSetRequest, ...]
    admitted_to: str | None = None
    """The ClusterQueue holding its quota reservation, if any."""
    usage: Mapping[tuple[str, str], Decimal] = field(default_factory=dict)
    admitted_at: str = ""
    finished: bool = False
    active: bool = True
    evicted: bool = False

    @property
    def key(self) -> WorkloadKey:
        return (self.namespace, self.name)

    @property
    def order(self) -> tuple[int, str, bool, int, str]:
        """Timestamps have 1 s grain: within one second a requeued workload goes last."""
        return (-self.priority, self.queued_at, self.evicted, self.sequence, self.name)


@dataclass(frozen=True)
class FlavorQuota:
    name: str
    nominal: Mapping[str, Decimal]


@dataclass(frozen=True)
class ResourceGroup:
    covered: frozenset[str]
    flavors: tuple[FlavorQuota, ...]


@dataclass(frozen=True)
class ClusterQueueModel:
    name: str
    groups: tuple[ResourceGroup, ...]
    preemption: str = "Never"
    """``spec.preemption.withinClusterQueue``; upstream's default is ``Never``."""
    strict_fifo: bool = False
    cluster_name: str | None = None


@dataclass(frozen=True)
class QueueState:
    cluster_queues: Mapping[str, ClusterQueueModel]
    local_queues: Mapping[tuple[str, str], str]
    """(namespace, LocalQueue name) → ClusterQueue name."""


@dataclass(frozen=True)
class PodSetAssignment:
    name: str
    flavors: Mapping[str, str]
    resource_usage: Mapping[str, Decimal]
    count: int

    def to_api(self) -> Obj:
        return {
            "name": self.name,
            "flavors": dict(self.flavors),
            "resourceUsage": {r: format_quantity(q, r) for r, q in self.resource_usage.items()},
            "count": self.count,
        }


@dataclass(frozen=True)
class FlavorFit:
    assignments: tuple[PodSetAssignment, ...] | None
    """None when the workload does not fit; then ``message`` and ``reason`` say why."""
    message: str = ""
    reason: WaitReason = WaitReason.WAITING_FOR_QUOTA

    @property
    def fits(self) -> bool:
        return self.assignments is not None


class Verdict(enum.StrEnum):
    ADMIT = "Admit"
    EVICT = "Evict"
    PENDING = "Pending"
    INADMISSIBLE = "Inadmissible"


@dataclass(frozen=True)
class WorkloadDecision:
    workload: WorkloadKey
    verdict: Verdict
    cluster_queue: str = ""
    assignments: tuple[PodSetAssignment, ...] = ()
    message: str = ""
    cluster_name: str | None = None
    reason: WaitReason = WaitReason.PENDING_EVALUATION
    """Why a PENDING or INADMISSIBLE workload waits (granular; mapped per version)."""


@dataclass(frozen=True)
class AdmissionDecision:
    decisions: tuple[WorkloadDecision, ...] = ()

    def by_verdict(self, verdict: Verdict) -> list[WorkloadDecision]:
        return [d for d in self.decisions if d.verdict == verdict]


def usage_of(assignments: Iterable[PodSetAssignment]) -> Usage:
    usage: Usage = defaultdict(Decimal)
    for assignment in assignments:
        for resource, quantity in assignment.resource_usage.items():
            usage[(assignment.flavors.get(resource, ""), resource)] += quantity
    return usage


def add_usage(
    usage: Mapping[tuple[str, str], Decimal],
    other: Mapping[tuple[str, str], Decimal],
    sign: int = 1,
) -> Usage:
    result: Usage = defaultdict(Decimal, usage)
    for key, quantity in other.items():
        result[key] += sign * quantity
    return result
