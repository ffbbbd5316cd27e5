"""The JobSet row of SPEC §4 (§8.1): state, detailed status and metadata of a JobSet."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from reconciler.observation import Observation, Source
from reconciler.observe.read import belongs_to, work_unit_ids
from xmc.kjson import as_int, as_mapping, as_sequence, as_str, conditions_of, metadata_of
from xmc.model.jobset import (
    NO_PODS,
    MappingRule,
    PodSummary,
    decide_work_unit_state,
    is_finishing,
    observation_state_update_time,
    summarize_pods,
)
from xmc.model.states import WorkUnitState
from xmc.timestamps import parse_rfc3339, set_timestamp
from xmc_api.cloud.xmanager.v1.status_pb2 import (
    Condition,
    ExecutableStatus,
    JobSetStatus,
    ReplicatedJobStatus,
    WorkUnitStatus,
)
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)
from xmc_api.internal.v1.executions_pb2 import RunFailure

JOBSET_MASK: Final = ("status.state", "status.detailed_status", "metadata")
#: A FAILED JobSet's observation also says why (``reconciler.failure``).
FAILED_JOBSET_MASK: Final = (*JOBSET_MASK, "status.system_message")


def jobset_state_rule(jobset: Mapping[str, Any], pods: PodSummary = NO_PODS) -> MappingRule:
    """The §8.1 rule behind :func:`observe_jobset`'s state, for a metric label."""
    return decide_work_unit_state(jobset, pods).rule


def jobset_pods(jobset: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> PodSummary:
    """The summary R4 and :func:`is_finishing` read (docs/decisions/0019, 0030) of those
    of ``pods`` that are this JobSet's: the pod cache holds every execution's pods under
    the same JobSet name."""
    return summarize_pods(p for p in pods if belongs_to(p, jobset))


def _jobset_state_update_time(jobset: Mapping[str, Any], observed_at: datetime) -> datetime:
    """Newest condition transition; on the finalizer path (R1) at least the deletion time.

    The deletion is the transition R1 reports. Conditions alone may all predate the user's
    stop, and then the §5.2 time order would reject STOPPED after STOPPING.
    """
    newest = observation_state_update_time(jobset, observed_at)
    deleted_at = parse_rfc3339(metadata_of(jobset).get("deletionTimestamp"))
    return newest if deleted_at is None else max(newest, deleted_at)


def _proto_condition(item: Mapping[str, Any]) -> Condition:
    condition = Condition(
        type=as_str(item.get("type")),
        status=as_str(item.get("status")),
        reason=as_str(item.get("reason")),
        message=as_str(item.get("message")),
    )
    set_timestamp(condition.update_time, parse_rfc3339(item.get("lastTransitionTime")))
    return condition


def jobset_status(jobset: Mapping[str, Any]) -> JobSetStatus:
    """``status.detailed_status.jobset_status``: the JobSet's own status, field for field."""
    status = as_mapping(jobset.get("status"))
    return JobSetStatus(
        conditions=[_proto_condition(c) for c in conditions_of(jobset)],
        restarts=as_int(status.get("restarts")),
        replicated_jobs_status=[
            ReplicatedJobStatus(
                name=as_str(item.get("name")),
                ready=as_int(item.get("ready")),
                succeeded=as_int(item.get("succeeded")),
                active=as_int(item.get("active")),
                failed=as_int(item.get("failed")),
            )
            for item in map(as_mapping, as_sequence(status.get("replicatedJobsStatus")))
        ],
    )


def _service_account(jobset: Mapping[str, Any]) -> str:
    """The first pod template's ``serviceAccountName``; the Actuator sets one for all."""
    replicated_jobs = as_sequence(as_mapping(jobset.get("spec")).get("replicatedJobs"))
    if not replicated_jobs:
        return ""
    job_spec = as_mapping(as_mapping(as_mapping(replicated_jobs[0]).get("template")).get("spec"))
    pod_spec = as_mapping(as_mapping(job_spec.get("template")).get("spec"))
    return as_str(pod_spec.get("serviceAccountName"))


def jobset_metadata(jobset: Mapping[str, Any]) -> WorkUnitExecutionMetadata:
    metadata = metadata_of(jobset)
    return WorkUnitExecutionMetadata(
        type=WorkUnitExecutionMetadata.JOB_SET,
        resource_name=as_str(metadata.get("name")),
        namespace=as_str(metadata.get("namespace")),
        service_account=_service_account(jobset),
    )


def observe_jobset(
    jobset: Mapping[str, Any],
    *,
    observed_at: datetime,
    failure: StructuredMessage | None = None,
    pods: PodSummary = NO_PODS,
    facts: RunFailure | None = None,
) -> Observation | None:
    """The JobSet row of SPEC §4: state (R1–R9, R4 reading ``pods`` too), detailed status
    and metadata.

    ``failure`` (``reconciler.failure``: why it failed) rides along as the
    ``system_message`` of a FAILED observation only, forced: it is the execution's last
    word and must replace an earlier ERROR such as the startup diagnostic it may explain.
    A resend changes nothing — a FAILED execution is immutable, and an equal message is
    not stored twice (§5.3) — so the status messages get it once. ``facts`` (the same
    reason as data) ride along with a FAILED state for the ESS's retry decision.

    None when the JobSet carries no valid XMC labels: it is not ours to report; and None
    while its Jobs are finishing (``is_finishing``, docs/decisions/0030): its status then
    reads like a start (R7), and the terminal condition follows within moments.
    """
    ids = work_unit_ids(jobset)
    if ids is None or is_finishing(jobset, pods):
        return None
    xid, wid, eid = ids
    state = decide_work_unit_state(jobset, pods).state
    status = WorkUnitStatus(
        state=WorkUnitStatus.WorkUnitState.ValueType(state),
        detailed_status=ExecutableStatus(jobset_status=jobset_status(jobset)),
    )
    set_timestamp(status.state_update_time, _jobset_state_update_time(jobset, observed_at))
    execution = WorkUnitExecution(status=status, metadata=jobset_metadata(jobset))
    if state != WorkUnitState.FAILED:
        return Observation(xid, wid, eid, Source.JOBSET, execution, JOBSET_MASK)
    if failure is None:
        return Observation(xid, wid, eid, Source.JOBSET, execution, JOBSET_MASK, failure=facts)
    execution.status.system_message.CopyFrom(failure)
    return Observation(
        xid, wid, eid, Source.JOBSET, execution, FAILED_JOBSET_MASK,
        force_status_message_update=True, failure=facts,
    )  # fmt: skip
