"""``ShouldSkipTask`` (SPEC §9): which parked tasks a resume re-enqueues.

A parked task is a decision taken while scheduling was paused; by the time scheduling
resumes, the user may have stopped or restarted the work unit. Re-enqueueing such a
task would resurrect work the user no longer wants, so each is checked against the work
unit as it is now.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from xmc.model.states import WorkUnitState


class TaskKind(enum.IntEnum):
    """``xmc.internal.v1.Task.Kind``, with the wire numbers."""

    KIND_UNSPECIFIED = 0
    CREATE = 1
    DELETE = 2
    RESTART = 3
    UPDATE = 4
    SET_PRIORITY = 5


#: Work-unit states in which no parked task may run any more.
_FINISHED_OR_STOPPING = frozenset(
    {
        WorkUnitState.COMPLETED,
        WorkUnitState.STOPPED,
        WorkUnitState.STOPPING,
        WorkUnitState.FAILED,
    }
)


class SkipReason(enum.StrEnum):
    """Why a parked task is (not) resumed; stored as ``resolution_reason``."""

    RESUME = "resume"
    SUPERSEDED = "superseded by a newer execution"
    FINISHED = "work unit is stopping or finished"
    STALE_UPDATE = "a newer update is parked"
    STILL_PAUSED = "work unit is still paused; its create or restart carries the update"


@dataclass(frozen=True)
class SkipDecision:
    skip: bool
    reason: SkipReason


def should_skip_task(
    *,
    kind: TaskKind,
    task_eid: int,
    work_unit_eid: int,
    work_unit_state: WorkUnitState,
    newer_update_parked: bool = False,
) -> SkipDecision:
    """Decide one parked task. ``task_eid`` is the task's target eid (for RESTART the
    execution being replaced, N; the task creates N+1)."""
    newest_allowed = task_eid + 1 if kind == TaskKind.RESTART else task_eid
    if work_unit_eid > newest_allowed:
        return SkipDecision(True, SkipReason.SUPERSEDED)
    if work_unit_state in _FINISHED_OR_STOPPING:
        return SkipDecision(True, SkipReason.FINISHED)
    if kind == TaskKind.UPDATE:
        if newer_update_parked or work_unit_eid != task_eid:
            return SkipDecision(True, SkipReason.STALE_UPDATE)
        if work_unit_state == WorkUnitState.SCHEDULING_PAUSED:
            return SkipDecision(True, SkipReason.STILL_PAUSED)
    return SkipDecision(False, SkipReason.RESUME)
