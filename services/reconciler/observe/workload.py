"""The Workload row of SPEC §4 (§8.2): Kueue's scheduling information and placement."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from reconciler.observation import Observation, Source
from xmc.kjson import as_mapping, as_sequence, as_str, condition_of, metadata_of
from xmc.names import work_unit_name
from xmc.timestamps import parse_rfc3339, set_timestamp
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
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

WORKLOAD_MASK: Final = ("status.scheduling_information", "metadata")

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


@dataclass(frozen=True)
class QueuePosition:
    """Kueue's visibility API (``pendingworkloads``) for one waiting Workload; None = unknown."""

    #: 0-based, as Kueue reports it.
    position_in_cluster_queue: int | None
    total: int | None


def workload_owner(workload: Mapping[str, Any]) -> str | None:
    """Name of the JobSet controlling this Workload (Kueue makes it the controller owner)."""
    for ref in map(as_mapping, as_sequence(metadata_of(workload).get("ownerReferences"))):
        if ref.get("controller") is True and ref.get("kind") == "JobSet":
            return as_str(ref.get("name")) or None
    return None


def scheduling_message(
    workload: Mapping[str, Any], *, xid: int, wid: int, queue_position: QueuePosition | None
) -> StructuredMessage | None:
    """Kueue's reason for keeping the Workload waiting; None when it is not waiting."""
    reserved = condition_of(workload, "QuotaReserved")
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
        user_facing_text=as_str(reserved.get("message")),
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
    status = as_mapping(workload.get("status"))
    metadata = WorkUnitExecutionMetadata()
    cluster = as_str(status.get("clusterName"))
    if cluster:
        metadata.multi_kueue_cluster_name = cluster
        metadata.executing_cluster.CopyFrom(ClusterInfo(cluster_name=cluster))
    assignments = as_sequence(as_mapping(status.get("admission")).get("podSetAssignments"))
    if not assignments:
        return metadata
    first = as_mapping(assignments[0])
    flavors = as_mapping(first.get("flavors"))
    if flavors:
        metadata.resource_flavor = as_str(flavors[min(flavors)])
    metadata.node_selectors.update(_pod_set_node_selector(workload, as_str(first.get("name"))))
    return metadata


def _pod_set_node_selector(workload: Mapping[str, Any], pod_set_name: str) -> dict[str, str]:
    for pod_set in map(as_mapping, as_sequence(as_mapping(workload.get("spec")).get("podSets"))):
        if pod_set.get("name") == pod_set_name:
            pod_spec = as_mapping(as_mapping(pod_set.get("template")).get("spec"))
            selector = as_mapping(pod_spec.get("nodeSelector"))
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
