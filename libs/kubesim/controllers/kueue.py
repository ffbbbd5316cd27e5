"""A simulated Kueue (``kueue.x-k8s.io``): one Workload per queued JobSet, quota-based
admission in priority-then-FIFO order, preemption within a ClusterQueue, and the
visibility API's pending-workload positions.

Two kinds of pass, both level-triggered:
- per JobSet (Kueue's job framework): create its Workload (none while its
  WorkloadPriorityClass is missing), mark it ``Finished`` when the JobSet finished or is
  being deleted (``OwnerNotFound``, which releases its quota; the Workload itself goes
  with the JobSet, by garbage collection), follow its priority-class label, and make
  the JobSet's ``spec.suspend`` agree with the Workload (admitted → run, not admitted or
  evicted → suspended);
- one scheduling pass over everything: ``admit(queue_state, workloads)`` is a pure
  function that returns what to admit, evict and leave pending (with Kueue's reasons
  and messages); the shell writes Workload statuses and the queues' status counters.

Eviction is two-phase, as upstream: the scheduler only marks the victim ``Evicted`` and
``Preempted``; the JobSet pass suspends the JobSet (the JobSet controller deletes its
pods) and, once the JobSet reports no active pods, releases the quota
(``QuotaReserved=False``, ``Requeued=True``). Until then the victim keeps its quota and
the preemptor waits (``WaitingForPreemptedWorkloads``).

``KueueVersion`` picks the waiting reasons: v0.19's defaults (``Pending``,
``Inadmissible``) or current upstream's with ``UnadmittedWorkloadsObservability``
(``WaitingForQuota``, ``ExceedsMaxQuota``, ...). docs/kubesim.md names the upstream
files followed.

Simplified: no cohorts or borrowing, no admission checks, no topology; flavors are tried
in order per resource group; ``namespaceSelector`` is ignored. A ClusterQueue annotated
``kubesim.xmc/multikueue-cluster: <name>`` stamps that name into ``status.clusterName``
of the Workloads it admits, standing in for MultiKueue.
"""

from __future__ import annotations

import enum
import hashlib
import logging
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from kubequantity import format_quantity, parse_quantity
from kubesim.clock import SimClock
from kubesim.controllers.mutate import set_status, set_suspend
from kubesim.errors import ApiError
from kubesim.resources import (
    CLUSTER_QUEUE,
    EVENT,
    JOBSET,
    LOCAL_QUEUE,
    RESOURCE_FLAVOR,
    WORKLOAD,
    WORKLOAD_PRIORITY_CLASS,
    Resource,
)
from kubesim.store import Event, ObjectStore, rfc3339

from .conditions import condition, condition_true, controller_ref, set_condition
from .job import pods_per_job
from .jobset_plan import QUEUE_NAME_LABEL, jobset_finished

log = logging.getLogger(__name__)

Obj = dict[str, Any]
WorkloadKey = tuple[str, str]
Usage = dict[tuple[str, str], Decimal]
"""Quota in use, keyed by (flavor, resource)."""

PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
MULTIKUEUE_CLUSTER_ANNOTATION = "kubesim.xmc/multikueue-cluster"
SEQUENCE_ANNOTATION = "kubesim.xmc/queue-sequence"
OWNER_NOT_FOUND = "OwnerNotFound"
OWNER_NOT_FOUND_MESSAGE = "The workload's owner no longer exists"
"""Upstream's ``WorkloadFinishedReasonOwnerNotFound`` and its message."""
"""Store revision at the Workload's creation: FIFO tie-break below timestamps' 1 s grain."""
WORKLOAD_PRIORITY_CLASS_SOURCE = "kueue.x-k8s.io/workloadpriorityclass"

SCHEDULE = ("schedule",)


class KueueVersion(enum.StrEnum):
    """Which upstream defaults the simulator follows for the reasons of waiting Workloads."""

    V0_19 = "0.19"
    """v0.19.2: ``UnadmittedWorkloadsObservability`` off — ``Pending`` / ``Inadmissible``."""
    V0_20 = "0.20"
    """Current upstream (main, v0.20.0-devel): the gate on — the granular reasons."""


DEFAULT_KUEUE_VERSION = KueueVersion.V0_19


class WaitReason(enum.StrEnum):
    """Kueue's granular ``QuotaReserved=False`` reasons (``UnadmittedWorkloadsObservability``)."""

    WAITING_FOR_QUOTA = "WaitingForQuota"
    EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
    NO_MATCHING_FLAVOR = "NoMatchingFlavor"
    WAITING_FOR_PREEMPTED_WORKLOADS = "WaitingForPreemptedWorkloads"
    PENDING_EVALUATION = "PendingEvaluation"
    MISCONFIGURED = "Misconfigured"


def quota_reserved_reason(reason: WaitReason, version: KueueVersion) -> str:
    """The reason a version writes: the granular one, or (gate off) the queue blockers'
    ``Inadmissible`` and the scheduler's ``Pending`` (``UnadmittedWorkloadReasonWithFallback``)."""
    if version != KueueVersion.V0_19:
        return str(reason)
    return "Inadmissible" if reason == WaitReason.MISCONFIGURED else "Pending"


# --- quantities -----------------------------------------------------------------------


def _quantity_or_zero(value: Any) -> Decimal:
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
        return {name: _quantity_or_zero(q) for name, q in merged.items()}

    total: dict[str, Decimal] = defaultdict(Decimal)
    for container in pod_spec.get("containers") or []:
        for name, quantity in of(container).items():
            total[name] += quantity
    for container in pod_spec.get("initContainers") or []:
        for name, quantity in of(container).items():
            total[name] = max(total[name], quantity)
    return {name: q for name, q in total.items() if q > 0}


# --- Workload construction (pure) -----------------------------------------------------


def workload_name(jobset_name: str, jobset_uid: str) -> str:
    """Kueue's ``jobset-{name}-{hash5}``, the prefix cut so the name stays within 63."""
    digest = hashlib.sha1(jobset_uid.encode()).hexdigest()[:5]
    return f"{f'jobset-{jobset_name}'[:57].rstrip('-.')}-{digest}"


def build_workload(jobset: Mapping[str, Any], *, priority: int, sequence: int) -> Obj:
    meta = jobset["metadata"]
    labels = meta.get("labels") or {}
    pod_sets = []
    for rjob in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        job_spec = (rjob.get("template") or {}).get("spec") or {}
        template = job_spec.get("template") or {}
        replicas = 1 if rjob.get("replicas") is None else int(rjob["replicas"])
        pod_sets.append(
            {
                "name": rjob["name"],
                "count": replicas * pods_per_job(job_spec),
                "template": {
                    "metadata": {k: v for k, v in (template.get("metadata") or {}).items() if v},
                    "spec": template.get("spec") or {},
                },
            }
        )
    spec: Obj = {
        "podSets": pod_sets,
        "queueName": labels.get(QUEUE_NAME_LABEL, ""),
        "priority": priority,
        "active": True,
    }
    class_name = labels.get(PRIORITY_CLASS_LABEL)
    if class_name:
        spec.update(_priority_fields(class_name))
    return {
        "apiVersion": WORKLOAD.api_version(),
        "kind": "Workload",
        "metadata": {
            "name": workload_name(meta["name"], meta["uid"]),
            "namespace": meta["namespace"],
            "labels": {JOB_UID_LABEL: meta["uid"]},
            "annotations": {SEQUENCE_ANNOTATION: str(sequence)},
            "ownerReferences": [controller_ref(jobset)],
        },
        "spec": spec,
    }


def _priority_fields(class_name: str) -> Obj:
    """Both spellings: v1beta1's name/source and v1beta2's reference (one stored object)."""
    return {
        "priorityClassName": class_name,
        "priorityClassSource": WORKLOAD_PRIORITY_CLASS_SOURCE,
        "priorityClassRef": {
            "group": "kueue.x-k8s.io",
            "kind": "WorkloadPriorityClass",
            "name": class_name,
        },
    }


# --- the scheduling model (pure) ------------------------------------------------------


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


def _usage_of(assignments: Iterable[PodSetAssignment]) -> Usage:
    usage: Usage = defaultdict(Decimal)
    for assignment in assignments:
        for resource, quantity in assignment.resource_usage.items():
            usage[(assignment.flavors.get(resource, ""), resource)] += quantity
    return usage


def _add(
    usage: Mapping[tuple[str, str], Decimal],
    other: Mapping[tuple[str, str], Decimal],
    sign: int = 1,
) -> Usage:
    result: Usage = defaultdict(Decimal, usage)
    for key, quantity in other.items():
        result[key] += sign * quantity
    return result


def _shortfall(
    resource: str, flavor: FlavorQuota, own: Decimal, used: Decimal, request: Decimal
) -> tuple[str, bool] | None:
    """Why ``request`` (after this workload's earlier pod sets, ``own``) does not fit in
    ``flavor`` where others use ``used``, and whether it exceeds the quota outright;
    None when it fits (upstream ``fitsResourceQuota``, no cohort: capacity = nominal)."""
    nominal = flavor.nominal.get(resource, Decimal(0))
    wanted = own + request
    if wanted > nominal:
        return (
            f"insufficient quota for {resource} in flavor {flavor.name}, previously considered "
            f"podsets requests ({format_quantity(own, resource)}) + current podset request "
            f"({format_quantity(request, resource)}) > maximum capacity "
            f"({format_quantity(nominal, resource)})",
            True,
        )
    missing = wanted - (nominal - used)
    if missing > 0:
        return (
            f"insufficient unused quota for {resource} in flavor {flavor.name}, "
            f"{format_quantity(missing, resource)} more needed",
            False,
        )
    return None


_SEVERITY = (WaitReason.WAITING_FOR_QUOTA, WaitReason.EXCEEDS_MAX_QUOTA)


def assign_flavors(
    cq: ClusterQueueModel, workload: QueuedWorkload, usage: Mapping[tuple[str, str], Decimal]
) -> FlavorFit:
    """Kueue's flavor assignment, reduced: per pod set and resource group, the first
    flavor whose free nominal quota covers the pod set's total request. A group none of
    whose flavors could ever hold the request is ``ExceedsMaxQuota``; otherwise the
    workload waits for quota (upstream ``resolveNoFitReason``)."""
    own: Usage = defaultdict(Decimal)
    assignments = []
    for pod_set in workload.pod_sets:
        total = pod_set.total()
        flavors: dict[str, str] = {}
        uncovered = sorted(r for r in total if not any(r in g.covered for g in cq.groups))
        if uncovered:
            return FlavorFit(
                None,
                f"couldn't assign flavors to pod set {pod_set.name}: resource {uncovered[0]} "
                "unavailable in ClusterQueue",
                WaitReason.NO_MATCHING_FLAVOR,
            )
        for group in cq.groups:
            wanted = sorted(r for r in total if r in group.covered)
            if not wanted:
                continue
            reasons: list[str] = []
            exceeds_everywhere = bool(group.flavors)
            for flavor in group.flavors:
                short = [
                    found
                    for r in wanted
                    if (
                        found := _shortfall(
                            r,
                            flavor,
                            own[(flavor.name, r)],
                            Decimal(usage.get((flavor.name, r), 0)),
                            total[r],
                        )
                    )
                ]
                if not short:
                    flavors.update({r: flavor.name for r in wanted})
                    break
                reasons += [message for message, _ in short]
                exceeds_everywhere = exceeds_everywhere and any(e for _, e in short)
            else:
                detail = ", ".join(reasons) or "no flavors in ClusterQueue"
                why = (
                    _SEVERITY[exceeds_everywhere]
                    if group.flavors
                    else WaitReason.NO_MATCHING_FLAVOR
                )
                return FlavorFit(
                    None, f"couldn't assign flavors to pod set {pod_set.name}: {detail}", why
                )
        assignment = PodSetAssignment(pod_set.name, flavors, total, pod_set.count)
        for resource, quantity in total.items():
            own[(flavors[resource], resource)] += quantity
        assignments.append(assignment)
    return FlavorFit(tuple(assignments))


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
        remaining = _add(remaining, candidate.usage, -1)
        chosen.append(candidate)
        if assign_flavors(cq, preemptor, remaining).fits:
            break
    else:
        return ()
    for candidate in reversed(chosen[:-1]):
        trial = _add(remaining, candidate.usage)
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
            usage[holder] = _add(usage[holder], workload.usage)
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
                usage[cq_name] = _add(usage[cq_name], _usage_of(fit.assignments))
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
                decisions += _preempt(cq_name, workload, victims)
                targeted.update(v.key for v in victims)
                freed = usage[cq_name]
                for victim in victims:
                    freed = _add(freed, victim.usage, -1)
                after = assign_flavors(cq, workload, freed).assignments or ()
                usage[cq_name] = _add(usage[cq_name], _usage_of(after))
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


def _preempt(
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


# --- parsing API objects into the model -----------------------------------------------


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
                {r: _quantity_or_zero(q) for r, q in (a.get("resourceUsage") or {}).items()},
                int(a.get("count") or 0),
            )
            for a in admission.get("podSetAssignments") or []
        ]
        usage = _usage_of(assignments)
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
                    r.get("name", ""): _quantity_or_zero(r.get("nominalQuota", 0))
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


# --- visibility -----------------------------------------------------------------------


def _pending_items(store: ObjectStore, cluster_queue: str) -> list[tuple[QueuedWorkload, Obj]]:
    objects = {(w["metadata"]["namespace"], w["metadata"]["name"]): w for w in store.list(WORKLOAD)}
    workloads = [parse_workload(w) for w in objects.values()]
    queue = pending_by_cluster_queue(queue_state(store), workloads).get(cluster_queue, [])
    local_positions: dict[tuple[str, str], int] = defaultdict(int)
    items = []
    for position, workload in enumerate(queue):
        meta = objects[workload.key]["metadata"]
        local = (workload.namespace, workload.queue_name)
        item = {
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "creationTimestamp": meta.get("creationTimestamp"),
                "ownerReferences": meta.get("ownerReferences") or [],
            },
            "priority": workload.priority,
            "localQueueName": workload.queue_name,
            "positionInClusterQueue": position,
            "positionInLocalQueue": local_positions[local],
        }
        local_positions[local] += 1
        items.append((workload, item))
    return items


def pending_workloads(store: ObjectStore, cluster_queue: str) -> list[dict[str, Any]]:
    """Kueue visibility ``PendingWorkload`` items of a ClusterQueue, in admission order
    (0-based ``positionInClusterQueue`` and ``positionInLocalQueue``)."""
    return [item for _, item in _pending_items(store, cluster_queue)]


def pending_workloads_in_local_queue(
    store: ObjectStore, namespace: str, local_queue: str
) -> list[dict[str, Any]]:
    """The same items for one LocalQueue (positions as in the ClusterQueue listing)."""
    cq = queue_state(store).local_queues.get((namespace, local_queue))
    if cq is None:
        return []
    return [
        item
        for workload, item in _pending_items(store, cq)
        if (workload.namespace, workload.queue_name) == (namespace, local_queue)
    ]


# --- status writers (pure) ------------------------------------------------------------


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
            usage = _add(usage, workload.usage)
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


# --- the shell ------------------------------------------------------------------------


def jobset_active(jobset: Mapping[str, Any]) -> bool:
    """Upstream's JobSet ``IsActive``: some replicated job reports active Jobs."""
    statuses = (jobset.get("status") or {}).get("replicatedJobsStatus") or []
    return any(int(s.get("active") or 0) > 0 for s in statuses)


def missing_priority_class_event(jobset: Mapping[str, Any], class_name: str, now: str) -> Obj:
    """The Warning upstream's ``ExtractPriority`` records when the label names no
    WorkloadPriorityClass (and no Workload is created)."""
    meta = jobset["metadata"]
    digest = hashlib.sha1(f"{meta.get('uid', '')}/{class_name}".encode()).hexdigest()[:16]
    return {
        "metadata": {"name": f"{meta['name']}.{digest}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": JOBSET.api_version(),
            "kind": "JobSet",
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid", ""),
        },
        "type": "Warning",
        "reason": "WorkloadPriorityClassNotFound",
        "message": f'WorkloadPriorityClass "{class_name}" not found',
        "source": {"component": "kueue-controller-manager"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def default_jobset_create(jobset: Obj) -> Obj:
    """Kueue's mutating JobSet webhook (``mjobset.kb.io``, create only): a JobSet naming a
    queue is created suspended, so no pod starts before admission (upstream
    ``ApplyDefaultForSuspend`` / ``WorkloadShouldBeSuspended``; kubesim runs with
    ``manageJobsWithoutQueueName`` off, as upstream's default configuration)."""
    labels = (jobset.get("metadata") or {}).get("labels") or {}
    spec = jobset.get("spec")
    if not labels.get(QUEUE_NAME_LABEL) or not isinstance(spec, dict) or spec.get("suspend"):
        return jobset
    return {**jobset, "spec": {**spec, "suspend": True}}


def validate_jobset_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Kueue's JobSet webhook (``vjobset.kb.io``), the one rule kubesim keeps: the
    queue-name label is immutable unless the updated JobSet is suspended (upstream
    ``validateUpdateForQueueName``)."""
    if (new.get("spec") or {}).get("suspend"):
        return
    before = ((old.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL, "")
    after = ((new.get("metadata") or {}).get("labels") or {}).get(QUEUE_NAME_LABEL, "")
    if before == after:
        return
    name = (new.get("metadata") or {}).get("name", "")
    raise ApiError(
        422,
        "Invalid",
        f'admission webhook "vjobset.kb.io" denied the request: '
        f'metadata.labels[{QUEUE_NAME_LABEL}]: Invalid value: "{after}": field is immutable',
        {"name": name, "group": JOBSET.group, "kind": "JobSet"},
    )


class KueueController:
    name = "kueue"
    watches: tuple[Resource, ...] = (
        JOBSET,
        WORKLOAD,
        CLUSTER_QUEUE,
        LOCAL_QUEUE,
        RESOURCE_FLAVOR,
        WORKLOAD_PRIORITY_CLASS,
    )

    def __init__(
        self, store: ObjectStore, clock: SimClock, version: KueueVersion = DEFAULT_KUEUE_VERSION
    ) -> None:
        self._store = store
        self._clock = clock
        self._version = version

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        meta = event.object.get("metadata", {})
        if event.resource.key == JOBSET.key:
            return [("jobset", meta.get("namespace", ""), meta.get("name", ""))]
        if event.resource.key == WORKLOAD.key:
            owners = [
                ("jobset", meta.get("namespace", ""), ref.get("name", ""))
                for ref in meta.get("ownerReferences") or []
                if ref.get("kind") == "JobSet" and ref.get("controller")
            ]
            return [*owners, SCHEDULE]
        if event.resource.key == WORKLOAD_PRIORITY_CLASS.key:  # a JobSet may wait for it
            named = [
                ("jobset", j["metadata"]["namespace"], j["metadata"]["name"])
                for j in self._store.list(JOBSET)
                if (j["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL) == meta.get("name")
            ]
            return [*named, SCHEDULE]
        return [SCHEDULE]

    def initial_keys(self) -> Iterable[Hashable]:
        keys: list[Hashable] = [
            ("jobset", j["metadata"]["namespace"], j["metadata"]["name"])
            for j in self._store.list(JOBSET)
        ]
        return [*keys, SCHEDULE]

    async def close(self) -> None:
        return None

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        if key == SCHEDULE:
            self.schedule()
        else:
            _, namespace, name = key
            self.sync_jobset(namespace, name)

    # -- the job framework: one JobSet and its Workload

    def _priority(self, jobset: Mapping[str, Any]) -> int | None:
        """The labelled WorkloadPriorityClass's value; 0 without a label, None when the
        class does not exist."""
        class_name = (jobset["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        if not class_name:
            return 0
        found = self._store.find(WORKLOAD_PRIORITY_CLASS, None, class_name)
        return None if found is None else int(found.get("value") or 0)

    def sync_jobset(self, namespace: str, name: str) -> None:
        jobset = self._store.find(JOBSET, namespace, name)
        if jobset is None or QUEUE_NAME_LABEL not in (jobset["metadata"].get("labels") or {}):
            return
        wl_name = workload_name(name, jobset["metadata"]["uid"])
        workload = self._store.find(WORKLOAD, namespace, wl_name)
        # 1. A JobSet being deleted finishes its Workload, which gives the quota back; the
        # Workload is garbage-collected with the JobSet (upstream's FinishOrphanedWorkloads,
        # on by default since v0.18: jobframework's finalize → FinalizeOrphanedWorkload).
        if jobset["metadata"].get("deletionTimestamp"):
            if workload is not None and not condition_true(workload, "Finished"):
                self._finish(workload, OWNER_NOT_FOUND, OWNER_NOT_FOUND_MESSAGE)
            return
        now = rfc3339(self._clock.now())
        # 2. Every queued JobSet has a Workload, unless its priority class is missing.
        if workload is None:
            self._match_suspend(jobset, admitted=False)
            priority = self._priority(jobset)
            if priority is None:
                class_name = jobset["metadata"]["labels"][PRIORITY_CLASS_LABEL]
                event = missing_priority_class_event(jobset, class_name, now)
                if self._store.find(EVENT, namespace, event["metadata"]["name"]) is None:
                    self._store.create(EVENT, event)
                return
            built = build_workload(jobset, priority=priority, sequence=self._store.resource_version)
            self._store.create(WORKLOAD, built)
            return
        # 3. A finished JobSet finishes its Workload (which releases the quota).
        if jobset_finished(jobset):
            if not condition_true(workload, "Finished"):
                succeeded = condition_true(jobset, "Completed")
                source = condition(jobset, "Completed" if succeeded else "Failed") or {}
                reason = "Succeeded" if succeeded else "Failed"
                self._finish(workload, reason, source.get("message", ""))
            return
        # 4. The priority-class label is followed, admitted or not (upstream since v0.15).
        self._sync_priority(jobset, workload)
        # 5. An evicted Workload stops its JobSet and gives its quota back once the
        #    JobSet has no active pods.
        if condition_true(workload, "Evicted"):
            self._match_suspend(jobset, admitted=False)
            if is_admitted(workload) and not jobset_active(jobset):
                status = released_status(workload.get("status") or {}, self._version, now)
                self._write_status(WORKLOAD, namespace, wl_name, status)
            return
        # 6. The JobSet runs exactly while its Workload is admitted.
        admitted = is_admitted(workload)
        self._match_suspend(jobset, admitted=admitted)
        # 7. While suspended, the Workload follows the queue-name label.
        if not admitted:
            self._sync_queue_name(jobset, workload)

    def _finish(self, workload: Mapping[str, Any], reason: str, message: str) -> None:
        status = workload.get("status") or {}
        conditions = set_condition(
            status.get("conditions") or [],
            "Finished",
            True,
            reason,
            message,
            rfc3339(self._clock.now()),
        )
        meta = workload["metadata"]
        self._store.update(
            WORKLOAD,
            meta["namespace"],
            meta["name"],
            set_status({**status, "conditions": conditions}),
            subresource="status",
        )

    def _match_suspend(self, jobset: Mapping[str, Any], *, admitted: bool) -> None:
        suspended = bool((jobset.get("spec") or {}).get("suspend"))
        if suspended == (not admitted):
            return
        meta = jobset["metadata"]
        self._store.update(JOBSET, meta["namespace"], meta["name"], set_suspend(not admitted))

    def _update_workload_spec(self, workload: Mapping[str, Any], wanted: Obj) -> None:
        spec = workload.get("spec") or {}
        if all(spec.get(k) == v for k, v in wanted.items()):
            return

        def mutate(obj: Obj) -> None:
            spec = obj.setdefault("spec", {})
            spec.update({k: v for k, v in wanted.items() if v is not None})
            for key in [k for k, v in wanted.items() if v is None]:
                spec.pop(key, None)

        meta = workload["metadata"]
        self._store.update(WORKLOAD, meta["namespace"], meta["name"], mutate)

    def _sync_queue_name(self, jobset: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        queue = (jobset["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL, "")
        self._update_workload_spec(workload, {"queueName": queue})

    def _sync_priority(self, jobset: Mapping[str, Any], workload: Mapping[str, Any]) -> None:
        """Upstream ``UpdateWorkloadPriority``: a changed class name is resolved and
        written (while the class is missing nothing changes); a Workload that reserved
        quota without a class cannot be given one."""
        class_name = (jobset["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL, "")
        spec = workload.get("spec") or {}
        if class_name == spec.get("priorityClassName", ""):
            return
        if not spec.get("priorityClassName") and is_admitted(workload):
            return
        priority = self._priority(jobset)
        if priority is None:
            return
        fields = _priority_fields(class_name)
        wanted: Obj = {"priority": priority}
        wanted.update(fields if class_name else dict.fromkeys(fields))
        self._update_workload_spec(workload, wanted)

    # -- the scheduler: every queue at once

    def schedule(self) -> None:
        state = queue_state(self._store)
        objects = {
            (w["metadata"]["namespace"], w["metadata"]["name"]): w
            for w in self._store.list(WORKLOAD)
        }
        workloads = [parse_workload(w) for w in objects.values()]
        decision = admit(state, workloads)
        now = rfc3339(self._clock.now())
        for item in decision.decisions:
            current = objects[item.workload]
            status = decided_status(current.get("status") or {}, item, now, self._version)
            self._write_status(WORKLOAD, item.workload[0], item.workload[1], status)
        self._update_queue_statuses(state, now)

    def _update_queue_statuses(self, state: QueueState, now: str) -> None:
        workloads = [parse_workload(w) for w in self._store.list(WORKLOAD)]
        pending = pending_by_cluster_queue(state, workloads)
        for cq in self._store.list(CLUSTER_QUEUE):
            name = cq["metadata"]["name"]
            admitted = [w for w in workloads if w.admitted_to == name]
            status = cluster_queue_status(cq, admitted, len(pending.get(name, [])), now)
            self._write_status(CLUSTER_QUEUE, None, name, status)
        for lq in self._store.list(LOCAL_QUEUE):
            namespace, name = lq["metadata"]["namespace"], lq["metadata"]["name"]
            cq_name = state.local_queues.get((namespace, name), "")

            def mine(w: QueuedWorkload, ns: str = namespace, q: str = name) -> bool:
                return (w.namespace, w.queue_name) == (ns, q)

            admitted = [w for w in workloads if mine(w) and w.admitted_to is not None]
            waiting = sum(1 for w in pending.get(cq_name, []) if mine(w))
            status = local_queue_status(lq, cq_name in state.cluster_queues, admitted, waiting, now)
            self._write_status(LOCAL_QUEUE, namespace, name, status)

    def _write_status(
        self, resource: Resource, namespace: str | None, name: str, status: Obj
    ) -> None:
        try:
            self._store.update(resource, namespace, name, set_status(status), subresource="status")
        except ApiError as error:
            if error.code != 404:
                raise
