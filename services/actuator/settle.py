"""Settling a task in Postgres: the last step of every path that finishes one.

Whatever ends a task — a handler's result, a task no longer wanted, a task out of
deliveries — it is finished by the store's one ``finish_task`` transaction (outbox row,
execution write, Operation). What this module decides is what goes with the result:

* the execution write, if any: STOPPED when there was nothing to delete (the caller's
  ``write``); FAILED with a FATAL message when a create or restart can never succeed, so
  the work unit does not hang in INITIALIZING or RESTARTING;
* the Operation's answer: the error of a permanent failure, else the work unit;
* the manifest of the JobSet the task created, if it did, kept within its bound
  (decision 0039).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

import structlog
from google.rpc import code_pb2

from actuator.outcome import Outcome, TaskResult
from xmc.failure_metrics import count_decided_failure
from xmc.model.audit import ACTUATOR
from xmc.model.business import FailureReason
from xmc.model.manifest import keep_manifest
from xmc.store.transactions import StateWrite, Store, failed_execution_write, finish_task
from xmc.tasks import task_execution_id
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

_FAILS_EXECUTION: Final = frozenset({Task.CREATE, Task.RESTART})


def failed_execution(task: Task, result: TaskResult) -> StateWrite | None:
    """A create or restart that can never succeed fails its execution, FATAL."""
    if result.outcome is not Outcome.PERMANENT or task.kind not in _FAILS_EXECUTION:
        return None
    eid = task_execution_id(task)
    text = f"XMC could not start execution {eid} on Kubernetes ({result.code}): {result.reason}"
    return failed_execution_write(task, text)


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
        created: Mapping[str, Any] | None = None,
    ) -> TaskResult:
        """Settle ``task`` with ``result`` (see the module docstring); ``write`` defaults
        to the FAILED write of a permanently failed create or restart, ``outcome`` (the
        outbox's record) to the result's outcome; ``created`` is the JobSet manifest the
        task created."""
        if write is None:
            write = failed_execution(task, result)
        error = None
        if result.outcome is Outcome.PERMANENT:
            error = (code_pb2.Code.Value(result.code), result.reason)
        async with self._store.transaction() as conn:
            written = await finish_task(
                conn,
                task,
                outcome=outcome or result.outcome.value,
                writer=self._writer,
                actor=ACTUATOR,
                now=self._clock(),
                state=write,
                response=None if error else task.payload.work_unit,
                error=error,
                manifest=None if created is None else keep_manifest(created),
            )
        count_decided_failure(written, FailureReason.REFUSED)
        if write is not None and written is not None:
            log.info("execution state written", state=write.state.name,
                     outcome=str(written.outcome), stored_state=written.state.name)  # fmt: skip
        return result
