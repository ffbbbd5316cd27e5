"""Pure view models: protos in, plain dicts and lists out, for the templates.

Everything a page shows is decided here, so the rules (which severity is worst, how the
state bar is split, which buttons a unit gets) are table-tested without a server, and the
templates only lay values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.timestamp_pb2 import Timestamp

from xmc.model.states import (
    EXECUTION_TERMINAL_STATES,
    ActiveState,
    LaunchState,
    Priority,
    Severity,
    WorkUnitState,
)
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus, WorkUnitStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState
Row = dict[str, Any]

#: The colour family of each state in the bar and the badges (CSS classes ``st-*``).
STATE_TONE: Mapping[WorkUnitState, str] = {
    S.WORK_UNIT_STATE_UNSPECIFIED: "idle",
    S.INITIALIZING: "pending",
    S.SCHEDULING: "pending",
    S.SCHEDULING_PAUSED: "paused",
    S.STARTING: "pending",
    S.RUNNING: "running",
    S.PARTIALLY_FAILED: "warning",
    S.STOPPING: "stopping",
    S.RESTARTING: "stopping",
    S.DESCHEDULING: "stopping",
    S.STOPPED: "stopped",
    S.COMPLETED: "done",
    S.FAILED: "failed",
}

#: The bar's order: what is still going first, outcomes last.
BAR_ORDER: tuple[WorkUnitState, ...] = (
    S.RUNNING, S.PARTIALLY_FAILED, S.STARTING, S.SCHEDULING, S.SCHEDULING_PAUSED,
    S.INITIALIZING, S.RESTARTING, S.STOPPING, S.DESCHEDULING, S.COMPLETED, S.FAILED,
    S.STOPPED, S.WORK_UNIT_STATE_UNSPECIFIED,
)  # fmt: skip

#: States a user may pick in the experiment page's filter.
FILTER_STATES: tuple[str, ...] = tuple(s.name for s in BAR_ORDER if s)


def enum_name(enum: type[Any], value: int) -> str:
    """The member's name (a Python or a protobuf enum), or the number when this build does
    not know it."""
    try:
        if hasattr(enum, "Name"):
            return str(enum.Name(value))
        return str(enum(value).name)
    except ValueError:
        return str(value)


def fmt_time(ts: Timestamp) -> str:
    """``2026-01-01 12:00:03Z``, or '' for an unset timestamp."""
    if not ts.seconds and not ts.nanos:
        return ""
    return ts.ToDatetime().replace(microsecond=0).isoformat(sep=" ") + "Z"


def known_state(value: int) -> WorkUnitState:
    """The state, or UNSPECIFIED for a number this build does not know."""
    return S(value) if value in S._value2member_map_ else S.WORK_UNIT_STATE_UNSPECIFIED


def tail_id(name: str) -> str:
    """The trailing id of a resource name (``experiments/7/workUnits/3`` → ``3``)."""
    return name.rsplit("/", 1)[-1]


def state_bar(counts: Iterable[tuple[int, int]]) -> list[Row]:
    """Segments of the state bar from ``(state, count)`` pairs: non-empty states in
    :data:`BAR_ORDER`, each with its share in percent (the shares sum to 100) and the
    share of the segments before it (where it starts)."""
    merged: dict[WorkUnitState, int] = {}
    for state, count in counts:
        if count > 0:
            key = known_state(state)
            merged[key] = merged.get(key, 0) + count
    total = sum(merged.values())
    segments: list[Row] = []
    before = 0
    for state in (state for state in BAR_ORDER if state in merged):
        segments.append(
            {
                "state": state.name,
                "count": merged[state],
                "percent": round(100 * merged[state] / total, 2),
                "offset": round(100 * before / total, 2),
                "tone": STATE_TONE[state],
            }
        )
        before += merged[state]
    return segments


def worst_severity(counts: Iterable[tuple[int, int]]) -> str:
    """The name of the highest severity with a non-zero count, or '' when none."""
    seen = [severity for severity, count in counts if count > 0 and severity > 0]
    return enum_name(Severity, max(seen)) if seen else ""


def status_bar(status: ExperimentStatus) -> list[Row]:
    return state_bar((c.state, c.count) for c in status.child_state_counts)


def experiment_row(experiment: Experiment) -> Row:
    status = experiment.status
    return {
        "xid": tail_id(experiment.name),
        "title": experiment.title or "(untitled)",
        "creator": experiment.creator,
        "created": fmt_time(experiment.create_time),
        "active": enum_name(ActiveState, status.active_state).removeprefix("ACTIVE_STATE_"),
        "launch": enum_name(LaunchState, status.launch_state).removeprefix("LAUNCH_STATE_"),
        "bar": status_bar(status),
        "total": sum(c.count for c in status.child_state_counts),
        "worst": worst_severity((c.severity, c.count) for c in status.message_severity_counts),
        "tags": list(experiment.tags),
    }


def message_text(status: WorkUnitStatus) -> tuple[str, str]:
    """The user-facing text to show for a unit and its severity: the user's own message
    when set, else the system's."""
    for message in (status.user_message, status.system_message):
        if message.user_facing_text:
            return message.user_facing_text, enum_name(Severity, message.severity)
    return "", ""


def can_stop(state: WorkUnitState) -> bool:
    """Stop is offered while the unit may still run (the ESS decides in the end)."""
    return state not in EXECUTION_TERMINAL_STATES and state != S.STOPPING


def work_unit_row(unit: WorkUnit) -> Row:
    execution = unit.current_work_unit_execution
    status = execution.status
    state = known_state(status.state)
    text, severity = message_text(status)
    return {
        "wid": tail_id(unit.name),
        "name": unit.name,
        "state": state.name,
        "tone": STATE_TONE[state],
        "execution": tail_id(execution.name) if execution.name else "",
        "tags": list(unit.tags),
        "changed": fmt_time(status.state_update_time) or fmt_time(unit.update_time),
        "message": text,
        "severity": severity,
        "can_stop": can_stop(state),
        "priority": enum_name(Priority, unit.priority).removeprefix("PRIORITY_"),
    }


def execution_row(execution: WorkUnitExecution) -> Row:
    status = execution.status
    metadata = execution.metadata
    state = known_state(status.state)
    return {
        "eid": tail_id(execution.name),
        "activity": enum_name(WorkUnitExecution.WorkUnitExecutionState, execution.state),
        "state": state.name,
        "tone": STATE_TONE[state],
        "created": fmt_time(execution.create_time),
        "updated": fmt_time(execution.update_time),
        "completed": fmt_time(execution.complete_time),
        "resource": metadata.resource_name,
        "namespace": metadata.namespace,
    }


def safe_href(url: str) -> str:
    """``url`` when it is http(s), else '' (a ``javascript:`` link is never drawn)."""
    return url if urlsplit(url).scheme in ("http", "https") else ""


def message_row(message: StatusMessage) -> Row:
    content = message.content
    return {
        "eid": message.execution_id,
        "time": fmt_time(content.create_time),
        "severity": enum_name(Severity, content.severity),
        "source": enum_name(StructuredMessage.Source, content.source).removeprefix("SOURCE_"),
        "text": content.user_facing_text,
        "url": safe_href(content.user_facing_url.url)
        if content.HasField("user_facing_url")
        else "",
    }


def jobset_detail(status: WorkUnitStatus) -> Row:
    """Conditions and replicated-job counts of the JobSet status the Reconciler stored."""
    jobset = status.detailed_status.jobset_status
    return {
        "restarts": jobset.restarts,
        "conditions": [
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "time": fmt_time(c.update_time),
            }
            for c in jobset.conditions
        ],
        "replicated_jobs": [
            {
                "name": r.name,
                "ready": r.ready,
                "active": r.active,
                "succeeded": r.succeeded,
                "failed": r.failed,
            }
            for r in jobset.replicated_jobs_status
        ],
    }


def scheduling_info(execution: WorkUnitExecution) -> Row:
    """Where the unit waits or runs: queue position, cluster, flavor."""
    info = execution.status.scheduling_information
    queue = info.auxiliary_info.queue_info if info.auxiliary_info.HasField("queue_info") else None
    metadata = execution.metadata
    cluster = metadata.executing_cluster
    return {
        "text": info.user_facing_text,
        "position": queue.position_in_queue if queue else None,
        "queued": queue.total_workloads_in_queue if queue else None,
        "cluster": "/".join(
            p for p in (cluster.project, cluster.location, cluster.cluster_name) if p
        ),
        "multikueue": metadata.multi_kueue_cluster_name,
        "flavor": metadata.resource_flavor,
        "node_selectors": dict(sorted(metadata.node_selectors.items())),
    }


def state_filter(state: str) -> str:
    """The AIP-160 filter of the experiment page's state choice ('' = every unit);
    anything but a known state name raises ValueError."""
    if not state:
        return ""
    if state not in FILTER_STATES:
        raise ValueError(f"unknown state {state!r}; pick one of {', '.join(FILTER_STATES)}")
    return f"state = {state}"
