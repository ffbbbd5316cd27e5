"""Table tests of ``should_skip_task`` (SPEC §9)."""

from __future__ import annotations

import pytest

from xmc.model.resume import SkipDecision, SkipReason, TaskKind, should_skip_task
from xmc.model.states import WorkUnitState

K = TaskKind
S = WorkUnitState


@pytest.mark.parametrize(
    ("kind", "task_eid", "wu_eid", "state", "newer_update", "want"),
    [
        pytest.param(K.CREATE, 1, 1, S.SCHEDULING_PAUSED, False, None, id="paused create resumes"),
        pytest.param(
            K.CREATE,
            1,
            2,
            S.RESTARTING,
            False,
            SkipReason.SUPERSEDED,
            id="create superseded by a restart",
        ),
        pytest.param(
            K.RESTART,
            1,
            2,
            S.SCHEDULING_PAUSED,
            False,
            None,
            id="restart of eid 1 creating eid 2 resumes",
        ),
        pytest.param(
            K.RESTART,
            1,
            3,
            S.RESTARTING,
            False,
            SkipReason.SUPERSEDED,
            id="restart superseded by a second restart",
        ),
        pytest.param(
            K.CREATE, 1, 1, S.STOPPED, False, SkipReason.FINISHED, id="stopped while paused"
        ),
        pytest.param(
            K.CREATE, 1, 1, S.STOPPING, False, SkipReason.FINISHED, id="stopping while paused"
        ),
        pytest.param(K.RESTART, 1, 2, S.COMPLETED, False, SkipReason.FINISHED, id="completed"),
        pytest.param(K.RESTART, 1, 2, S.FAILED, False, SkipReason.FINISHED, id="failed"),
        pytest.param(
            K.UPDATE, 1, 1, S.RUNNING, False, None, id="update of a running work unit resumes"
        ),
        pytest.param(
            K.UPDATE, 1, 1, S.RUNNING, True, SkipReason.STALE_UPDATE, id="a newer update is parked"
        ),
        pytest.param(
            K.UPDATE, 1, 2, S.RUNNING, False, SkipReason.SUPERSEDED, id="update of an old execution"
        ),
        pytest.param(
            K.UPDATE,
            1,
            1,
            S.SCHEDULING_PAUSED,
            False,
            SkipReason.STILL_PAUSED,
            id="update of a still paused work unit",
        ),
        pytest.param(
            K.UPDATE,
            2,
            2,
            S.STOPPED,
            False,
            SkipReason.FINISHED,
            id="update of a stopped work unit",
        ),
    ],
)
def test_should_skip_task(
    kind: TaskKind,
    task_eid: int,
    wu_eid: int,
    state: WorkUnitState,
    newer_update: bool,
    want: SkipReason | None,
) -> None:
    got = should_skip_task(
        kind=kind,
        task_eid=task_eid,
        work_unit_eid=wu_eid,
        work_unit_state=state,
        newer_update_parked=newer_update,
    )
    expected = SkipDecision(False, SkipReason.RESUME) if want is None else SkipDecision(True, want)
    assert got == expected
