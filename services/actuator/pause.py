"""The global scheduling pause as the Actuator sees it (SPEC §7.3, §9).

The flag is durable in Postgres, so every Actuator replica agrees on it; reading it once
per task would put a query on the hot path, so :class:`PauseFlag` caches it for
``refresh_seconds`` (a change is seen within 1 s, SPEC §9).

:class:`TaskPauseHandler` runs before the real handler. While paused, a task that would
start or change work is parked in PausedTasks instead of reaching the cluster; the resume
worker puts it back in the outbox later, so its Operation stays open. Parking (in
PausedTasks, and in the outbox so the relay does not re-drive it meanwhile) and the
``SCHEDULING_PAUSED`` write share one transaction, and a redelivered task finds its
PausedTasks row (unique ``task_id``) and changes nothing: a task is parked exactly once.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable
from datetime import datetime
from typing import Final

import structlog

from actuator.outcome import Outcome, TaskResult
from xmc.messages import backend_message
from xmc.model.audit import ACTUATOR
from xmc.model.merge import STATE_PATH, SYSTEM_MESSAGE_PATH, ExecutionUpdate
from xmc.model.states import Severity, WorkUnitState
from xmc.store.transactions import Store, fetch_scheduling_control, park_task
from xmc.tasks import task_execution_id
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

#: The ``writer`` recorded in WorkUnitStatusHistory for the pause write.
WRITER: Final = "actuator/pause"
PAUSE_MASK: Final = (STATE_PATH, SYSTEM_MESSAGE_PATH)


class PauseFlag:
    """The durable pause flag, re-read from Postgres at most every ``refresh_seconds``.

    ``clock`` is monotonic seconds (injected for tests). A failed read raises rather than
    guessing: acting on an unknown flag could start work during a pause.
    """

    def __init__(
        self,
        store: Store,
        *,
        refresh_seconds: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._refresh = refresh_seconds
        self._clock = clock
        self._lock = asyncio.Lock()
        self._read_at: float | None = None
        self._paused = False
        self._reason = ""

    @property
    def reason(self) -> str:
        """The operator's reason, as of the last read."""
        return self._reason

    async def is_paused(self) -> bool:
        if self._fresh():
            return self._paused
        # One reader refreshes; concurrent tasks wait for it instead of stampeding Postgres.
        async with self._lock:
            if not self._fresh():
                async with self._store.transaction() as conn:
                    control = await fetch_scheduling_control(conn)
                self._paused, self._reason = control.paused, control.reason
                self._read_at = self._clock()
        return self._paused

    def _fresh(self) -> bool:
        return self._read_at is not None and self._clock() - self._read_at < self._refresh


class PauseAction(enum.StrEnum):
    """What a paused (or running) scheduler means for one task."""

    #: Not paused, a DELETE (a stop must never wait for a resume), or a SET_PRIORITY (a
    #: relabel starts nothing, and a queue paused still orders its Workloads).
    PROCEED = "proceed"
    #: UPDATE: parked only; the work unit's state is not the update's to change.
    PARK = "park"
    #: CREATE / RESTART: parked, and the new execution shows SCHEDULING_PAUSED.
    PARK_AND_MARK = "park_and_mark"


def decide_pause(kind: int, *, paused: bool) -> PauseAction:
    """SPEC §7.3. Unknown kinds proceed so the real handler rejects them."""
    if not paused:
        return PauseAction.PROCEED
    if kind in (Task.CREATE, Task.RESTART):
        return PauseAction.PARK_AND_MARK
    if kind == Task.UPDATE:
        return PauseAction.PARK
    return PauseAction.PROCEED


def paused_update(task: Task, *, now: datetime, reason: str = "") -> ExecutionUpdate:
    """The one masked write that shows a parked CREATE / RESTART to the user."""
    text = "Scheduling is paused cluster-wide; this work unit will be scheduled on resume."
    if reason:
        text = f"{text} Reason: {reason}"
    execution = WorkUnitExecution()
    status = execution.status
    status.state = int(WorkUnitState.SCHEDULING_PAUSED)  # type: ignore[assignment]
    set_timestamp(status.state_update_time, now)
    status.system_message.CopyFrom(backend_message(Severity.INFO, task.xid, task.wid, text))
    return ExecutionUpdate(task.xid, task.wid, task_execution_id(task), execution, PAUSE_MASK)


class TaskPauseHandler:
    """Parks tasks while scheduling is paused; ``clock`` is wall time (injected for tests)."""

    def __init__(self, store: Store, flag: PauseFlag, *, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._flag = flag
        self._clock = clock

    async def park_if_paused(self, task: Task) -> TaskResult | None:
        """A PARKED result when the task was (or already had been) parked; None to proceed."""
        action = decide_pause(task.kind, paused=await self._flag.is_paused())
        if action == PauseAction.PROCEED:
            return None
        now = self._clock()
        async with self._store.transaction() as conn:
            # The cached flag may be up to a refresh old: a task resumed right after
            # ResumeScheduling must not be parked again by a stale "paused".
            if not (await fetch_scheduling_control(conn)).paused:
                return None
            mark = None
            if action == PauseAction.PARK_AND_MARK:
                mark = paused_update(task, now=now, reason=self._flag.reason)
            first_time = await park_task(
                conn, task, mark=mark, writer=WRITER, actor=ACTUATOR, now=now
            )
        if not first_time:
            return TaskResult(Outcome.PARKED, "already parked (redelivery)")
        log.info("task parked: scheduling is paused", action=action.value)
        return TaskResult(Outcome.PARKED, "scheduling is paused")
