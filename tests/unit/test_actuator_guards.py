"""The Actuator's guards (SPEC §7.2): a table per decision, whole decisions compared."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from actuator.guards import (
    DeleteAction,
    DeleteDecision,
    DuplicateAction,
    DuplicateDecision,
    RestartAction,
    RestartDecision,
    UpdateAction,
    UpdateDecision,
    decide_delete,
    decide_restart,
    decide_update,
    is_actuation_request_valid,
    is_execution_id_aligned,
    verify_duplicate_jobset,
)
from tests.builders import JobSetBuilder
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, LAST_EDIT, WORK_UNIT_ID, last_edit_label
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import (
    Executable,
    JobSetExecutable,
    SchedulingConstraints,
    WorkUnit,
)
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

T = datetime(2026, 3, 4, 5, 6, 7, 890123, tzinfo=UTC)
T_ISO = "2026-03-04T05:06:07.890123+00:00"
EARLIER = T - timedelta(microseconds=1)
LATER = T + timedelta(microseconds=1)
LATER_ISO = "2026-03-04T05:06:07.890124+00:00"
UID = "uid-1"
NO_LABEL = "no xmc.google.com/execution-id label: treated as execution 0"
GARBAGE = "xmc.google.com/execution-id label 'three' is not a number: treated as execution 0"


def task(
    kind: Task.Kind.ValueType = Task.DELETE,
    *,
    target_eid: int = 3,
    eid: int = 3,
    queue: str = "team-a",
    experiment_priority: int = 3,
    work_unit_priority: int = 1,
    xid: int = 42,
    wid: int = 7,
) -> Task:
    work_unit = WorkUnit(
        name=f"experiments/{xid}/workUnits/{wid}",
        priority=work_unit_priority,  # type: ignore[arg-type]
        executable=Executable(
            scheduling_constraints=SchedulingConstraints(queue_name=queue),
            jobset=JobSetExecutable(),
        ),
    )
    out = Task(
        task_id="t-1",
        kind=kind,
        xid=xid,
        wid=wid,
        target_eid=target_eid,
        payload=TaskPayload(
            work_unit=work_unit,
            eid=eid,
            experiment_priority=experiment_priority,  # type: ignore[arg-type]
        ),
    )
    set_timestamp(out.operation_time, T)
    return out


def live(
    eid: str | None = "3",
    *,
    last_edit: datetime | str | None = EARLIER,
    uid: str | None = UID,
    deleting: bool = False,
    suspend: bool | None = True,
    xid: str = "42",
    wid: str = "7",
) -> dict[str, Any]:
    """A JobSet as the API server returns it; ``None`` leaves a label or field out."""
    if isinstance(last_edit, datetime):
        last_edit = last_edit_label(last_edit)
    jobset = (
        JobSetBuilder("xmc-42-7", "ns")
        .uid(uid)
        .label(EXPERIMENT_ID, xid)
        .label(WORK_UNIT_ID, wid)
        .label(EXECUTION_ID, eid)
        .label(LAST_EDIT, last_edit)
    )
    if deleting:
        jobset.deleting("2026-03-04T05:06:08Z")
    if suspend is not None:
        jobset.suspend(suspend)
    return jobset.obj()


# --- the two predicates ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation_time", "last_edit", "expected"),
    [
        pytest.param(T, None, True, id="no last-edit label"),
        pytest.param(T, last_edit_label(EARLIER), True, id="task newer than the last edit"),
        pytest.param(T, last_edit_label(T), True, id="task is the last edit (redelivery)"),
        pytest.param(T, last_edit_label(LATER), False, id="task older than the last edit"),
        pytest.param(T, "yesterday", True, id="unreadable label counts as absent"),
        pytest.param(T.replace(tzinfo=None), last_edit_label(LATER), False, id="naive time is UTC"),
    ],
)
def test_is_actuation_request_valid(
    operation_time: datetime, last_edit: str | None, expected: bool
) -> None:
    assert is_actuation_request_valid(operation_time, last_edit) is expected


@pytest.mark.parametrize(
    ("k8s_eid", "target_eid", "expected"),
    [
        pytest.param(2, 3, True, id="older execution"),
        pytest.param(3, 3, True, id="the target execution"),
        pytest.param(4, 3, False, id="newer execution"),
        pytest.param(0, 1, True, id="unlabelled JobSet"),
    ],
)
def test_is_execution_id_aligned(k8s_eid: int, target_eid: int, expected: bool) -> None:
    assert is_execution_id_aligned(k8s_eid, target_eid) is expected


# --- delete ----------------------------------------------------------------------------

STALE_REASON = f"task operation time {T_ISO} is older than the JobSet's last edit {LATER_ISO}"


@pytest.mark.parametrize(
    ("jobset", "expected"),
    [
        pytest.param(
            None,
            DeleteDecision(
                DeleteAction.NOTHING_TO_DELETE,
                "no JobSet: nothing to delete; execution 3 is STOPPED",
            ),
            id="no JobSet: write STOPPED",
        ),
        pytest.param(
            live("3"),
            DeleteDecision(
                DeleteAction.DELETE,
                "JobSet runs execution 3, not newer than the target 3",
                UID,
                jobset_eid=3,
            ),
            id="target execution is deleted with its uid",
        ),
        pytest.param(
            live("3", last_edit=T),
            DeleteDecision(
                DeleteAction.DELETE,
                "JobSet runs execution 3, not newer than the target 3",
                UID,
                jobset_eid=3,
            ),
            id="last edit equal to the task time",
        ),
        pytest.param(
            live("2"),
            DeleteDecision(
                DeleteAction.DELETE,
                "JobSet runs execution 2, not newer than the target 3",
                UID,
                jobset_eid=2,
            ),
            id="older execution is deleted too",
        ),
        pytest.param(
            live("4"),
            DeleteDecision(
                DeleteAction.SUPERSEDED,
                "JobSet runs execution 4, newer than the target 3",
                jobset_eid=4,
            ),
            id="newer execution: skip",
        ),
        pytest.param(
            live("4", last_edit=LATER),
            DeleteDecision(
                DeleteAction.SUPERSEDED,
                "JobSet runs execution 4, newer than the target 3",
                jobset_eid=4,
            ),
            id="newer execution wins over staleness",
        ),
        pytest.param(
            live("3", last_edit=LATER),
            DeleteDecision(DeleteAction.STALE_REQUEST, STALE_REASON, jobset_eid=3),
            id="task older than the last edit is rejected",
        ),
        pytest.param(
            live("3", deleting=True),
            DeleteDecision(
                DeleteAction.ALREADY_DELETING,
                "JobSet of execution 3 is already being deleted",
                UID,
                jobset_eid=3,
            ),
            id="already being deleted",
        ),
        pytest.param(
            live("3", deleting=True, last_edit=LATER),
            DeleteDecision(
                DeleteAction.ALREADY_DELETING,
                "JobSet of execution 3 is already being deleted",
                UID,
                jobset_eid=3,
            ),
            id="already being deleted wins over staleness",
        ),
        pytest.param(
            live(None),
            DeleteDecision(
                DeleteAction.DELETE,
                f"JobSet runs execution 0, not newer than the target 3 ({NO_LABEL})",
                UID,
                jobset_eid=0,
            ),
            id="missing execution id counts as 0",
        ),
        pytest.param(
            live("three"),
            DeleteDecision(
                DeleteAction.DELETE,
                f"JobSet runs execution 0, not newer than the target 3 ({GARBAGE})",
                UID,
                jobset_eid=0,
            ),
            id="garbage execution id counts as 0",
        ),
        pytest.param(
            live("three", last_edit=LATER),
            DeleteDecision(DeleteAction.STALE_REQUEST, f"{STALE_REASON} ({GARBAGE})", jobset_eid=0),
            id="garbage execution id still stale",
        ),
        pytest.param(
            live("3", last_edit="not-a-time"),
            DeleteDecision(
                DeleteAction.DELETE,
                "JobSet runs execution 3, not newer than the target 3",
                UID,
                jobset_eid=3,
            ),
            id="unreadable last edit does not block",
        ),
        pytest.param(
            live("3", last_edit=None),
            DeleteDecision(
                DeleteAction.DELETE,
                "JobSet runs execution 3, not newer than the target 3",
                UID,
                jobset_eid=3,
            ),
            id="missing last edit does not block",
        ),
        pytest.param(
            live("3", uid=None),
            DeleteDecision(
                DeleteAction.DELETE,
                "JobSet runs execution 3, not newer than the target 3",
                jobset_eid=3,
            ),
            id="no uid to carry",
        ),
    ],
)
def test_decide_delete(jobset: dict[str, Any] | None, expected: DeleteDecision) -> None:
    assert decide_delete(jobset, task(Task.DELETE)) == expected


# --- restart ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("jobset", "expected"),
    [
        pytest.param(
            None,
            RestartDecision(RestartAction.CREATE, "no JobSet: create execution 4"),
            id="nothing live: create",
        ),
        pytest.param(
            live("3"),
            RestartDecision(
                RestartAction.DELETE_THEN_CREATE,
                "JobSet runs execution 3: delete it, then create execution 4",
                UID,
            ),
            id="old execution N: delete then create N+1",
        ),
        pytest.param(
            live("2"),
            RestartDecision(
                RestartAction.DELETE_THEN_CREATE,
                "JobSet runs execution 2: delete it, then create execution 4",
                UID,
            ),
            id="an even older execution is replaced too",
        ),
        pytest.param(
            live("3", deleting=True),
            RestartDecision(
                RestartAction.DELETE_THEN_CREATE,
                "JobSet runs execution 3 (already being deleted): delete it, then create "
                "execution 4",
                UID,
            ),
            id="old execution already deleting: wait then create",
        ),
        pytest.param(
            live("4"),
            RestartDecision(
                RestartAction.ALREADY_DONE, "JobSet already runs execution 4 (redelivery)"
            ),
            id="N+1 already live: redelivery",
        ),
        pytest.param(
            live("4", last_edit=LATER),
            RestartDecision(
                RestartAction.ALREADY_DONE, "JobSet already runs execution 4 (redelivery)"
            ),
            id="N+1 already live and since updated",
        ),
        pytest.param(
            live("5", last_edit=LATER),
            RestartDecision(
                RestartAction.SUPERSEDED, "JobSet runs execution 5, newer than the restart's 4"
            ),
            id="a later restart superseded this one",
        ),
        pytest.param(
            live("3", last_edit=LATER),
            RestartDecision(RestartAction.STALE_REQUEST, STALE_REASON),
            id="task older than the last edit is rejected",
        ),
        pytest.param(
            live(None),
            RestartDecision(
                RestartAction.DELETE_THEN_CREATE,
                f"JobSet runs execution 0: delete it, then create execution 4 ({NO_LABEL})",
                UID,
            ),
            id="unlabelled JobSet is replaced",
        ),
    ],
)
def test_decide_restart(jobset: dict[str, Any] | None, expected: RestartDecision) -> None:
    assert decide_restart(jobset, task(Task.RESTART, target_eid=3, eid=4)) == expected


# --- duplicate on create ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("existing", "the_task", "expected"),
    [
        pytest.param(
            live("1"),
            task(Task.CREATE, target_eid=1, eid=1),
            DuplicateDecision(
                DuplicateAction.SAME_EXECUTION, "JobSet of execution 1 already exists (redelivery)"
            ),
            id="redelivered create",
        ),
        pytest.param(
            live("4"),
            task(Task.RESTART, target_eid=3, eid=4),
            DuplicateDecision(
                DuplicateAction.SAME_EXECUTION, "JobSet of execution 4 already exists (redelivery)"
            ),
            id="restart's create met its own JobSet",
        ),
        pytest.param(
            live("3"),
            task(Task.RESTART, target_eid=3, eid=4),
            DuplicateDecision(
                DuplicateAction.CONFLICT,
                "a different JobSet holds the name: xmc.google.com/execution-id='3', want '4'",
            ),
            id="older execution still holds the name",
        ),
        pytest.param(
            live("1", xid="43"),
            task(Task.CREATE, target_eid=1, eid=1),
            DuplicateDecision(
                DuplicateAction.CONFLICT,
                "a different JobSet holds the name: xmc.google.com/experiment-id='43', want '42'",
            ),
            id="another experiment's JobSet",
        ),
        pytest.param(
            live(None, wid="8"),
            task(Task.CREATE, target_eid=1, eid=1),
            DuplicateDecision(
                DuplicateAction.CONFLICT,
                "a different JobSet holds the name: xmc.google.com/work-unit-id='8', want '7'; "
                "xmc.google.com/execution-id=None, want '1'",
            ),
            id="unlabelled JobSet of another work unit",
        ),
        pytest.param(
            {"metadata": {"name": "xmc-42-7"}},
            task(Task.CREATE, target_eid=1, eid=1),
            DuplicateDecision(
                DuplicateAction.CONFLICT,
                "a different JobSet holds the name: xmc.google.com/experiment-id=None, want '42'; "
                "xmc.google.com/work-unit-id=None, want '7'; "
                "xmc.google.com/execution-id=None, want '1'",
            ),
            id="JobSet not made by XMC",
        ),
    ],
)
def test_verify_duplicate_jobset(
    existing: dict[str, Any], the_task: Task, expected: DuplicateDecision
) -> None:
    assert verify_duplicate_jobset(existing, the_task) == expected


# --- update ----------------------------------------------------------------------------

NEW_LAST_EDIT = last_edit_label(T)
PATCH_REASON = "JobSet runs execution 3, not newer than the target 3"


def patch(*, queue: str | None = None, priority: str = "xmc-priority-high-low") -> dict[str, Any]:
    patch_labels = {
        "xmc.google.com/last-edit": NEW_LAST_EDIT,
        "kueue.x-k8s.io/priority-class": priority,
    }
    if queue is not None:
        patch_labels["kueue.x-k8s.io/queue-name"] = queue
    return {"metadata": {"labels": patch_labels}}


def admin_change(priority_class: str) -> Task:
    changed = task(Task.SET_PRIORITY)
    changed.payload.priority_class = priority_class
    changed.payload.requested_by = "root@example.com"
    return changed


@pytest.mark.parametrize(
    ("jobset", "the_task", "expected"),
    [
        pytest.param(
            None,
            task(Task.UPDATE),
            UpdateDecision(UpdateAction.NOTHING, "no JobSet: nothing to patch"),
            id="no JobSet: nothing to patch",
        ),
        pytest.param(
            live("3", suspend=True),
            task(Task.UPDATE),
            UpdateDecision(UpdateAction.PATCH, PATCH_REASON, patch(queue="team-a"), UID),
            id="suspended: priority, last edit and queue",
        ),
        pytest.param(
            live("3", suspend=False),
            task(Task.UPDATE),
            UpdateDecision(UpdateAction.PATCH, PATCH_REASON, patch(), UID),
            id="admitted: queue left alone",
        ),
        pytest.param(
            live("3", suspend=None),
            task(Task.UPDATE),
            UpdateDecision(UpdateAction.PATCH, PATCH_REASON, patch(), UID),
            id="suspend unset means running",
        ),
        pytest.param(
            live("3", suspend=True),
            task(Task.UPDATE, queue=""),
            UpdateDecision(UpdateAction.PATCH, PATCH_REASON, patch(), UID),
            id="no queue in the work unit: queue label untouched",
        ),
        pytest.param(
            live("3"),
            task(Task.UPDATE, experiment_priority=0, work_unit_priority=3),
            UpdateDecision(
                UpdateAction.PATCH,
                PATCH_REASON,
                patch(queue="team-a", priority="xmc-priority-normal-high"),
                UID,
            ),
            id="new work-unit priority becomes the priority class",
        ),
        pytest.param(
            live("3", last_edit=T),
            task(Task.UPDATE),
            UpdateDecision(UpdateAction.PATCH, PATCH_REASON, patch(queue="team-a"), UID),
            id="redelivered update patches again",
        ),
        pytest.param(
            live("4"),
            task(Task.UPDATE),
            UpdateDecision(
                UpdateAction.SUPERSEDED, "JobSet runs execution 4, newer than the target 3"
            ),
            id="newer execution: skip",
        ),
        pytest.param(
            live("3", last_edit=LATER),
            task(Task.UPDATE),
            UpdateDecision(UpdateAction.STALE_REQUEST, STALE_REASON),
            id="older than the last edit is rejected",
        ),
        pytest.param(
            live("2"),
            task(Task.UPDATE),
            UpdateDecision(
                UpdateAction.PATCH,
                "JobSet runs execution 2, not newer than the target 3",
                patch(queue="team-a"),
                UID,
            ),
            id="older execution is aligned and patched",
        ),
        pytest.param(
            live("3", suspend=True),
            admin_change("xmc-priority-high-high"),
            UpdateDecision(
                UpdateAction.PATCH, PATCH_REASON, patch(priority="xmc-priority-high-high"), UID
            ),
            id="an admin's SET_PRIORITY: its class, never the queue",
        ),
        pytest.param(
            live("3", last_edit=LATER),
            admin_change("xmc-priority-low-low"),
            UpdateDecision(UpdateAction.STALE_REQUEST, STALE_REASON),
            id="SET_PRIORITY older than the last edit is rejected",
        ),
        pytest.param(
            live("4"),
            admin_change("xmc-priority-low-low"),
            UpdateDecision(
                UpdateAction.SUPERSEDED, "JobSet runs execution 4, newer than the target 3"
            ),
            id="SET_PRIORITY of an older execution: skip",
        ),
    ],
)
def test_decide_update(
    jobset: dict[str, Any] | None, the_task: Task, expected: UpdateDecision
) -> None:
    assert decide_update(jobset, the_task) == expected
