"""JobSet → WorkUnitState mapping (SPEC §8.1), as pure functions of the API object.

The Reconciler passes the JobSet exactly as the API server returns it (a JSON-shaped
mapping of `jobset.x-k8s.io/v1alpha2`), so these functions read camelCase keys and
tolerate absent or null fields the way the API omits them.
"""

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from xmc.kjson import as_mapping, as_sequence, condition_of, conditions_of, metadata_of
from xmc.model.states import WorkUnitState
from xmc.timestamps import as_utc, parse_rfc3339

_CONDITION_COMPLETED = "Completed"
_CONDITION_FAILED = "Failed"
_CONDITION_SUSPENDED = "Suspended"
_DEFAULT_REPLICAS = 1
"""The JobSet API defaults `replicatedJobs[].replicas` to 1 when it is omitted."""
_TERMINAL_POD_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class JobTotals:
    """Child-Job counts summed over all replicated jobs of one JobSet."""

    replicas: int
    ready: int
    active: int
    succeeded: int
    failed: int


@dataclass(frozen=True)
class PodSummary:
    """What a JobSet's pods tell that its status does not. A real Job stops counting a
    pod as active once it is Terminating, so only the pods show that an evicted JobSet's
    pods are still on the way out (docs/decisions/0019); and a Job whose pods have all
    finished counts none of them until it has written its terminal condition, so only the
    pods show that it is finishing rather than starting (docs/decisions/0030)."""

    terminating: int = 0
    #: Every pod of the JobSet, and those of them Succeeded or Failed.
    total: int = 0
    finished: int = 0


NO_PODS = PodSummary()


def summarize_pods(pods: Iterable[Mapping[str, Any]]) -> PodSummary:
    """Count the pods, those finished (Succeeded or Failed) and those Terminating: deleted
    (``deletionTimestamp``) but not yet finished, as batch/v1 counts
    ``status.terminating``. The caller passes only the JobSet's own pods."""
    terminating = total = finished = 0
    for pod in pods:
        deleted = metadata_of(pod).get("deletionTimestamp")
        phase = as_mapping(pod.get("status")).get("phase")
        total += 1
        if phase in _TERMINAL_POD_PHASES:
            finished += 1
        elif deleted:
            terminating += 1
    return PodSummary(terminating=terminating, total=total, finished=finished)


class MappingRule(enum.StrEnum):
    """Which §8.1 rule decided the state; low-cardinality, fit for a metric label."""

    R1 = "R1"
    R2 = "R2"
    R3 = "R3"
    R4 = "R4"
    R5 = "R5"
    R6 = "R6"
    R7 = "R7"
    R8A = "R8a"
    R8B = "R8b"
    R9 = "R9"


@dataclass(frozen=True)
class StateDecision:
    """The derived state together with the rule that fired, so callers can log why."""

    state: WorkUnitState
    rule: MappingRule


def _count(item: Mapping[str, Any], key: str, default: int = 0) -> int:
    value = item.get(key)
    return default if value is None else int(value)


def job_totals(jobset: Mapping[str, Any]) -> JobTotals:
    """Sum spec replicas and status counts; a missing spec or status contributes nothing."""
    replicated_jobs = [
        as_mapping(j) for j in as_sequence(as_mapping(jobset.get("spec")).get("replicatedJobs"))
    ]
    statuses = [
        as_mapping(s)
        for s in as_sequence(as_mapping(jobset.get("status")).get("replicatedJobsStatus"))
    ]
    return JobTotals(
        replicas=sum(_count(j, "replicas", _DEFAULT_REPLICAS) for j in replicated_jobs),
        ready=sum(_count(s, "ready") for s in statuses),
        active=sum(_count(s, "active") for s in statuses),
        succeeded=sum(_count(s, "succeeded") for s in statuses),
        failed=sum(_count(s, "failed") for s in statuses),
    )


def _condition_true(jobset: Mapping[str, Any], *condition_types: str) -> bool:
    """Whether any of ``condition_types`` is True on the JobSet."""
    return condition_of(jobset, *condition_types, status="True") is not None


def decide_work_unit_state(jobset: Mapping[str, Any], pods: PodSummary = NO_PODS) -> StateDecision:
    """Apply rules R1–R9 of SPEC §8.1 in order; the first match wins.

    The order is the point: terminal conditions beat counts (R2/R3 before R4+), and an
    eviction (R4) beats a partial failure (R5) so a preempted JobSet heads back to
    SCHEDULING on the same execution.

    R4 also fires for a suspended JobSet whose ``pods`` are still Terminating
    (docs/decisions/0019): a real cluster's Jobs no longer count those as active, so the
    counts alone would go straight from RUNNING to SCHEDULING.
    """
    completed = _condition_true(jobset, _CONDITION_COMPLETED)
    failed = _condition_true(jobset, _CONDITION_FAILED)
    # R1: the finalizer path (§8.4); whatever the JobSet reached is final.
    if metadata_of(jobset).get("deletionTimestamp"):
        if completed:
            return StateDecision(WorkUnitState.COMPLETED, MappingRule.R1)
        if failed:
            return StateDecision(WorkUnitState.FAILED, MappingRule.R1)
        return StateDecision(WorkUnitState.STOPPED, MappingRule.R1)
    if completed:
        return StateDecision(WorkUnitState.COMPLETED, MappingRule.R2)
    if failed:
        return StateDecision(WorkUnitState.FAILED, MappingRule.R3)

    totals = job_totals(jobset)
    suspended = as_mapping(jobset.get("spec")).get("suspend") is True
    running = totals.active > 0 or totals.ready > 0
    if suspended and (running or pods.terminating > 0):
        return StateDecision(WorkUnitState.DESCHEDULING, MappingRule.R4)
    if totals.failed > 0 and running:
        return StateDecision(WorkUnitState.PARTIALLY_FAILED, MappingRule.R5)
    if totals.ready > 0 and totals.ready + totals.succeeded >= totals.replicas:
        return StateDecision(WorkUnitState.RUNNING, MappingRule.R6)
    nothing_yet = not (totals.ready or totals.active or totals.succeeded or totals.failed)
    if running or (not suspended and nothing_yet):
        return StateDecision(WorkUnitState.STARTING, MappingRule.R7)
    if totals.failed > 0:
        return StateDecision(WorkUnitState.PARTIALLY_FAILED, MappingRule.R8A)
    if totals.succeeded > 0:
        return StateDecision(WorkUnitState.RUNNING, MappingRule.R8B)
    return StateDecision(WorkUnitState.SCHEDULING, MappingRule.R9)


def _finished(jobset: Mapping[str, Any]) -> bool:
    return _condition_true(jobset, _CONDITION_COMPLETED, _CONDITION_FAILED)


def _all_totals_zero(jobset: Mapping[str, Any]) -> bool:
    totals = job_totals(jobset)
    return not (totals.ready or totals.active or totals.succeeded or totals.failed)


def is_finishing(jobset: Mapping[str, Any], pods: PodSummary) -> bool:
    """Whether the JobSet's Jobs are between their pods finishing and their terminal
    condition, which its status cannot show (docs/decisions/0030).

    A Job whose pods have all finished first writes the interim ``FailureTarget`` or
    ``SuccessCriteriaMet`` condition with the pods neither active nor yet counted
    (kubernetes ``pkg/controller/job/job_controller.go``: ``delayTerminalCondition``,
    ``trackJobStatusAndRemoveFinalizers``), and jobset counts a Job that has no
    ``Complete``/``Failed`` condition only by its ``active`` and ``ready`` numbers
    (``calculateReplicatedJobStatuses``). So for that moment every total is zero and R7
    would read STARTING between RUNNING and the end. Finishing: R7 by its all-zero clause
    (unsuspended, nothing finished, not being deleted) while the JobSet has pods and
    every one of them has finished. A JobSet just admitted has no pods yet: STARTING.
    """
    if metadata_of(jobset).get("deletionTimestamp") or _finished(jobset):
        return False
    unsuspended = as_mapping(jobset.get("spec")).get("suspend") is not True
    return (
        unsuspended and _all_totals_zero(jobset) and pods.total > 0 and pods.finished == pods.total
    )


def reads_pods(jobset: Mapping[str, Any]) -> bool:
    """Whether the JobSet's state may depend on its pods, so a pod change must re-observe
    it: R4 for a suspended JobSet (0019), :func:`is_finishing` for one whose totals are all
    zero (0030). Neither for a JobSet being deleted or finished (R1–R3 come first)."""
    if metadata_of(jobset).get("deletionTimestamp") or _finished(jobset):
        return False
    suspended = as_mapping(jobset.get("spec")).get("suspend") is True
    return suspended or _all_totals_zero(jobset)


def to_work_unit_state(jobset: Mapping[str, Any], pods: PodSummary = NO_PODS) -> WorkUnitState:
    """`ToWorkUnitState`: the state only, for callers that do not report the rule."""
    return decide_work_unit_state(jobset, pods).state


def observation_state_update_time(jobset: Mapping[str, Any], observed_at: datetime) -> datetime:
    """The time of the JobSet's current state on the cluster's clock (tz-aware UTC): the
    newest condition ``lastTransitionTime``, else the ``creationTimestamp`` (a JobSet
    without conditions has been in its state since it was created), else ``observed_at``
    floored to the second.

    Every choice but the last is stamped by the API server, to the second, so the §5.2
    time order compares one clock with itself: the Reconciler's own clock may be skewed
    against the cluster's, and a JobSet first seen at Reconciler time 12:00:10 whose
    ``Suspended=False`` condition the cluster stamps 12:00:06 would otherwise look stale
    and stay SCHEDULING (docs/decisions/0011). Using transition times rather than the
    observation time also keeps a late or replayed observation from looking newer than it
    is. Unparseable timestamps are skipped like absent ones: one malformed field must not
    stop the Reconciler from reporting the state.

    While the ``Suspended`` condition does not yet agree with ``spec.suspend``, the time
    ``spec.suspend`` changed counts too (:func:`suspend_changed_at`, also the API
    server's clock): the state then comes from the spec, not from any condition.
    """
    parsed = (parse_rfc3339(c.get("lastTransitionTime")) for c in conditions_of(jobset))
    times = [t for t in parsed if t is not None]
    changed = suspend_changed_at(jobset) if _status_lags_suspend(jobset) else None
    if changed is not None:
        times.append(changed)
    if times:
        return max(times)
    created = parse_rfc3339(metadata_of(jobset).get("creationTimestamp"))
    return created if created is not None else as_utc(observed_at).replace(microsecond=0)


def _status_lags_suspend(jobset: Mapping[str, Any]) -> bool:
    """Whether the JobSet's ``Suspended`` condition (or its absence) still tells the
    suspension before the last change of ``spec.suspend``: Kueue has admitted (or
    evicted) it and the JobSet controller has not caught up. Its newest condition is
    then the *previous* transition, and the state decided from the spec (STARTING,
    DESCHEDULING) would be stamped with it: a re-admission seen in that window was
    dated at the eviction, and the time re-queued read zero (tests/real, a loaded
    control plane)."""
    condition = condition_of(jobset, _CONDITION_SUSPENDED)
    if condition is None:  # not yet written at all: the same window, from creation
        return True
    suspended = as_mapping(jobset.get("spec")).get("suspend") is True
    return (condition.get("status") == "True") != suspended


def suspend_changed_at(jobset: Mapping[str, Any]) -> datetime | None:
    """When ``spec.suspend`` last changed, on the API server's clock: the time of the
    ``managedFields`` entry that owns it (the manager that last set it, Kueue for an
    admission or an eviction; an entry's time moves whenever its manager changes a field
    it owns). None when no entry owns it (kubesim keeps no ``managedFields``)."""
    entries = map(as_mapping, as_sequence(metadata_of(jobset).get("managedFields")))
    parsed = (parse_rfc3339(entry.get("time")) for entry in entries if owns_suspend(entry))
    known = [t for t in parsed if t is not None]
    return max(known) if known else None


def owns_suspend(entry: Mapping[str, Any]) -> bool:
    """Whether a ``managedFields`` entry owns ``spec.suspend`` (its ``fieldsV1`` lists it)."""
    return "f:suspend" in as_mapping(as_mapping(entry.get("fieldsV1")).get("f:spec"))
