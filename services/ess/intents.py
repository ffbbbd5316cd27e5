"""The intent loop's first half (SPEC §4, §6): write intent, record the Operation, enqueue
a signed task.

Order matters. The intent and the Operation commit together first; the task is published
after the commit, so an Actuator never sees a task whose work unit does not exist yet.
When publishing fails the RPC still answers with the Operation, and the failure is made
visible on the work unit (a masked system-message write) and on the Operation (done, with
an UNAVAILABLE error) instead of failing the call: the intent is already durable.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import grpc
import structlog
from google.longrunning.operations_proto_pb2 import Operation

from ess.auth import Identity, acl_writer_emails, require_experiment_writer
from ess.creates import CreateCoalescer
from ess.metrics import ENQUEUE_FAILURES, TASKS_ENQUEUED
from xmc.errors import FailedPreconditionError, UnavailableError
from xmc.model.merge import ExecutionUpdate
from xmc.model.resume import TaskKind
from xmc.model.states import EXECUTION_TERMINAL_STATES, Severity, WorkUnitState
from xmc.names import parse_work_unit_name, work_unit_name
from xmc.store import experiments, operations, work_units
from xmc.store.creation import Created
from xmc.store.executions import update_work_unit_executions
from xmc.store.operations import ActionType, NewOperation
from xmc.store.repository import Store
from xmc.streams import TaskPublisher
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task, TaskPayload

log = structlog.get_logger()

#: Writer label of the ESS in the status history.
WRITER = "ess"

#: States in which a priority change patches nothing: the JobSet is going or gone, and an
#: UPDATE would move its last-edit label past the pending Delete (which would then be
#: rejected as stale, stranding the stop).
_NO_UPDATE_STATES = EXECUTION_TERMINAL_STATES | {WorkUnitState.STOPPING}


@dataclass(frozen=True)
class _Planned:
    """A task to publish once the transaction that made it necessary has committed."""

    task: Task
    #: Severity of the message written when publishing fails (SPEC §4).
    failure_severity: Severity


def _require_writer(identity: Identity, experiment: Experiment) -> None:
    require_experiment_writer(
        identity,
        experiment_name=experiment.name,
        creator=experiment.creator,
        writers=acl_writer_emails(experiment.acls),
    )


class Intents:
    """Create, stop, restart and update work units (single and batch)."""

    def __init__(
        self, store: Store, publisher: TaskPublisher, *, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._publisher = publisher
        self._clock = clock
        self._creates = CreateCoalescer(store, self, clock=clock, writer=WRITER)

    async def drain(self) -> None:
        """Finish the creates still queued (graceful shutdown)."""
        await self._creates.drain()

    # --- building blocks ---------------------------------------------------------------

    def _task(
        self,
        kind: TaskKind,
        *,
        xid: int,
        wid: int,
        target_eid: int,
        operation: str,
        work_unit: WorkUnit,
        eid: int,
        experiment_priority: int,
    ) -> Task:
        task = Task(
            task_id=uuid.uuid4().hex,
            kind=int(kind),  # type: ignore[arg-type]
            xid=xid,
            wid=wid,
            target_eid=target_eid,
            operation=operation,
            payload=TaskPayload(
                work_unit=work_unit,
                eid=eid,
                experiment_priority=experiment_priority,  # type: ignore[arg-type]
            ),
        )
        set_timestamp(task.operation_time, self._clock())
        return task

    async def _publish(self, planned: Sequence[_Planned]) -> None:
        """Publish after commit; a failure becomes a message on the work unit and an
        error on the Operation, never a lost intent or a failed RPC."""
        for item in planned:
            task = item.task
            kind = TaskKind(task.kind).name
            try:
                await self._publisher.publish(task)
                TASKS_ENQUEUED.labels(kind).inc()
            except UnavailableError as exc:
                ENQUEUE_FAILURES.labels(kind).inc()
                log.error(
                    "enqueue failed", xid=task.xid, wid=task.wid, task_kind=kind, error=str(exc)
                )
                await self._record_enqueue_failure(task, item.failure_severity, str(exc))

    async def _record_enqueue_failure(self, task: Task, severity: Severity, error: str) -> None:
        """``handleEnqueueActionError`` (ERROR, stop paths) and
        ``updateWorkUnitExecutionStatusMessage`` (FATAL, create/restart paths)."""
        kind = TaskKind(task.kind).name.lower()
        execution = WorkUnitExecution()
        execution.status.system_message.CopyFrom(
            StructuredMessage(
                severity=int(severity),  # type: ignore[arg-type]
                source=StructuredMessage.XMANAGER_BACKEND,
                parent=work_unit_name(task.xid, task.wid),
                user_facing_text=(
                    f"XMC could not queue the {kind} request ({error}); "
                    "the request was not carried out, retry it"
                ),
            )
        )
        eid = task.payload.eid or task.target_eid
        async with self._store.transaction() as conn:
            await update_work_unit_executions(
                conn,
                [ExecutionUpdate(task.xid, task.wid, eid, execution, ("status.system_message",))],
                writer=WRITER,
                now=self._clock(),
            )
            if task.operation:
                await operations.finish_operation_task(
                    conn,
                    task.operation,
                    now=self._clock(),
                    error=(
                        grpc.StatusCode.UNAVAILABLE.value[0],
                        f"could not queue the task: {error}",
                    ),
                    task_id=task.task_id,
                )

    async def _writable_experiment(self, conn: Any, identity: Identity, xid: int) -> Experiment:
        experiment = await experiments.fetch_experiment(conn, xid)
        _require_writer(identity, experiment)
        return experiment

    # --- create ------------------------------------------------------------------------

    async def create_work_unit(
        self, identity: Identity, xid: int, work_unit: WorkUnit, *, wid: int | None
    ) -> Operation:
        """CreateWorkUnit (grouped with concurrent ones into one transaction); with a
        client-chosen ``wid`` a repeat returns the first Operation and creates nothing."""
        return await self._creates.submit(identity, xid, work_unit, wid)

    async def publish_creates(self, created: Sequence[Created]) -> None:
        """Enqueue the CREATE tasks of freshly created work units (after their commit)."""
        planned = []
        for outcome in created:
            assert outcome.work_unit is not None
            xid, wid = parse_work_unit_name(outcome.work_unit.name)
            task = self._task(
                TaskKind.CREATE,
                xid=xid,
                wid=wid,
                target_eid=1,
                operation=outcome.operation.name,
                work_unit=outcome.work_unit,
                eid=1,
                experiment_priority=outcome.experiment_priority,
            )
            planned.append(_Planned(task, Severity.FATAL))
        await self._publish(planned)

    def _planned(
        self,
        kind: TaskKind,
        operation: Operation,
        experiment: Experiment,
        targets: Sequence[tuple[WorkUnit, int, int]],
        failure_severity: Severity,
    ) -> list[_Planned]:
        """One task per (work unit, target eid, payload eid) of an Operation."""
        return [
            _Planned(
                self._task(
                    kind,
                    xid=parse_work_unit_name(work_unit.name)[0],
                    wid=parse_work_unit_name(work_unit.name)[1],
                    target_eid=target_eid,
                    operation=operation.name,
                    work_unit=work_unit,
                    eid=eid,
                    experiment_priority=experiment.priority,
                ),
                failure_severity,
            )
            for work_unit, target_eid, eid in targets
        ]

    # --- stop --------------------------------------------------------------------------

    async def _stop_in_transaction(
        self, conn: Any, xid: int, wids: Sequence[int], *, strict: bool
    ) -> list[tuple[WorkUnit, int]]:
        """Write STOPPING (or STOPPED for a paused work unit: it has no JobSet) with the
        masked ``["status.state"]`` path. Returns (work unit, eid) of those stopped."""
        now = self._clock()
        targets: list[tuple[WorkUnit, int]] = []
        updates = []
        for wid in wids:
            work_unit = await work_units.fetch_work_unit(conn, xid, wid)
            current = work_unit.current_work_unit_execution
            state = WorkUnitState(current.status.state)
            if state in EXECUTION_TERMINAL_STATES:
                if strict:
                    raise FailedPreconditionError(
                        f"name: {work_unit.name} is already {state.name}; nothing to stop"
                    )
                continue
            eid = int(current.name.rsplit("/", 1)[1])
            new_state = (
                WorkUnitState.STOPPED
                if state == WorkUnitState.SCHEDULING_PAUSED
                else WorkUnitState.STOPPING
            )
            execution = WorkUnitExecution()
            execution.status.state = int(new_state)  # type: ignore[assignment]
            # A user's stop must not lose to a writer whose clock runs ahead of ours.
            stored_time = to_datetime(current.status.state_update_time)
            set_timestamp(
                execution.status.state_update_time,
                max(now, stored_time + timedelta(microseconds=1)),
            )
            updates.append(ExecutionUpdate(xid, wid, eid, execution, ("status.state",)))
            targets.append((work_unit, eid))
        results = await update_work_unit_executions(conn, updates, writer=WRITER, now=now)
        stopped = []
        for target, result in zip(targets, results, strict=True):
            if result.state in (WorkUnitState.STOPPING, WorkUnitState.STOPPED):
                stopped.append(target)
            elif strict:
                # The work unit moved between our read and our lock (e.g. it finished).
                raise FailedPreconditionError(
                    f"name: {work_unit_name(xid, result.wid)} cannot be stopped from "
                    f"{result.state.name}; it changed concurrently"
                )
        return stopped

    async def stop_work_units(
        self, identity: Identity, xid: int, wids: Sequence[int] | None, *, filter_text: str = ""
    ) -> Operation:
        """StopWorkUnit (``wids`` of one) or BatchStopWorkUnits (``wids`` None: the
        filter's matches); one Operation either way."""
        batch = wids is None
        async with self._store.transaction() as conn:
            experiment = await self._writable_experiment(conn, identity, xid)
            if wids is None:
                wids = await work_units.select_work_unit_ids(conn, xid, filter_text)
            targets = await self._stop_in_transaction(conn, xid, wids, strict=not batch)
            operation = await operations.insert_operation(
                conn,
                NewOperation(
                    xid,
                    None if batch else wids[0],
                    ActionType.STOP,
                    identity.email,
                    pending_tasks=len(targets),
                ),
                now=self._clock(),
                done=not targets,
            )
        await self._publish(
            self._planned(
                TaskKind.DELETE,
                operation,
                experiment,
                [(work_unit, eid, eid) for work_unit, eid in targets],
                Severity.ERROR,
            )
        )
        return operation

    # --- restart -----------------------------------------------------------------------

    async def restart_work_units(
        self, identity: Identity, xid: int, wids: Sequence[int] | None, *, filter_text: str = ""
    ) -> Operation:
        """RestartWorkUnit / BatchRestartWorkUnits: archive eid N, make N+1 RESTARTING
        (allowed from any state), one Operation, one RESTART task per work unit."""
        batch = wids is None
        planned: list[tuple[WorkUnit, int]] = []
        async with self._store.transaction() as conn:
            experiment = await self._writable_experiment(conn, identity, xid)
            if wids is None:
                wids = await work_units.select_work_unit_ids(conn, xid, filter_text)
            now = self._clock()
            for wid in wids:
                restarted = await work_units.restart_work_unit(
                    conn, xid, wid, writer=WRITER, now=now
                )
                new_eid = int(restarted.current_work_unit_execution.name.rsplit("/", 1)[1])
                planned.append((restarted, new_eid))
            operation = await operations.insert_operation(
                conn,
                NewOperation(
                    xid,
                    None if batch else wids[0],
                    ActionType.RESTART,
                    identity.email,
                    pending_tasks=len(planned),
                ),
                now=now,
                done=not planned,
            )
        await self._publish(
            self._planned(
                TaskKind.RESTART,
                operation,
                experiment,
                [(work_unit, eid - 1, eid) for work_unit, eid in planned],
                Severity.FATAL,
            )
        )
        return operation

    # --- update ------------------------------------------------------------------------

    async def update_work_unit(
        self, identity: Identity, xid: int, wid: int, source: WorkUnit, paths: tuple[str, ...]
    ) -> WorkUnit:
        """UpdateWorkUnit; a priority change of a live work unit also patches its JobSet
        (an UPDATE task, SPEC §7.2)."""
        async with self._store.transaction() as conn:
            experiment = await self._writable_experiment(conn, identity, xid)
            updated = await work_units.update_work_unit(
                conn, xid, wid, source, paths, now=self._clock()
            )
        current = updated.current_work_unit_execution
        if "priority" in paths and WorkUnitState(current.status.state) not in _NO_UPDATE_STATES:
            eid = int(current.name.rsplit("/", 1)[1])
            task = self._task(
                TaskKind.UPDATE,
                xid=xid,
                wid=wid,
                target_eid=eid,
                operation="",
                work_unit=updated,
                eid=eid,
                experiment_priority=experiment.priority,
            )
            await self._publish([_Planned(task, Severity.ERROR)])
        return updated

    async def update_experiment(
        self, identity: Identity, xid: int, source: Experiment, paths: tuple[str, ...]
    ) -> Experiment:
        async with self._store.transaction() as conn:
            await self._writable_experiment(conn, identity, xid)
            return await experiments.update_experiment(conn, xid, source, paths, now=self._clock())
