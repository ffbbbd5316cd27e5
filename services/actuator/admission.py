"""Whether a verified task may act at all (SPEC §6 "No task acts twice").

A valid signature says the ESS made the task, not that it is still wanted: an entry can be
replayed from the stream's history, the DLQ or a Redis dump, re-driven by the relay after
it already ran, or overtaken by a newer intent. Before the pause gate and the handler, the
consumer asks :func:`decide_admission`, from the task's outbox row and its work unit's
current execution (one query):

1. The outbox row is finished → REPLAY: the task ran before; nothing is touched, not even
   its Operation (it was counted when the task finished). The entry is acked.
2. A DELETE always proceeds (a stop is never refused here; its guards decide).
3. A CREATE, RESTART or UPDATE whose work unit is gone, whose execution is no longer the
   current one, or whose execution is stopping or finished → UNWANTED: it is settled as
   SKIPPED (its Operation closes), and no JobSet is created or patched — a replayed CREATE
   of a finished unit once re-ran its pod.
4. Otherwise PROCEED.

A task the outbox does not know (published before the outbox existed) is judged by rules
2–4 alone and recorded when it finishes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import structlog

from actuator.outcome import Outcome, TaskResult
from actuator.settle import TaskSettler
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc.store.transactions import OutboxStatus, Store, TaskFacts, fetch_task_facts
from xmc.tasks import task_execution_id
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

_OVER = EXECUTION_TERMINAL_STATES | {WorkUnitState.STOPPING}


class AdmissionAction(enum.StrEnum):
    PROCEED = "proceed"
    REPLAY = "replay"
    UNWANTED = "unwanted"


@dataclass(frozen=True)
class AdmissionDecision:
    action: AdmissionAction
    reason: str


def decide_admission(task: Task, facts: TaskFacts) -> AdmissionDecision:
    """Rules 1–4 of the module docstring, in order."""
    if facts.outbox_status is OutboxStatus.FINISHED:
        return AdmissionDecision(AdmissionAction.REPLAY, "task already carried out (replay)")
    if task.kind == Task.DELETE:
        return AdmissionDecision(AdmissionAction.PROCEED, "a stop always proceeds")
    if facts.work_unit_eid is None or facts.work_unit_state is None:
        return AdmissionDecision(AdmissionAction.UNWANTED, "the work unit no longer exists")
    eid = task_execution_id(task)
    if facts.work_unit_eid != eid:
        return AdmissionDecision(
            AdmissionAction.UNWANTED,
            f"execution {eid} is no longer current (the work unit is at {facts.work_unit_eid})",
        )
    state = WorkUnitState(facts.work_unit_state)
    if state in _OVER:
        return AdmissionDecision(
            AdmissionAction.UNWANTED, f"execution {eid} is {state.name}: nothing to start"
        )
    return AdmissionDecision(AdmissionAction.PROCEED, f"execution {eid} is {state.name}")


class AdmissionGate:
    """The consumer's first step for every verified task."""

    def __init__(self, store: Store, settler: TaskSettler) -> None:
        self._store = store
        self._settler = settler

    async def admit(self, task: Task) -> TaskResult | None:
        """None to go on; otherwise the task's result (settled when it was unwanted)."""
        async with self._store.connection() as conn:
            facts = await fetch_task_facts(conn, task)
        decision = decide_admission(task, facts)
        if decision.action is AdmissionAction.PROCEED:
            return None
        log.info("task not admitted", action=decision.action.value, reason=decision.reason)
        result = TaskResult(Outcome.SKIPPED, decision.reason)
        if decision.action is AdmissionAction.REPLAY:
            return result
        return await self._settler.finish(task, result, outcome="unwanted")
