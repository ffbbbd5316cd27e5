"""The intent loop's first half (SPEC §4, §6): write intent, record the Operation, and put
the task in the outbox — all in one transaction.

A task is a row of ``task_outbox`` written in the transaction of the intent it carries
(the transactional outbox): once the RPC has answered, the intent and its task are both
durable, whatever happens to this process or to Redis next. The outbox relay
(``ess.relay``) publishes it to ``xmc-tasks-stream``; a commit wakes the relay of this
process, so the task is on the stream milliseconds later. A Redis outage only delays it:
the Operation stays open until the Actuator has carried the task out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from google.longrunning.operations_proto_pb2 import Operation

from ess.auth import Identity, require_writer_of
from ess.creates import CreateCoalescer
from ess.quotas import QuotaGate, caller_bound, held
from xmc.errors import FailedPreconditionError, QuotaExceededError
from xmc.model.audit import Actor, AuditAction, AuditEntry
from xmc.model.merge import ExecutionUpdate
from xmc.model.queues import priority_change_problem
from xmc.model.resume import TaskKind
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.names import experiment_name, parse_work_unit_name, work_unit_name
from xmc.store.transactions import (
    ActionType,
    Connection,
    Created,
    NewOperation,
    Store,
    enqueue_tasks,
    fetch_experiment,
    fetch_work_unit,
    insert_operation,
    record_audit,
    restart_work_unit,
    select_work_unit_ids,
    update_experiment,
    update_work_unit,
    update_work_unit_executions,
)
from xmc.tasks import build_task
from xmc.timestamps import set_timestamp, stamp_after, to_datetime
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1.tasks_pb2 import Task

#: Writer label of the ESS in the status history.
WRITER = "ess"

#: States in which a priority change patches nothing: the JobSet is going or gone, and an
#: UPDATE would move its last-edit label past the pending Delete (which would then be
#: rejected as stale, stranding the stop).
_NO_UPDATE_STATES = EXECUTION_TERMINAL_STATES | {WorkUnitState.STOPPING}


def _eid(work_unit: WorkUnit) -> int:
    return int(work_unit.current_work_unit_execution.name.rsplit("/", 1)[1])


class Intents:
    """Create, stop, restart and update work units (single and batch).

    ``committed`` is called after every transaction that put tasks in the outbox (the
    relay's ``wake``); it must not block.
    """

    def __init__(
        self,
        store: Store,
        *,
        clock: Callable[[], datetime],
        committed: Callable[[], None] = lambda: None,
        quotas: QuotaGate | None = None,
    ) -> None:
        self._store = store
        self._clock = clock
        self._committed = committed
        self._quotas = quotas
        self._creates = CreateCoalescer(store, self, clock=clock, writer=WRITER, quotas=quotas)

    async def drain(self) -> None:
        """Finish the creates still queued (graceful shutdown)."""
        await self._creates.drain()

    # --- building blocks ---------------------------------------------------------------

    def _task(
        self,
        kind: TaskKind,
        operation: str,
        work_unit: WorkUnit,
        *,
        target_eid: int,
        eid: int,
        experiment_priority: int,
    ) -> Task:
        xid, wid = parse_work_unit_name(work_unit.name)
        return build_task(
            int(kind),
            xid=xid,
            wid=wid,
            target_eid=target_eid,
            operation=operation,
            work_unit=work_unit,
            eid=eid,
            experiment_priority=experiment_priority,
            operation_time=self._clock(),
        )

    def _current(self, kind: TaskKind, work_unit: WorkUnit, experiment: Experiment) -> Task:
        """A task on the unit's current execution that carries no Operation (UPDATE and
        SET_PRIORITY: a relabel, not a new execution)."""
        eid = _eid(work_unit)
        return self._task(
            kind, "", work_unit, target_eid=eid, eid=eid, experiment_priority=experiment.priority
        )

    async def _enqueue(self, conn: Connection, tasks: Sequence[Task]) -> None:
        """Put tasks in the outbox, in the caller's transaction."""
        await enqueue_tasks(conn, tasks, now=self._clock())

    def tasks_committed(self) -> None:
        """Tell the relay that committed tasks wait in the outbox."""
        self._committed()

    async def _writable_experiment(
        self, conn: Connection, identity: Identity, xid: int
    ) -> Experiment:
        experiment = await fetch_experiment(conn, xid)
        require_writer_of(identity, experiment)
        return experiment

    # --- create ------------------------------------------------------------------------

    async def create_work_unit(
        self, identity: Identity, xid: int, work_unit: WorkUnit, *, wid: int | None, by: Actor
    ) -> Operation:
        """CreateWorkUnit (grouped with concurrent ones into one transaction); with a
        client-chosen ``wid`` a repeat returns the first Operation and creates nothing.
        A caller whose quota refused it within the last second is refused here, before
        it costs a transaction; a refusal is answered after its hold (``ess.quotas``)."""
        try:
            bound = caller_bound(self._quotas, identity)
            return await self._creates.submit(identity, xid, work_unit, wid, bound, by=by)
        except QuotaExceededError as refusal:
            raise await held(refusal) from None

    async def enqueue_creates(self, conn: Connection, created: Sequence[Created]) -> None:
        """The CREATE tasks of freshly created work units, in their creating transaction."""
        tasks = []
        for outcome in created:
            assert outcome.work_unit is not None
            tasks.append(
                self._task(
                    TaskKind.CREATE,
                    outcome.operation.name,
                    outcome.work_unit,
                    target_eid=1,
                    eid=1,
                    experiment_priority=outcome.experiment_priority,
                )
            )
        await self._enqueue(conn, tasks)

    # --- stop --------------------------------------------------------------------------

    async def _stop_in_transaction(
        self, conn: Connection, xid: int, wids: Sequence[int], *, strict: bool, by: Actor
    ) -> list[tuple[WorkUnit, int]]:
        """Write STOPPING (or STOPPED for a paused work unit: it has no JobSet) with the
        masked ``["status.state"]`` path. Returns (work unit, eid) of those stopped."""
        now = self._clock()
        targets: list[tuple[WorkUnit, int]] = []
        updates = []
        for wid in wids:
            work_unit = await fetch_work_unit(conn, xid, wid)
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
            set_timestamp(execution.status.state_update_time, stamp_after(stored_time, now))
            updates.append(ExecutionUpdate(xid, wid, eid, execution, ("status.state",)))
            targets.append((work_unit, eid))
        results = await update_work_unit_executions(conn, updates, writer=WRITER, actor=by, now=now)
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
        self,
        identity: Identity,
        xid: int,
        wids: Sequence[int] | None,
        *,
        by: Actor,
        filter_text: str = "",
    ) -> Operation:
        """StopWorkUnit (``wids`` of one) or BatchStopWorkUnits (``wids`` None: the
        filter's matches); one Operation either way."""
        batch = wids is None
        async with self._store.transaction() as conn:
            experiment = await self._writable_experiment(conn, identity, xid)
            if wids is None:
                wids = await select_work_unit_ids(conn, xid, filter_text)
            targets = await self._stop_in_transaction(conn, xid, wids, strict=not batch, by=by)
            operation = await insert_operation(
                conn,
                NewOperation(
                    xid,
                    None if batch else wids[0],
                    ActionType.STOP,
                    by,
                    pending_tasks=len(targets),
                ),
                now=self._clock(),
                done=not targets,
            )
            tasks = [
                self._task(
                    TaskKind.DELETE,
                    operation.name,
                    work_unit,
                    target_eid=eid,
                    eid=eid,
                    experiment_priority=experiment.priority,
                )
                for work_unit, eid in targets
            ]
            await self._enqueue(conn, tasks)
        if tasks:
            self.tasks_committed()
        return operation

    # --- restart -----------------------------------------------------------------------

    async def restart_work_units(
        self,
        identity: Identity,
        xid: int,
        wids: Sequence[int] | None,
        *,
        by: Actor,
        filter_text: str = "",
    ) -> Operation:
        """RestartWorkUnit / BatchRestartWorkUnits: archive eid N, make N+1 RESTARTING
        (allowed from any state), one Operation, one RESTART task per work unit."""
        batch = wids is None
        async with self._store.transaction() as conn:
            experiment = await self._writable_experiment(conn, identity, xid)
            if wids is None:
                wids = await select_work_unit_ids(conn, xid, filter_text)
            now = self._clock()
            restarted = [
                await restart_work_unit(conn, xid, wid, writer=WRITER, actor=by, now=now)
                for wid in wids
            ]
            operation = await insert_operation(
                conn,
                NewOperation(
                    xid,
                    None if batch else wids[0],
                    ActionType.RESTART,
                    by,
                    pending_tasks=len(restarted),
                ),
                now=now,
                done=not restarted,
            )
            tasks = [
                self._task(
                    TaskKind.RESTART,
                    operation.name,
                    work_unit,
                    target_eid=_eid(work_unit) - 1,
                    eid=_eid(work_unit),
                    experiment_priority=experiment.priority,
                )
                for work_unit in restarted
            ]
            await self._enqueue(conn, tasks)
        if tasks:
            self.tasks_committed()
        return operation

    # --- update ------------------------------------------------------------------------

    async def update_work_unit(
        self,
        identity: Identity,
        xid: int,
        wid: int,
        source: WorkUnit,
        paths: tuple[str, ...],
        *,
        by: Actor,
    ) -> WorkUnit:
        """UpdateWorkUnit; a priority change of a live work unit also patches its JobSet
        (an UPDATE task, SPEC §7.2)."""
        async with self._store.transaction() as conn:
            experiment = await self._writable_experiment(conn, identity, xid)
            updated = await update_work_unit(conn, xid, wid, source, paths, now=self._clock())
            entry = AuditEntry(
                AuditAction.UPDATE_WORK_UNIT, work_unit_name(xid, wid), xid, ",".join(paths)
            )
            await record_audit(conn, by, entry, now=self._clock())
            state = WorkUnitState(updated.current_work_unit_execution.status.state)
            patch = "priority" in paths and state not in _NO_UPDATE_STATES
            if patch:
                await self._enqueue(conn, [self._current(TaskKind.UPDATE, updated, experiment)])
        if patch:
            self.tasks_committed()
        return updated

    async def update_experiment(
        self,
        identity: Identity,
        xid: int,
        source: Experiment,
        paths: tuple[str, ...],
        *,
        by: Actor,
    ) -> Experiment:
        async with self._store.transaction() as conn:
            await self._writable_experiment(conn, identity, xid)
            updated = await update_experiment(conn, xid, source, paths, now=self._clock())
            entry = AuditEntry(
                AuditAction.UPDATE_EXPERIMENT, experiment_name(xid), xid, ",".join(paths)
            )
            await record_audit(conn, by, entry, now=self._clock())
            return updated

    # --- an admin's priority change ----------------------------------------------------

    async def set_priority(
        self, identity: Identity, xid: int, wid: int, priority_class: str, *, by: Actor
    ) -> Task:
        """``xmc.v1.QueueService.SetWorkUnitPriority`` (the caller checked the admin): a
        SET_PRIORITY task for the current execution, committed to the outbox, where the
        intent is recorded (class, requester, time); the work unit itself is unchanged,
        so a restart goes back to the unit's own class."""
        async with self._store.transaction() as conn:
            experiment = await fetch_experiment(conn, xid)
            work_unit = await fetch_work_unit(conn, xid, wid)
            state = WorkUnitState(work_unit.current_work_unit_execution.status.state)
            if problem := priority_change_problem(state):
                raise FailedPreconditionError(
                    f"name: work unit {wid} of experiment {xid}: {problem}"
                )
            task = self._current(TaskKind.SET_PRIORITY, work_unit, experiment)
            task.payload.priority_class = priority_class
            task.payload.requested_by = identity.email
            await self._enqueue(conn, [task])
            entry = AuditEntry(
                AuditAction.SET_WORK_UNIT_PRIORITY, work_unit.name, xid, priority_class
            )
            await record_audit(conn, by, entry, now=self._clock())
        self.tasks_committed()
        return task
