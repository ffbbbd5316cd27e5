"""``decide_repair``: what the repair sweep does with an execution stuck in a state XMC
wrote (SPEC §6 "level-triggered repair")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from actuator.repair import JobSetView, RepairAction, RepairSettings, decide_repair
from xmc.model.resume import TaskKind
from xmc.model.states import WorkUnitState
from xmc.store.outbox import ExecutionTasks, OutboxStatus

S = WorkUnitState
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SETTINGS = RepairSettings(stuck_after_seconds=120, max_repairs=3)
LONG_AGO = NOW - timedelta(minutes=10)


def stuck(
    state: WorkUnitState,
    *,
    eid: int = 2,
    task: OutboxStatus | None = OutboxStatus.FINISHED,
    finished: datetime | None = LONG_AGO,
    repairs: int = 0,
) -> ExecutionTasks:
    return ExecutionTasks(1, 1, eid, int(state), LONG_AGO, task, finished, repairs)


def jobset(eid: int = 2, *, deleting: bool = False, end: WorkUnitState = S.STOPPED) -> JobSetView:
    return JobSetView(eid=eid, deleting=deleting, terminal_state=end, last_edit=None)


A = RepairAction


@pytest.mark.parametrize(
    ("execution", "live", "action", "detail"),
    [
        pytest.param(
            stuck(S.STOPPING, task=OutboxStatus.PUBLISHED), None, A.NONE, None,
            id="its delete is on its way: the relay owns it",
        ),
        pytest.param(
            stuck(S.INITIALIZING, task=OutboxStatus.PARKED), None, A.NONE, None,
            id="parked: the resume worker owns it",
        ),
        pytest.param(
            stuck(S.STOPPING, finished=NOW - timedelta(seconds=5)), None, A.NONE, None,
            id="its task finished moments ago",
        ),
        pytest.param(
            stuck(S.STOPPING), None, A.WRITE_TERMINAL, S.STOPPED,
            id="stopping, no JobSet: STOPPED",
        ),
        pytest.param(
            stuck(S.STOPPING), jobset(eid=1), A.WRITE_TERMINAL, S.STOPPED,
            id="stopping, only an older execution's JobSet: STOPPED",
        ),
        pytest.param(
            stuck(S.STOPPING), jobset(deleting=True, end=S.COMPLETED), A.WRITE_TERMINAL,
            S.COMPLETED, id="stopping, its JobSet deleting: the end it shows (R1)",
        ),
        pytest.param(
            stuck(S.STOPPING), jobset(), A.REDRIVE, TaskKind.DELETE,
            id="stopping, its JobSet runs: re-drive the delete",
        ),
        pytest.param(
            stuck(S.STOPPING, repairs=3), jobset(), A.GIVE_UP, None,
            id="stopping, re-drives did not help: give up",
        ),
        pytest.param(
            stuck(S.STOPPING, task=None), None, A.WRITE_TERMINAL, S.STOPPED,
            id="no task in the outbox at all (before the outbox)",
        ),
        pytest.param(
            stuck(S.INITIALIZING, eid=1), None, A.REDRIVE, TaskKind.CREATE,
            id="initializing, no JobSet: re-drive the create",
        ),
        pytest.param(
            stuck(S.INITIALIZING, eid=1), jobset(eid=1), A.NONE, None,
            id="initializing, its JobSet exists: the Reconciler reports it",
        ),
        pytest.param(
            stuck(S.RESTARTING), jobset(eid=1), A.REDRIVE, TaskKind.RESTART,
            id="restarting, the old JobSet still there: re-drive the restart",
        ),
        pytest.param(
            stuck(S.RESTARTING), None, A.REDRIVE, TaskKind.RESTART,
            id="restarting, no JobSet: re-drive the restart",
        ),
        pytest.param(
            stuck(S.RESTARTING, repairs=3), None, A.GIVE_UP, None,
            id="restarting, re-drives did not help: give up (FAILED)",
        ),
    ],
)  # fmt: skip
def test_decide_repair(
    execution: ExecutionTasks,
    live: JobSetView | None,
    action: RepairAction,
    detail: WorkUnitState | TaskKind | None,
) -> None:
    decision = decide_repair(execution, live, now=NOW, settings=SETTINGS)
    assert decision.action is action, decision.reason
    if action is A.WRITE_TERMINAL:
        assert decision.state is detail
    if action is A.REDRIVE:
        assert decision.kind is detail


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        pytest.param(None, None, id="no JobSet"),
        pytest.param(
            {"metadata": {"labels": {"xmc.google.com/execution-id": "3"}}},
            JobSetView(eid=3, deleting=False, terminal_state=S.STOPPED, last_edit=None),
            id="live",
        ),
        pytest.param(
            {
                "metadata": {
                    "deletionTimestamp": "2026-12-01T12:00:00Z",
                    "labels": {"xmc.google.com/execution-id": "x", "xmc.google.com/last-edit": "5"},
                },
                "status": {"conditions": [{"type": "Completed", "status": "True"}]},
            },
            JobSetView(
                eid=0,
                deleting=True,
                terminal_state=S.COMPLETED,
                last_edit=datetime(1970, 1, 1, 0, 0, 0, 5, tzinfo=UTC),
            ),
            id="deleting and completed, garbage eid",
        ),
    ],
)
def test_jobset_view(obj: dict[str, object] | None, want: JobSetView | None) -> None:
    assert JobSetView.read(obj) == want
