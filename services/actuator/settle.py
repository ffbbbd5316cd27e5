"""Settling a task in Postgres: the last step of every path that finishes one.

Whatever ends a task — a handler's result, a task no longer wanted, a task out of
deliveries — the same three writes follow, in one transaction so a task never
half-finishes:

1. its outbox row is finished with the outcome: the relay stops checking it, and a
   replayed entry of it is refused (``actuator.admission``);
2. the execution write that goes with the result, if any (STOPPED when there was nothing
   to delete; FAILED with a FATAL message when a create or restart can never succeed, so
   the work unit does not hang in INITIALIZING or RESTARTING);
3. ``updateOperation``: the task's Operation counts it done, with the error of a
   permanent failure or the work unit as the response.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import structlog
from google.rpc import code_pb2

from actuator.outcome import Outcome, TaskResult
from xmc.errors import NotFoundError
from xmc.messages import backend_message
from xmc.model.states import Severity, WorkUnitState
from xmc.store import executions, operations, outbox
from xmc.store.repository import Store
from xmc.tasks import task_execution_id
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

_FAILS_EXECUTION: Final = frozenset({Task.CREATE, Task.RESTART})


@dataclass(frozen=True)
class StateWrite:
    """A masked write of ``state`` (and a system message, if any) for execution ``eid``."""

    eid: int
    state: WorkUnitState
    message: StructuredMessage | None = None


def failed_execution(task: Task, result: TaskResult) -> StateWrite | None:
    """A create or restart that can never succeed fails its execution, FATAL."""
    if result.outcome is not Outcome.PERMANENT or task.kind not in _FAILS_EXECUTION:
        return None
    eid = task_execution_id(task)
    text = f"XMC could not start execution {eid} on Kubernetes ({result.code}): {result.reason}"
    return StateWrite(
        eid, WorkUnitState.FAILED, backend_message(Severity.FATAL, task.xid, task.wid, text)
    )


class TaskSettler:
    def __init__(
        self, store: Store, *, clock: Callable[[], datetime], writer: str = "actuator"
    ) -> None:
        self._store = store
        self._clock = clock
        self._writer = writer

    async def finish(
        self,
        task: Task,
        result: TaskResult,
        *,
        write: StateWrite | None = None,
        outcome: str | None = None,
    ) -> TaskResult:
        """Settle ``task`` with ``result`` (see the module docstring); ``write`` defaults
        to the FAILED write of a permanently failed create or restart, ``outcome`` (the
        outbox's record) to the result's outcome."""
        if write is None:
            write = failed_execution(task, result)
        now = self._clock()
        async with self._store.transaction() as conn:
            await outbox.finish(conn, task, outcome=outcome or result.outcome.value, now=now)
            if write is not None:
                written = await executions.write_decided_state(
                    conn,
                    task.xid,
                    task.wid,
                    write.eid,
                    write.state,
                    message=write.message,
                    writer=self._writer,
                    now=now,
                )
                log.info("execution state written", state=write.state.name,
                         outcome=str(written.outcome), stored_state=written.state.name)  # fmt: skip
            if task.operation:
                await self._close_operation(conn, task, result, now=now)
        return result

    async def _close_operation(
        self, conn: Any, task: Task, result: TaskResult, *, now: datetime
    ) -> None:
        error = None
        if result.outcome is Outcome.PERMANENT:
            error = (code_pb2.Code.Value(result.code), result.reason)
        try:
            await operations.finish_operation_task(
                conn,
                task.operation,
                now=now,
                response=None if error else task.payload.work_unit,
                error=error,
                task_id=task.task_id,
            )
        except NotFoundError:
            # Expired (90 days) or never made: the task's effect still stands.
            log.warning("the task's operation does not exist", operation=task.operation)
