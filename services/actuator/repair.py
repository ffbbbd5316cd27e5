"""The level-triggered repair sweep (SPEC §6): no execution stays in a state XMC wrote.

The outbox and the relay make sure every task reaches the Actuator, and the finalizer path
makes sure every deleted JobSet reports its end. This sweep is the net under both: it
walks all work units in bounded steps (``RepairSettings.chunk`` per tick, so a tick costs
the same at a hundred or a million work units), picks executions that have been
INITIALIZING, RESTARTING or STOPPING for longer than ``stuck_after_seconds``, compares each
with its latest outbox task and its JobSet, and repairs it (:func:`decide_repair`):

* its task is still on its way (pending, published, parked), or finished moments ago →
  nothing: the relay, the resume worker or the observation loop owns it;
* STOPPING and no JobSet of this execution exists → write STOPPED (nothing is left to
  stop; nothing else would ever end it);
* STOPPING and its JobSet is being deleted → write the terminal state the JobSet shows
  (R1): the finalizer path has not (the Reconciler is down); when it comes back its write
  finds the execution ended and releases the finalizer;
* STOPPING and its JobSet lives → re-drive a DELETE;
* INITIALIZING / RESTARTING and no JobSet of this execution → re-drive the CREATE /
  RESTART; with its JobSet present the observation loop will report it: nothing.

A re-drive is a new task in the outbox (origin ``repair``, no Operation: the original
one was closed when its task finished); after ``max_repairs`` of them the sweep gives
up — loudly, and a create or restart then FAILS with a FATAL message rather than hang.
Every repair is logged and counted in ``xmc_actuator_repairs_total{action}``. With
several Actuators one sweeps at a time (``pg_try_advisory_xact_lock``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import structlog

from actuator.guards import LiveJobSet
from actuator.kube import JobSetClient
from actuator.metrics import REPAIRS_TOTAL
from xmc import labels
from xmc.messages import backend_message
from xmc.model.audit import ACTUATOR
from xmc.model.jobset import decide_work_unit_state
from xmc.model.resume import TaskKind
from xmc.model.states import Severity, WorkUnitState
from xmc.store.transactions import (
    Connection,
    ExecutionTasks,
    OutboxStatus,
    Store,
    enqueue_tasks,
    fetch_experiment_priority,
    fetch_work_unit,
    scan_intent_states,
    try_transaction_lock,
    write_decided_state,
)
from xmc.tasks import build_task
from xmc.timestamps import stamp_after

log = structlog.get_logger()

#: One sweeper at a time across Actuators (see the migration lock for the key family).
REPAIR_LOCK_KEY: Final = 0x584D43_0003
WRITER: Final = "actuator/repair"
_S = WorkUnitState
#: States XMC writes and something must move on from; SCHEDULING_PAUSED waits for a
#: resume, which the resume worker's own sweep drives.
REPAIRED_STATES: Final = (_S.INITIALIZING, _S.RESTARTING, _S.STOPPING)
_ON_ITS_WAY: Final = frozenset({OutboxStatus.PENDING, OutboxStatus.PUBLISHED, OutboxStatus.PARKED})


@dataclass(frozen=True)
class RepairSettings:
    interval_seconds: float = 10.0
    """Seconds between two sweep steps."""
    stuck_after_seconds: float = 120.0
    """How long an execution may stay in an XMC-written state (and its last task be
    finished) before the sweep looks at it."""
    chunk: int = 2000
    """Work units one step reads."""
    max_repairs: int = 3
    """Re-drives per execution before the sweep gives up on it."""


class RepairAction(enum.StrEnum):
    """Also the ``action`` label of ``xmc_actuator_repairs_total``."""

    NONE = "none"
    WRITE_TERMINAL = "write_terminal"
    REDRIVE = "redrive"
    GIVE_UP = "give_up"


@dataclass(frozen=True)
class JobSetView:
    """What the sweep needs of the work unit's JobSet (None: there is none)."""

    eid: int
    deleting: bool
    #: The state R1 reports for it once it is being deleted.
    terminal_state: WorkUnitState
    last_edit: datetime | None

    @classmethod
    def read(cls, jobset: Mapping[str, Any] | None) -> JobSetView | None:
        """Read with the guards' rules (an unreadable execution id counts as 0, an
        unreadable last edit as none)."""
        if jobset is None:
            return None
        live = LiveJobSet.read(jobset)
        metadata = jobset.get("metadata") or {}
        deleted = {**jobset, "metadata": {**metadata, "deletionTimestamp": "x"}}
        return cls(
            eid=live.eid,
            deleting=live.deleting,
            terminal_state=decide_work_unit_state(deleted).state,
            last_edit=live.last_edit_time,
        )


@dataclass(frozen=True)
class RepairDecision:
    action: RepairAction
    reason: str
    #: WRITE_TERMINAL: the state to write.
    state: WorkUnitState | None = None
    #: REDRIVE: the kind of task to write.
    kind: TaskKind | None = None


def decide_repair(
    stuck: ExecutionTasks, jobset: JobSetView | None, *, now: datetime, settings: RepairSettings
) -> RepairDecision:
    """The rules of the module docstring, in order."""
    state = WorkUnitState(stuck.state)
    if stuck.task_status in _ON_ITS_WAY:
        return RepairDecision(RepairAction.NONE, f"its task is {stuck.task_status}")
    wait = timedelta(seconds=settings.stuck_after_seconds)
    if stuck.task_finished_time is not None and now - stuck.task_finished_time < wait:
        return RepairDecision(RepairAction.NONE, "its task finished moments ago")
    own = jobset is not None and jobset.eid == stuck.eid
    if state is _S.STOPPING:
        if jobset is None or jobset.eid < stuck.eid:
            return RepairDecision(
                RepairAction.WRITE_TERMINAL, "no JobSet of this execution is left", _S.STOPPED
            )
        if not own:
            return RepairDecision(RepairAction.NONE, "a newer execution's JobSet")
        assert jobset is not None
        if jobset.deleting:
            return RepairDecision(
                RepairAction.WRITE_TERMINAL,
                "its JobSet is being deleted and no terminal state was written",
                jobset.terminal_state,
            )
        return _redrive(stuck, TaskKind.DELETE, "its JobSet still runs", settings)
    if own:
        return RepairDecision(RepairAction.NONE, "its JobSet exists; the Reconciler reports it")
    kind = TaskKind.CREATE if state is _S.INITIALIZING else TaskKind.RESTART
    return _redrive(stuck, kind, "no JobSet of this execution exists", settings)


def _redrive(
    stuck: ExecutionTasks, kind: TaskKind, why: str, settings: RepairSettings
) -> RepairDecision:
    if stuck.repairs >= settings.max_repairs:
        return RepairDecision(
            RepairAction.GIVE_UP, f"{why}, and {stuck.repairs} re-drives did not help"
        )
    return RepairDecision(RepairAction.REDRIVE, f"{why}: re-drive a {kind.name}", kind=kind)


class RepairSweep:
    def __init__(
        self,
        store: Store,
        kube: JobSetClient,
        *,
        namespace: str,
        clock: Callable[[], datetime],
        settings: RepairSettings | None = None,
    ) -> None:
        self._store = store
        self._kube = kube
        self._namespace = namespace
        self._clock = clock
        self.settings = settings or RepairSettings()
        self._cursor = (0, 0)

    async def run(self, stop: asyncio.Event) -> None:
        """Sweep every ``interval_seconds`` until ``stop``; a failed step is logged and the
        next one goes on (a sweep that dies silently would be no safety net)."""
        while not stop.is_set():
            try:
                await self.sweep_once()
            except Exception:
                log.exception("repair sweep step failed; trying again next interval")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.interval_seconds)

    async def sweep_once(self) -> list[tuple[ExecutionTasks, RepairDecision]]:
        """One bounded step; returns what it decided for each stuck execution it met."""
        now = self._clock()
        older_than = now - timedelta(seconds=self.settings.stuck_after_seconds)
        decided = []
        async with self._store.transaction() as conn:
            if not await try_transaction_lock(conn, REPAIR_LOCK_KEY):
                return []
            stuck, upper = await scan_intent_states(
                conn,
                after=self._cursor,
                limit=self.settings.chunk,
                states=[int(s) for s in REPAIRED_STATES],
                older_than=older_than,
            )
            for item in stuck:
                name = labels.jobset_name(item.xid, item.wid)
                jobset = JobSetView.read(await self._kube.get_jobset(self._namespace, name))
                decision = decide_repair(item, jobset, now=now, settings=self.settings)
                await self._act(conn, item, decision, jobset, now=now)
                decided.append((item, decision))
        self._cursor = upper or (0, 0)
        return decided

    async def _act(
        self,
        conn: Connection,
        item: ExecutionTasks,
        decision: RepairDecision,
        jobset: JobSetView | None,
        *,
        now: datetime,
    ) -> None:
        if decision.action is RepairAction.NONE:
            return
        REPAIRS_TOTAL.labels(decision.action.value).inc()
        event = "repair: giving up" if decision.action is RepairAction.GIVE_UP else "repair"
        (log.error if decision.action is RepairAction.GIVE_UP else log.warning)(
            event, xid=item.xid, wid=item.wid, eid=item.eid, action=decision.action.value,
            state=WorkUnitState(item.state).name, reason=decision.reason,
        )  # fmt: skip
        if decision.action is RepairAction.WRITE_TERMINAL and decision.state is not None:
            await write_decided_state(
                conn, item.xid, item.wid, item.eid, decision.state, writer=WRITER,
                actor=ACTUATOR, now=now,
            )  # fmt: skip
        elif decision.action is RepairAction.REDRIVE and decision.kind is not None:
            await self._redrive(conn, item, decision.kind, jobset, now=now)
        elif decision.action is RepairAction.GIVE_UP and item.state != _S.STOPPING:
            text = f"XMC could not start execution {item.eid}: {decision.reason}"
            await write_decided_state(
                conn, item.xid, item.wid, item.eid, _S.FAILED,
                message=backend_message(Severity.FATAL, item.xid, item.wid, text),
                writer=WRITER, actor=ACTUATOR, now=now,
            )  # fmt: skip

    async def _redrive(
        self,
        conn: Connection,
        item: ExecutionTasks,
        kind: TaskKind,
        jobset: JobSetView | None,
        *,
        now: datetime,
    ) -> None:
        """A new task for the execution, built from the work unit as stored; stamped after
        the JobSet's last edit, so the Delete's last-edit guard lets it act."""
        work_unit = await fetch_work_unit(conn, item.xid, item.wid)
        priority = await fetch_experiment_priority(conn, item.xid)
        operation_time = stamp_after(jobset.last_edit if jobset else None, now)
        target = item.eid - 1 if kind is TaskKind.RESTART else item.eid
        task = build_task(
            int(kind),
            xid=item.xid,
            wid=item.wid,
            target_eid=target,
            operation="",
            work_unit=work_unit,
            eid=item.eid,
            experiment_priority=priority or 0,
            operation_time=operation_time,
        )
        await enqueue_tasks(conn, [task], now=now, origin="repair")
