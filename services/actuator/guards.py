"""The Actuator's guards (SPEC §7.2) as pure decisions over the live JobSet and the task.

Tasks are redelivered, reclaimed and processed by several consumers, so a handler can
meet a JobSet that a newer intent already replaced, or run a task that a newer one
already overtook. Two facts written on every JobSet settle both questions:

* ``xmc.google.com/execution-id`` — which execution the JobSet runs (the "k8s eid");
* ``xmc.google.com/last-edit`` — when the intent that last wrote it was made.

Order of the checks, and why:

1. No JobSet → the decision for "nothing live" (create, nothing to delete or patch).
2. Execution id before time: a JobSet of a newer execution also carries a newer
   last-edit, and a task overtaken by a newer execution is a success (skip and ack), not
   the permanent ``FAILED_PRECONDITION`` of a stale request.
3. Then ``IsActuationRequestValid``: an intent older than the JobSet's last edit must not
   undo the newer one.

A missing or unreadable execution-id label counts as 0 (oldest: XMC may act on it) and
the reason says so; an unreadable last-edit label counts as absent, so one bad label
cannot wedge a work unit. Each decision carries what the handler needs next (the UID for
the delete precondition, the merge patch) and a human-readable reason for the log.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from xmc import labels
from xmc.kjson import as_mapping, labels_of
from xmc.tasks import task_execution_id
from xmc.timestamps import as_utc, to_datetime
from xmc_api.internal.v1.tasks_pb2 import Task


def is_actuation_request_valid(task_operation_time: datetime, jobset_last_edit: str | None) -> bool:
    """The task is not older than the JobSet's last edit; no (readable) label → valid."""
    last_edit = _parse_last_edit(jobset_last_edit)
    return last_edit is None or as_utc(task_operation_time) >= last_edit


def is_execution_id_aligned(k8s_eid: int, target_eid: int) -> bool:
    """The live JobSet runs the target execution or an older one, never a newer one."""
    return k8s_eid <= target_eid


class DeleteAction(enum.StrEnum):
    """What the Delete handler (from Stop) does; low-cardinality, fit for a metric label."""

    DELETE = "delete"
    NOTHING_TO_DELETE = "nothing_to_delete"
    SUPERSEDED = "superseded"
    STALE_REQUEST = "stale_request"
    ALREADY_DELETING = "already_deleting"


@dataclass(frozen=True)
class DeleteDecision:
    """``uid`` is the delete precondition, so a newer JobSet of the same name survives;
    ``jobset_eid`` the execution the live JobSet runs (None: no JobSet)."""

    action: DeleteAction
    reason: str
    uid: str | None = None
    jobset_eid: int | None = None


class RestartAction(enum.StrEnum):
    DELETE_THEN_CREATE = "delete_then_create"
    CREATE = "create"
    ALREADY_DONE = "already_done"
    SUPERSEDED = "superseded"
    STALE_REQUEST = "stale_request"


@dataclass(frozen=True)
class RestartDecision:
    """``uid`` (DELETE_THEN_CREATE only) is the precondition of the delete."""

    action: RestartAction
    reason: str
    uid: str | None = None


class DuplicateAction(enum.StrEnum):
    SAME_EXECUTION = "same_execution"
    CONFLICT = "conflict"


@dataclass(frozen=True)
class DuplicateDecision:
    action: DuplicateAction
    reason: str


class UpdateAction(enum.StrEnum):
    PATCH = "patch"
    NOTHING = "nothing"
    SUPERSEDED = "superseded"
    STALE_REQUEST = "stale_request"


@dataclass(frozen=True)
class UpdateDecision:
    """``patch`` (PATCH only) is a JSON merge patch; ``uid`` identifies the JobSet it is for."""

    action: UpdateAction
    reason: str
    patch: Mapping[str, Any] | None = None
    uid: str | None = None


def decide_delete(jobset: Mapping[str, Any] | None, task: Task) -> DeleteDecision:
    """Delete (from Stop) of execution ``task.target_eid``."""
    target = task.target_eid
    if jobset is None:
        return DeleteDecision(
            DeleteAction.NOTHING_TO_DELETE,
            f"no JobSet: nothing to delete; execution {target} is STOPPED",
        )
    live = LiveJobSet.read(jobset)
    if not is_execution_id_aligned(live.eid, target):
        return DeleteDecision(
            DeleteAction.SUPERSEDED,
            f"JobSet runs execution {live.eid}, newer than the target {target}",
            jobset_eid=live.eid,
        )
    if live.deleting:
        return DeleteDecision(
            DeleteAction.ALREADY_DELETING,
            live.explain(f"JobSet of execution {live.eid} is already being deleted"),
            live.uid,
            live.eid,
        )
    if stale := live.staleness(task):
        return DeleteDecision(DeleteAction.STALE_REQUEST, stale, jobset_eid=live.eid)
    return DeleteDecision(
        DeleteAction.DELETE,
        live.explain(f"JobSet runs execution {live.eid}, not newer than the target {target}"),
        live.uid,
        live.eid,
    )


def decide_restart(jobset: Mapping[str, Any] | None, task: Task) -> RestartDecision:
    """Restart: replace execution ``N = task.target_eid`` by the payload's ``N+1``."""
    new = task_execution_id(task)
    if jobset is None:
        return RestartDecision(RestartAction.CREATE, f"no JobSet: create execution {new}")
    live = LiveJobSet.read(jobset)
    if live.eid == new:
        return RestartDecision(
            RestartAction.ALREADY_DONE, f"JobSet already runs execution {new} (redelivery)"
        )
    if live.eid > new:
        return RestartDecision(
            RestartAction.SUPERSEDED,
            f"JobSet runs execution {live.eid}, newer than the restart's {new}",
        )
    if stale := live.staleness(task):
        return RestartDecision(RestartAction.STALE_REQUEST, stale)
    pending = " (already being deleted)" if live.deleting else ""
    return RestartDecision(
        RestartAction.DELETE_THEN_CREATE,
        live.explain(
            f"JobSet runs execution {live.eid}{pending}: delete it, then create execution {new}"
        ),
        live.uid,
    )


def verify_duplicate_jobset(existing: Mapping[str, Any], task: Task) -> DuplicateDecision:
    """``verifyDuplicateJobSet``: is the JobSet a Create met already this task's own?"""
    jobset_labels = labels_of(existing)
    expected = {
        labels.EXPERIMENT_ID: str(task.xid),
        labels.WORK_UNIT_ID: str(task.wid),
        labels.EXECUTION_ID: str(task_execution_id(task)),
    }
    mismatches = [
        f"{key}={jobset_labels.get(key)!r}, want {value!r}"
        for key, value in expected.items()
        if jobset_labels.get(key) != value
    ]
    if mismatches:
        return DuplicateDecision(
            DuplicateAction.CONFLICT, "a different JobSet holds the name: " + "; ".join(mismatches)
        )
    return DuplicateDecision(
        DuplicateAction.SAME_EXECUTION,
        f"JobSet of execution {task_execution_id(task)} already exists (redelivery)",
    )


def decide_update(jobset: Mapping[str, Any] | None, task: Task) -> UpdateDecision:
    """Update: patch the mutable labels (priority class; queue name only while suspended,
    since Kueue ignores a queue change once the workload is admitted) and the last edit.
    SET_PRIORITY (an admin's change, ``payload.priority_class``) takes the same guards
    (execution id, last edit) and patches the class it names and the last edit."""
    target = task.target_eid
    if jobset is None:
        return UpdateDecision(UpdateAction.NOTHING, "no JobSet: nothing to patch")
    live = LiveJobSet.read(jobset)
    if not is_execution_id_aligned(live.eid, target):
        return UpdateDecision(
            UpdateAction.SUPERSEDED,
            f"JobSet runs execution {live.eid}, newer than the target {target}",
        )
    if stale := live.staleness(task):
        return UpdateDecision(UpdateAction.STALE_REQUEST, stale)
    work_unit = task.payload.work_unit
    patch_labels = {
        labels.LAST_EDIT: labels.last_edit_label(to_datetime(task.operation_time)),
        labels.PRIORITY_CLASS: task.payload.priority_class
        or labels.priority_class_name(task.payload.experiment_priority, work_unit.priority),
    }
    queue = work_unit.executable.scheduling_constraints.queue_name
    # An admin's SET_PRIORITY changes the class only; an UPDATE also follows the queue.
    if live.suspended and queue and task.kind == Task.UPDATE:
        patch_labels[labels.QUEUE_NAME] = queue
    return UpdateDecision(
        UpdateAction.PATCH,
        live.explain(f"JobSet runs execution {live.eid}, not newer than the target {target}"),
        {"metadata": {"labels": patch_labels}},
        live.uid,
    )


# --- reading the live JobSet -----------------------------------------------------------


@dataclass(frozen=True)
class LiveJobSet:
    """The guard-relevant facts of a JobSet as the API server returned it."""

    uid: str | None
    eid: int
    eid_problem: str | None
    last_edit: str | None
    deleting: bool
    suspended: bool

    @classmethod
    def read(cls, jobset: Mapping[str, Any]) -> LiveJobSet:
        metadata = as_mapping(jobset.get("metadata"))
        jobset_labels = as_mapping(metadata.get("labels"))
        eid, problem = _read_execution_id(jobset_labels.get(labels.EXECUTION_ID))
        uid = metadata.get("uid")
        last_edit = jobset_labels.get(labels.LAST_EDIT)
        return cls(
            uid=uid if isinstance(uid, str) and uid else None,
            eid=eid,
            eid_problem=problem,
            last_edit=last_edit if isinstance(last_edit, str) else None,
            deleting=bool(metadata.get("deletionTimestamp")),
            suspended=as_mapping(jobset.get("spec")).get("suspend") is True,
        )

    @property
    def last_edit_time(self) -> datetime | None:
        """The last-edit label as a time; None when absent or unreadable."""
        return _parse_last_edit(self.last_edit)

    def explain(self, reason: str) -> str:
        return reason if self.eid_problem is None else f"{reason} ({self.eid_problem})"

    def staleness(self, task: Task) -> str | None:
        """Why the task is stale, or None when it may act."""
        operation_time = to_datetime(task.operation_time)
        last_edit = self.last_edit_time
        if last_edit is None or is_actuation_request_valid(operation_time, self.last_edit):
            return None
        return self.explain(
            f"task operation time {operation_time.isoformat()} is older than the JobSet's "
            f"last edit {last_edit.isoformat()}"
        )


def _read_execution_id(value: object) -> tuple[int, str | None]:
    if value is None:
        return 0, f"no {labels.EXECUTION_ID} label: treated as execution 0"
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value), None
    return 0, f"{labels.EXECUTION_ID} label {value!r} is not a number: treated as execution 0"


def _parse_last_edit(value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return labels.parse_last_edit_label(value)
    except ValueError:
        return None
