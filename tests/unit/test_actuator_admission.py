"""``decide_admission``: which verified tasks may act (SPEC §6 "No task acts twice")."""

from __future__ import annotations

import pytest

from actuator.admission import AdmissionAction, decide_admission
from xmc.model.states import WorkUnitState
from xmc.store.outbox import OutboxStatus, TaskFacts
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

S = WorkUnitState
A = AdmissionAction


def task(kind: int, *, target_eid: int = 1, eid: int = 0) -> Task:
    return Task(task_id="t", kind=kind, xid=1, wid=1, target_eid=target_eid,  # type: ignore[arg-type]
                payload=TaskPayload(eid=eid))  # fmt: skip


def facts(
    status: OutboxStatus | None = OutboxStatus.PUBLISHED,
    eid: int | None = 1,
    state: WorkUnitState | None = S.INITIALIZING,
) -> TaskFacts:
    return TaskFacts(status, eid, None if state is None else int(state))


RESTART_TO_2 = task(Task.RESTART, target_eid=1, eid=2)


@pytest.mark.parametrize(
    ("the_task", "the_facts", "want"),
    [
        pytest.param(task(Task.CREATE), facts(), A.PROCEED, id="a fresh create"),
        pytest.param(
            task(Task.CREATE), facts(status=None), A.PROCEED, id="a create from before the outbox"
        ),
        pytest.param(
            task(Task.CREATE), facts(state=S.SCHEDULING_PAUSED), A.PROCEED, id="a resumed create"
        ),
        pytest.param(
            task(Task.CREATE), facts(state=S.RUNNING), A.PROCEED, id="a redelivered create"
        ),
        pytest.param(
            task(Task.CREATE),
            facts(status=OutboxStatus.FINISHED, state=S.COMPLETED),
            A.REPLAY,
            id="a replayed create of a finished unit",
        ),
        pytest.param(
            task(Task.DELETE),
            facts(status=OutboxStatus.FINISHED, state=S.STOPPED),
            A.REPLAY,
            id="a replayed delete",
        ),
        pytest.param(
            task(Task.CREATE),
            facts(status=None, state=S.COMPLETED),
            A.UNWANTED,
            id="an unknown create of a finished unit",
        ),
        pytest.param(
            task(Task.CREATE),
            facts(state=S.STOPPING),
            A.UNWANTED,
            id="a create overtaken by a stop",
        ),
        pytest.param(
            task(Task.CREATE), facts(eid=2, state=S.RESTARTING), A.UNWANTED, id="superseded"
        ),
        pytest.param(
            task(Task.CREATE), facts(eid=None, state=None), A.UNWANTED, id="work unit deleted"
        ),
        pytest.param(RESTART_TO_2, facts(eid=2, state=S.RESTARTING), A.PROCEED, id="a restart"),
        pytest.param(
            RESTART_TO_2,
            facts(eid=2, state=S.STOPPED),
            A.UNWANTED,
            id="a restart overtaken by a stop (the delete already ended it)",
        ),
        pytest.param(
            RESTART_TO_2, facts(eid=3, state=S.RESTARTING), A.UNWANTED, id="a restart superseded"
        ),
        pytest.param(
            task(Task.DELETE), facts(state=S.STOPPING), A.PROCEED, id="a stop always proceeds"
        ),
        pytest.param(
            task(Task.DELETE), facts(eid=None, state=None), A.PROCEED, id="even without its unit"
        ),
        pytest.param(
            task(Task.UPDATE), facts(state=S.RUNNING), A.PROCEED, id="an update of a live unit"
        ),
        pytest.param(
            task(Task.UPDATE), facts(state=S.FAILED), A.UNWANTED, id="an update of a failed unit"
        ),
    ],
)
def test_decide_admission(the_task: Task, the_facts: TaskFacts, want: AdmissionAction) -> None:
    assert decide_admission(the_task, the_facts).action is want
