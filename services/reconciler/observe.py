"""What the Reconciler reads off JobSets, Workloads and Pods (SPEC §8), as pure functions.

Every function takes the objects exactly as the API server returns them (JSON-shaped
mappings, camelCase keys, absent or null fields tolerated) and returns data: an
:class:`~reconciler.observation.Observation` for the UpdateBatcher, a message, or a frozen
decision with a small enum the shell can act on and label metrics with. Nothing here does
I/O or reads a clock, so the watch loop, the finalizer path and the orphan sweep can be
tested case by case.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from reconciler.observation import Observation, Source
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, FINALIZER, WORK_UNIT_ID
from xmc.model.jobset import (
    NO_PODS,
    MappingRule,
    PodSummary,
    decide_work_unit_state,
    observation_state_update_time,
    summarize_pods,
)
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.names import work_unit_name
from xmc.timestamps import as_utc, parse_rfc3339, set_timestamp
from xmc_api.cloud.xmanager.v1.status_pb2 import (
    Condition,
    ExecutableStatus,
    JobSetStatus,
    ReplicatedJobStatus,
    WorkUnitStatus,
)
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import (
    AuxiliaryInfo,
    QueueInfo,
    StructuredMessage,
)
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    ClusterInfo,
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)

JOBSET_MASK: Final = ("status.state", "status.detailed_status", "metadata")
WORKLOAD_MASK: Final = ("status.scheduling_information", "metadata")
POD_MASK: Final = ("status.system_message",)
#: A FAILED JobSet's observation also says why (``reconciler.failure``).
FAILED_JOBSET_MASK: Final = (*JOBSET_MASK, "status.system_message")

JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL: Final = "jobset.sigs.k8s.io/jobset-uid"

#: QuotaReserved=False reasons that mean "still waiting in the queue". Kueue up to v0.19
#: by default: ``Pending`` after an eviction or while it does not fit, ``Inadmissible``
#: when it never can. With ``UnadmittedWorkloadsObservability`` (on by default after
#: v0.19) the granular reasons of kueue ``apis/kueue/v1beta2/workload_types.go``.
WAITING_REASONS: Final = frozenset(
    {
        "Pending",
        "Inadmissible",
        "WaitingForQuota",
        "ExceedsMaxQuota",
        "NoMatchingFlavor",
        "TopologyPlacementFailed",
        "WaitingForPreemptedWorkloads",
        "WaitingForPodsReady",
        "PendingEvaluation",
        "Misconfigured",
        "Suspended",
        "AdmissionGated",
    }
)

#: Container waiting reasons that will not clear on their own: the image cannot be pulled
#: or the container cannot be configured, so the user must be told.
STARTUP_FAILURE_REASONS: Final = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "RegistryUnavailable",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
DEFAULT_STARTUP_GRACE: Final = timedelta(minutes=2)
DEFAULT_MAX_STOPPED_WRITE_RETRY_AGE: Final = timedelta(minutes=10)


# --- small readers of API objects -----------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _sequence(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(obj.get("metadata"))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_metadata(obj).get("labels"))


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _conditions(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [_mapping(c) for c in _sequence(_mapping(obj.get("status")).get("conditions"))]


def _condition(obj: Mapping[str, Any], condition_type: str) -> Mapping[str, Any] | None:
    return next((c for c in _conditions(obj) if c.get("type") == condition_type), None)


def _positive_int(value: Any) -> int | None:
    if not isinstance(value, str) or not value.isascii() or not value.isdigit():
        return None
    number = int(value)
    return number if number > 0 else None


def work_unit_ids(obj: Mapping[str, Any]) -> tuple[int, int, int] | None:
    """(xid, wid, eid) from the labels the Actuator writes; None means "not ours".

    Garbage is treated like absence: a label we cannot parse names no execution we could
    write to, and guessing would risk touching someone else's work unit.
    """
    labels = _labels(obj)
    ids = tuple(
        _positive_int(labels.get(key)) for key in (EXPERIMENT_ID, WORK_UNIT_ID, EXECUTION_ID)
    )
    xid, wid, eid = ids
    if xid is None or wid is None or eid is None:
        return None
    return xid, wid, eid


# --- JobSet (§8.1) --------------------------------------------------------------------


def jobset_state_rule(jobset: Mapping[str, Any], pods: PodSummary = NO_PODS) -> MappingRule:
    """The §8.1 rule behind :func:`observe_jobset`'s state, for a metric label."""
    return decide_work_unit_state(jobset, pods).rule


def jobset_pods(jobset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> PodSummary:
    """The summary R4 reads (docs/decisions/0019) of those of ``pods`` that are this
    JobSet's: the pod cache holds every execution's pods under the same JobSet name."""
    return summarize_pods(p for p in pods if belongs_to(p, jobset))


def _jobset_state_update_time(jobset: Mapping[str, Any], observed_at: datetime) -> datetime:
    """Newest condition transition; on the finalizer path (R1) at least the deletion time.

    The deletion is the transition R1 reports. Conditions alone may all predate the user's
    stop, and then the §5.2 time order would reject STOPPED after STOPPING.
    """
    newest = observation_state_update_time(jobset, observed_at)
    deleted_at = parse_rfc3339(_metadata(jobset).get("deletionTimestamp"))
    return newest if deleted_at is None else max(newest, deleted_at)


def _proto_condition(item: Mapping[str, Any]) -> Condition:
    condition = Condition(
        type=_str(item.get("type")),
        status=_str(item.get("status")),
        reason=_str(item.get("reason")),
        message=_str(item.get("message")),
    )
    set_timestamp(condition.update_time, parse_rfc3339(item.get("lastTransitionTime")))
    return condition


def jobset_status(jobset: Mapping[str, Any]) -> JobSetStatus:
    """``status.detailed_status.jobset_status``: the JobSet's own status, field for field."""
    status = _mapping(jobset.get("status"))
    return JobSetStatus(
        conditions=[_proto_condition(c) for c in _conditions(jobset)],
        restarts=_int(status.get("restarts")),
        replicated_jobs_status=[
            ReplicatedJobStatus(
                name=_str(item.get("name")),
                ready=_int(item.get("ready")),
                succeeded=_int(item.get("succeeded")),
                active=_int(item.get("active")),
                failed=_int(item.get("failed")),
            )
            for item in map(_mapping, _sequence(status.get("replicatedJobsStatus")))
        ],
    )


def _service_account(jobset: Mapping[str, Any]) -> str:
    """The first pod template's ``serviceAccountName``; the Actuator sets one for all."""
    replicated_jobs = _sequence(_mapping(jobset.get("spec")).get("replicatedJobs"))
    if not replicated_jobs:
        return ""
    job_spec = _mapping(_mapping(_mapping(replicated_jobs[0]).get("template")).get("spec"))
    pod_spec = _mapping(_mapping(job_spec.get("template")).get("spec"))
    return _str(pod_spec.get("serviceAccountName"))


def jobset_metadata(jobset: Mapping[str, Any]) -> WorkUnitExecutionMetadata:
    metadata = _metadata(jobset)
    return WorkUnitExecutionMetadata(
        type=WorkUnitExecutionMetadata.JOB_SET,
        resource_name=_str(metadata.get("name")),
        namespace=_str(metadata.get("namespace")),
        service_account=_service_account(jobset),
    )


def reobserve_on_pod_change(jobset: Mapping[str, Any]) -> bool:
    """Whether a change to one of this JobSet's pods may change its state: only R4 reads
    the pods, and only for a suspended JobSet that is not being deleted (R1 first)."""
    suspended = _mapping(jobset.get("spec")).get("suspend") is True
    return suspended and not _metadata(jobset).get("deletionTimestamp")


def observe_jobset(
    jobset: Mapping[str, Any],
    *,
    observed_at: datetime,
    failure: StructuredMessage | None = None,
    pods: PodSummary = NO_PODS,
) -> Observation | None:
    """The JobSet row of SPEC §4: state (R1–R9, R4 reading ``pods`` too), detailed status
    and metadata.

    ``failure`` (``reconciler.failure``: why it failed) rides along as the
    ``system_message`` of a FAILED observation only, forced: it is the execution's last
    word and must replace an earlier ERROR such as the startup diagnostic it may explain.
    A resend changes nothing — a FAILED execution is immutable, and an equal message is
    not stored twice (§5.3) — so the status messages get it once.

    None when the JobSet carries no valid XMC labels: it is not ours to report.
    """
    ids = work_unit_ids(jobset)
    if ids is None:
        return None
    xid, wid, eid = ids
    state = decide_work_unit_state(jobset, pods).state
    status = WorkUnitStatus(
        state=WorkUnitStatus.WorkUnitState.ValueType(state),
        detailed_status=ExecutableStatus(jobset_status=jobset_status(jobset)),
    )
    set_timestamp(status.state_update_time, _jobset_state_update_time(jobset, observed_at))
    execution = WorkUnitExecution(status=status, metadata=jobset_metadata(jobset))
    if failure is None or state != WorkUnitState.FAILED:
        return Observation(xid, wid, eid, Source.JOBSET, execution, JOBSET_MASK)
    execution.status.system_message.CopyFrom(failure)
    return Observation(
        xid, wid, eid, Source.JOBSET, execution, FAILED_JOBSET_MASK,
        force_status_message_update=True,
    )  # fmt: skip


# --- Workload (§8.2) ------------------------------------------------------------------


@dataclass(frozen=True)
class QueuePosition:
    """Kueue's visibility API (``pendingworkloads``) for one waiting Workload; None = unknown."""

    #: 0-based, as Kueue reports it.
    position_in_cluster_queue: int | None
    total: int | None


def workload_owner(workload: Mapping[str, Any]) -> str | None:
    """Name of the JobSet controlling this Workload (Kueue makes it the controller owner)."""
    for ref in map(_mapping, _sequence(_metadata(workload).get("ownerReferences"))):
        if ref.get("controller") is True and ref.get("kind") == "JobSet":
            return _str(ref.get("name")) or None
    return None


def scheduling_message(
    workload: Mapping[str, Any], *, xid: int, wid: int, queue_position: QueuePosition | None
) -> StructuredMessage | None:
    """Kueue's reason for keeping the Workload waiting; None when it is not waiting."""
    reserved = _condition(workload, "QuotaReserved")
    if (
        reserved is None
        or reserved.get("status") != "False"
        or reserved.get("reason") not in WAITING_REASONS
    ):
        return None
    position = queue_position or QueuePosition(None, None)
    in_queue = position.position_in_cluster_queue
    message = StructuredMessage(
        severity=StructuredMessage.INFO,
        source=StructuredMessage.SCHEDULER,
        parent=work_unit_name(xid, wid),
        user_facing_text=_str(reserved.get("message")),
        auxiliary_info=AuxiliaryInfo(
            queue_info=QueueInfo(
                position_in_queue=0 if in_queue is None else in_queue + 1,
                total_workloads_in_queue=position.total or 0,
            )
        ),
    )
    set_timestamp(message.create_time, parse_rfc3339(reserved.get("lastTransitionTime")))
    return message


def workload_metadata(workload: Mapping[str, Any]) -> WorkUnitExecutionMetadata:
    """Where Kueue placed the Workload; empty fields leave the stored ones alone (§5.3).

    ``resource_flavor`` is the flavor of the first pod set's first resource (in the key
    order the API server serialises, i.e. sorted): XMC shows one flavor per execution, and
    a pod set's resources normally share one. ``node_selectors`` come from the template of
    that same pod set.
    """
    status = _mapping(workload.get("status"))
    metadata = WorkUnitExecutionMetadata()
    cluster = _str(status.get("clusterName"))
    if cluster:
        metadata.multi_kueue_cluster_name = cluster
        metadata.executing_cluster.CopyFrom(ClusterInfo(cluster_name=cluster))
    assignments = _sequence(_mapping(status.get("admission")).get("podSetAssignments"))
    if not assignments:
        return metadata
    first = _mapping(assignments[0])
    flavors = _mapping(first.get("flavors"))
    if flavors:
        metadata.resource_flavor = _str(flavors[min(flavors)])
    metadata.node_selectors.update(_pod_set_node_selector(workload, _str(first.get("name"))))
    return metadata


def _pod_set_node_selector(workload: Mapping[str, Any], pod_set_name: str) -> dict[str, str]:
    for pod_set in map(_mapping, _sequence(_mapping(workload.get("spec")).get("podSets"))):
        if pod_set.get("name") == pod_set_name:
            pod_spec = _mapping(_mapping(pod_set.get("template")).get("spec"))
            selector = _mapping(pod_spec.get("nodeSelector"))
            return {str(k): v for k, v in selector.items() if isinstance(v, str)}
    return {}


def observe_workload(
    workload: Mapping[str, Any],
    *,
    jobset_ids: tuple[int, int, int],
    queue_position: QueuePosition | None,
    observed_at: datetime,
) -> Observation:
    """The Workload row of SPEC §4: scheduling information and placement metadata.

    A Workload that is not waiting sends ``status.scheduling_information`` masked but
    unset, which clears the waiting message left from before admission. Kueue's
    ``Admitted`` and ``Evicted`` conditions are not read: an eviction shows up as
    ``QuotaReserved=False`` (``Pending`` or ``PendingEvaluation``) again once its quota is
    released. ``observed_at`` is unused today; it is part of
    the signature so every ``observe_*`` reads alike and may stamp later.
    """
    del observed_at
    xid, wid, eid = jobset_ids
    status = WorkUnitStatus()
    message = scheduling_message(workload, xid=xid, wid=wid, queue_position=queue_position)
    if message is not None:
        status.scheduling_information.CopyFrom(message)
    execution = WorkUnitExecution(status=status, metadata=workload_metadata(workload))
    return Observation(xid, wid, eid, Source.WORKLOAD, execution, WORKLOAD_MASK)


# --- Pods: startup diagnostics (§8.3) -------------------------------------------------


@dataclass(frozen=True)
class StuckContainer:
    pod: str
    container: str
    reason: str
    message: str


def belongs_to(obj: Mapping[str, Any], jobset: Mapping[str, Any]) -> bool:
    """Whether a pod or Job is this JobSet's: by the JobSet's UID when labelled with it,
    since every execution reuses the JobSet's name."""
    labels, metadata = _labels(obj), _metadata(jobset)
    uid = labels.get(JOBSET_UID_LABEL)
    if uid is not None:
        return bool(uid == metadata.get("uid"))
    return bool(labels.get(JOBSET_NAME_LABEL) == metadata.get("name"))


def _stuck_containers(pods: Iterable[Mapping[str, Any]]) -> list[StuckContainer]:
    """Regular containers only: init containers are retried by the kubelet on their own."""
    found: list[StuckContainer] = []
    for pod in sorted(pods, key=lambda p: _str(_metadata(p).get("name"))):
        statuses = _sequence(_mapping(pod.get("status")).get("containerStatuses"))
        for status in map(_mapping, statuses):
            waiting = _mapping(_mapping(status.get("state")).get("waiting"))
            reason = _str(waiting.get("reason"))
            if reason in STARTUP_FAILURE_REASONS:
                found.append(
                    StuckContainer(
                        pod=_str(_metadata(pod).get("name")),
                        container=_str(status.get("name")),
                        reason=reason,
                        message=_str(waiting.get("message")),
                    )
                )
    return found


def _admitted_since(jobset: Mapping[str, Any]) -> datetime | None:
    suspended = _condition(jobset, "Suspended")
    if suspended is None or suspended.get("status") != "False":
        return None
    return parse_rfc3339(suspended.get("lastTransitionTime"))


def _diagnostic_text(stuck: Sequence[StuckContainer]) -> str:
    first = stuck[0]
    text = f'Container "{first.container}" of pod "{first.pod}" cannot start: {first.reason}'
    if first.message:
        text += f" ({first.message})"
    more = len(stuck) - 1
    if more:
        text += f"; {more} more container{'s' if more > 1 else ''} affected"
    return text + "."


def startup_diagnostics(
    jobset: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    grace: timedelta = DEFAULT_STARTUP_GRACE,
) -> StructuredMessage | None:
    """An ERROR naming the first container that cannot start, once admission is ``grace`` old.

    The grace keeps a slow first pull (``ErrImagePull`` flickers before it succeeds) from
    alarming anyone. Admission time is the ``Suspended=False`` transition; a JobSet never
    resumed, or suspended again, has nothing to diagnose. Deterministic: pods by name,
    then container order, so a resync does not produce a "different" message.
    """
    admitted_at = _admitted_since(jobset)
    if admitted_at is None or as_utc(now) - admitted_at < grace:
        return None
    stuck = _stuck_containers(p for p in pods if belongs_to(p, jobset))
    if not stuck:
        return None
    ids = work_unit_ids(jobset)
    return StructuredMessage(
        severity=StructuredMessage.ERROR,
        source=StructuredMessage.KUBERNETES,
        parent="" if ids is None else work_unit_name(ids[0], ids[1]),
        user_facing_text=_diagnostic_text(stuck),
    )


def observe_pods(
    jobset: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: datetime,
    grace: timedelta = DEFAULT_STARTUP_GRACE,
) -> Observation | None:
    """The startup diagnostics as a POD-sourced observation; never touches the state.

    None when there is nothing to report: the message is left in place (a later state
    change clears it, §5.3) rather than being erased by every healthy pod event.
    """
    ids = work_unit_ids(jobset)
    if ids is None:
        return None
    message = startup_diagnostics(jobset, pods, now=now, grace=grace)
    if message is None:
        return None
    execution = WorkUnitExecution(status=WorkUnitStatus(system_message=message))
    return Observation(*ids, Source.POD, execution, POD_MASK)


# --- Finalizer bypass (§8.4) ----------------------------------------------------------


class FinalizerAction(enum.StrEnum):
    """What to do with a JobSet on the deletion path; also the metric label."""

    #: Not being deleted, or the XMC finalizer is not (or no longer) on it.
    NOT_OURS = "not_ours"
    #: Write the terminal state synchronously, then remove the finalizer.
    WRITE_THEN_REMOVE = "write_then_remove"
    #: The previous write failed and the retry window is still open: write again (backoff).
    RETRY_WRITE = "retry_write"
    #: Give up on the write and remove the finalizer; log at ERROR and count.
    REMOVE_ANYWAY = "remove_anyway"


@dataclass(frozen=True)
class FinalizerDecision:
    action: FinalizerAction
    #: The terminal-state write (R1) for WRITE_THEN_REMOVE and RETRY_WRITE, else None.
    observation: Observation | None
    reason: str


def decide_finalizer(
    jobset: Mapping[str, Any],
    *,
    now: datetime,
    last_write_failed: bool,
    max_retry_age: timedelta = DEFAULT_MAX_STOPPED_WRITE_RETRY_AGE,
    failure: StructuredMessage | None = None,
) -> FinalizerDecision:
    """Hold the deletion until the terminal state is written, but never forever.

    The write targets the eid from the JobSet's label, so an old execution's JobSet is
    fenced off from a newer execution by the store (§5.1). A JobSet whose labels name no
    execution can never be written for, so its finalizer goes at once. ``failure`` is
    the reason a FAILED JobSet failed (see :func:`observe_jobset`).
    """
    metadata = _metadata(jobset)
    deletion = metadata.get("deletionTimestamp")
    if not deletion or FINALIZER not in _sequence(metadata.get("finalizers")):
        return FinalizerDecision(FinalizerAction.NOT_OURS, None, "no XMC finalizer to release")
    observation = observe_jobset(jobset, observed_at=now, failure=failure)
    if observation is None:
        return FinalizerDecision(
            FinalizerAction.REMOVE_ANYWAY, None, "no valid XMC labels: nothing to write"
        )
    if not last_write_failed:
        return FinalizerDecision(
            FinalizerAction.WRITE_THEN_REMOVE, observation, "deleting: write the terminal state"
        )
    deleted_at = parse_rfc3339(deletion)
    if deleted_at is None or as_utc(now) - deleted_at >= max_retry_age:
        return FinalizerDecision(
            FinalizerAction.REMOVE_ANYWAY,
            None,
            f"terminal-state write still failing {max_retry_age} after deletion",
        )
    return FinalizerDecision(
        FinalizerAction.RETRY_WRITE, observation, "terminal-state write failed: retry"
    )


def finalizer_removal_patch(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch dropping only XMC's finalizer.

    A merge patch replaces the whole list, so ``resourceVersion`` rides along as a
    precondition: if another controller changed the finalizers meanwhile, the patch gets
    409 Conflict instead of erasing theirs.
    """
    metadata = _metadata(jobset)
    kept = [f for f in _sequence(metadata.get("finalizers")) if f != FINALIZER]
    patch: dict[str, Any] = {"finalizers": kept}
    resource_version = metadata.get("resourceVersion")
    if resource_version:
        patch["resourceVersion"] = resource_version
    return {"metadata": patch}


# --- Orphans (§8.6) -------------------------------------------------------------------


@dataclass(frozen=True)
class WorkUnitSnapshot:
    """The store's view of a work unit, enough to judge a JobSet."""

    eid: int
    state: WorkUnitState


class OrphanReason(enum.StrEnum):
    """Why a JobSet is, or is not, deleted by the resync; also the metric label."""

    CURRENT = "current"
    ALREADY_DELETING = "already_deleting"
    #: The JobSet names a newer execution than the store knows: a stale read, not an orphan.
    AHEAD_OF_STORE = "ahead_of_store"
    WORK_UNIT_GONE = "work_unit_gone"
    SUPERSEDED = "superseded"
    WORK_UNIT_TERMINAL = "work_unit_terminal"


_ORPHAN_REASONS: Final = frozenset(
    {OrphanReason.WORK_UNIT_GONE, OrphanReason.SUPERSEDED, OrphanReason.WORK_UNIT_TERMINAL}
)


@dataclass(frozen=True)
class OrphanDecision:
    reason: OrphanReason

    @property
    def orphan(self) -> bool:
        """Delete the JobSet (with a UID precondition)."""
        return self.reason in _ORPHAN_REASONS


def decide_orphan(
    jobset_ids: tuple[int, int, int],
    work_unit: WorkUnitSnapshot | None,
    *,
    deleting: bool = False,
) -> OrphanDecision:
    """A JobSet nobody will ever stop is deleted, so a race between tasks never leaves a job
    running unseen (§8.6). A JobSet already being deleted is left to its finalizer."""
    _, _, eid = jobset_ids
    if deleting:
        return OrphanDecision(OrphanReason.ALREADY_DELETING)
    if work_unit is None:
        return OrphanDecision(OrphanReason.WORK_UNIT_GONE)
    if eid < work_unit.eid:
        return OrphanDecision(OrphanReason.SUPERSEDED)
    if eid > work_unit.eid:
        return OrphanDecision(OrphanReason.AHEAD_OF_STORE)
    if work_unit.state in EXECUTION_TERMINAL_STATES:
        return OrphanDecision(OrphanReason.WORK_UNIT_TERMINAL)
    return OrphanDecision(OrphanReason.CURRENT)
