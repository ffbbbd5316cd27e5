"""Finishing and parking tasks, whoever does it (the Actuator settling a result, the
relay abandoning an undeliverable task, the resume worker skipping a parked one): each in
the caller's transaction, so a task never half-finishes. Services reach these through
``xmc.store.transactions``."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import structlog
from google.protobuf.message import Message

from xmc.errors import NotFoundError
from xmc.messages import backend_message
from xmc.model.audit import Actor
from xmc.model.manifest import KeptManifest
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import Severity, WorkUnitState
from xmc.store import operations, outbox, scheduling
from xmc.store.connection import Connection
from xmc.store.executions import (
    ItemResult,
    update_work_unit_executions,
    write_decided_state,
)
from xmc.store.manifests import record_manifest
from xmc.tasks import task_execution_id
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()


@dataclass(frozen=True)
class StateWrite:
    """A masked write of ``state`` (and a system message, if any) for execution ``eid``."""

    eid: int
    state: WorkUnitState
    message: StructuredMessage | None = None


async def finish_task(
    conn: Connection,
    task: Task,
    *,
    outcome: str,
    writer: str,
    actor: Actor,
    now: datetime,
    state: StateWrite | None = None,
    response: Message | None = None,
    error: tuple[int, str] | None = None,
    manifest: KeptManifest | None = None,
) -> ItemResult | None:
    """Finish ``task`` for good, in the caller's transaction, so it never half-finishes:

    1. its outbox row records ``outcome``: the relay stops checking it, and a replayed
       entry of it is refused (a row already finished stays as it was);
    2. ``state``, if any, is written through the masked path, so the guard still decides
       (``write_decided_state``); its result is returned (None without a write);
    3. the task's Operation, if it has one, counts it done, with ``error`` (code,
       message) or ``response``. An Operation that no longer exists (expired after 90
       days, or never made) is logged and skipped: the task's effect still stands;
    4. ``manifest``, if any — the JobSet the task created — is recorded for its execution,
       so it is stored exactly when the outcome "created" is (decision 0039).
    """
    await outbox.finish(conn, task, outcome=outcome, now=now)
    written = None
    if state is not None:
        written = await write_decided_state(
            conn, task.xid, task.wid, state.eid, state.state,
            message=state.message, writer=writer, actor=actor, now=now,
        )  # fmt: skip
    if task.operation:
        try:
            await operations.finish_operation_task(
                conn, task.operation, now=now, response=response, error=error,
                task_id=task.task_id,
            )  # fmt: skip
        except NotFoundError:
            log.warning("the task's operation does not exist", operation=task.operation)
    if manifest is not None:
        await record_manifest(
            conn, task.xid, task.wid, task_execution_id(task), manifest,
            task_id=task.task_id, now=now,
        )  # fmt: skip
    return written


async def park_task(
    conn: Connection,
    task: Task,
    *,
    mark: ExecutionUpdate | None,
    writer: str,
    actor: Actor,
    now: datetime,
) -> bool:
    """Park ``task`` while scheduling is paused, in the caller's transaction: in
    PausedTasks (where the resume worker finds it) and in the outbox (so the relay does
    not re-drive it meanwhile); the first time, also ``mark``, the masked write that shows
    the work unit waiting. False when it was parked already (a redelivery): nothing
    changes, so a task is parked exactly once."""
    await outbox.park(conn, task, now=now)
    first_time = await scheduling.park_task(
        conn,
        task_id=task.task_id,
        xid=task.xid,
        wid=task.wid,
        # The resume worker judges a parked task by its target eid (ShouldSkipTask).
        eid=task.target_eid,
        kind=task.kind,
        task=task.SerializeToString(deterministic=True),
        now=now,
    )
    if first_time and mark is not None:
        await update_work_unit_executions(conn, [mark], writer=writer, actor=actor, now=now)
    return first_time


def failed_execution_write(task: Task, text: str) -> StateWrite:
    """The FAILED write of a create or restart that can never start: the work unit must
    not hang in INITIALIZING or RESTARTING."""
    return StateWrite(
        task_execution_id(task),
        WorkUnitState.FAILED,
        backend_message(Severity.FATAL, task.xid, task.wid, text),
    )
