"""Automatic retries (issue 28, docs/retries.md, decision 0042): the verdict on a FAILED
execution, and the retry itself, in the transaction that records the FAILED state.

Why there: a state becomes FAILED once per execution (the guard keeps a terminal state),
so the transaction that makes it FAILED is the one place a failure is judged exactly
once. It commits the FAILED state, the verdict (``retry_decisions``, keyed by the failed
execution), and for a retry everything RestartWorkUnit writes — execution N archived,
N+1 current in RESTARTING, an Operation, the RESTART task in the outbox, due after the
backoff — or none of it. A kill -9 before the commit leaves the Reconciler's FAILED
observation unacknowledged, so it is sent again and judged then; after the commit, a
resend is fenced off (N is no longer the current execution). A Redis restart loses only
stream entries, which the relay re-drives from the outbox like any intent's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Final

import structlog

from xmc.messages import backend_message
from xmc.model.audit import RETRY_PRINCIPAL, Actor
from xmc.model.masks import SYSTEM_MESSAGE_PATH
from xmc.model.merge import ExecutionUpdate
from xmc.model.resume import TaskKind
from xmc.model.retries import DEFAULT_PER_MINUTE, decide_retry, final_text, retry_text
from xmc.model.retry_policy import PolicyError, RetryPolicy, parse_retry_policy, retry_policy_of
from xmc.model.states import Severity, WorkUnitState
from xmc.store.transactions import (
    ActionType,
    Connection,
    ItemResult,
    NewOperation,
    attempt_of,
    enqueue_tasks,
    fetch_experiment_priority,
    fetch_experiment_retry_policy,
    fetch_work_unit,
    insert_operation,
    record_decision,
    restart_work_unit,
    retry_row,
    take_retry_slot,
    update_work_unit_executions,
)
from xmc.tasks import build_task
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

log = structlog.get_logger()

#: The history's writer of a retry's restart (its principal, and the Operation's
#: requester, is ``RETRY_PRINCIPAL``; its request id the observation's that failed it).
WRITER: Final = "ess/retry"


def unit_policy(work_unit: WorkUnit, experiment_default: str | None) -> RetryPolicy | None:
    """The unit's own policy (its JobSet annotation), else its experiment's default.
    Both were checked when set; one that no longer parses (written by an older XMC) is
    logged and treated as none, never as a reason to fail the FAILED write."""
    try:
        own = retry_policy_of(work_unit.executable.jobset.annotations)
        if own is not None or experiment_default is None:
            return own
        return parse_retry_policy(experiment_default)
    except PolicyError as error:
        log.warning("retry policy unreadable; not retried", work_unit=work_unit.name,
                    error=str(error))  # fmt: skip
        return None


@dataclass
class Judged:
    """What a batch's retry step did, by failed execution (xid, wid, eid)."""

    retried: set[tuple[int, int, int]] = field(default_factory=set)
    #: Why a policy left a failure failed ("attempt 3 of 3: not retried (…)").
    notes: dict[tuple[int, int, int], str] = field(default_factory=dict)
    #: Every verdict given, for the business metrics once the batch commits.
    verdicts: list[str] = field(default_factory=list)


class Retries:
    """Judges FAILED executions and retries them (see the module docstring)."""

    def __init__(self, *, per_minute: int = DEFAULT_PER_MINUTE) -> None:
        self.per_minute = per_minute

    async def after_update(
        self,
        conn: Connection,
        items: Sequence[ExecutionUpdate],
        results: Sequence[ItemResult],
        *,
        request_id: str,
        now: datetime,
    ) -> Judged:
        """Judge each item this batch turned FAILED that carried the run's failure; in the
        batch's transaction. A retry is XMC's decision (``RETRY_PRINCIPAL``), made in the
        request (``request_id``) that reported the failure."""
        judged = Judged()
        by = Actor(RETRY_PRINCIPAL, request_id)
        for item, result in zip(items, results, strict=True):
            if (
                item.failure is not None
                and result.state_changed
                and result.state is WorkUnitState.FAILED
            ):
                await self._judge(conn, item, judged, by=by, now=now)
        return judged

    async def _judge(
        self, conn: Connection, item: ExecutionUpdate, judged: Judged, *, by: Actor,
        now: datetime,
    ) -> None:  # fmt: skip
        assert item.failure is not None
        xid, wid, eid = item.xid, item.wid, item.eid
        work_unit = await fetch_work_unit(conn, xid, wid)
        policy = unit_policy(work_unit, await fetch_experiment_retry_policy(conn, xid))
        if policy is None:
            return
        attempt = await attempt_of(conn, xid, wid, eid)
        decision = decide_retry(policy, attempt, item.failure)
        row = retry_row(
            eid,
            decision,
            attempt=attempt,
            max_attempts=policy.max_attempts,
            exit_code=item.failure.exit_code,
            disrupted=item.failure.disrupted,
            now=now,
        )
        bound = log.bind(xid=xid, wid=wid, eid=eid, verdict=decision.verdict.value)
        judged.verdicts.append(decision.verdict.value)
        if not decision.retry:
            await record_decision(conn, xid, wid, row)
            note = final_text(decision, attempt, policy.max_attempts)
            judged.notes[(xid, wid, eid)] = note
            bound.info("failure not retried", reason=note)
            return
        assert decision.next is not None
        due = await take_retry_slot(
            conn, due=now + timedelta(seconds=policy.backoff_seconds), per_minute=self.per_minute
        )
        restarted = await restart_work_unit(conn, xid, wid, writer=WRITER, actor=by, now=now)
        operation = await insert_operation(
            conn, NewOperation(xid, wid, ActionType.RESTART, by), now=now
        )
        row = replace(
            row,
            retry_eid=eid + 1,
            retry_attempt=decision.next.number,
            counted=decision.counted,
            due_time=due,
            operation=operation.name,
        )
        if not await record_decision(conn, xid, wid, row):
            raise AssertionError(f"execution {eid} of {xid}/{wid} judged twice")
        text = retry_text(decision, policy.max_attempts, due=due, now=now)
        await self._say(conn, xid, wid, eid + 1, text, by=by, now=now)
        priority = await fetch_experiment_priority(conn, xid) or 0
        task = build_task(
            int(TaskKind.RESTART),
            xid=xid,
            wid=wid,
            target_eid=eid,
            operation=operation.name,
            work_unit=restarted,
            eid=eid + 1,
            experiment_priority=priority,
            operation_time=now,
        )
        await enqueue_tasks(conn, [task], now=now, origin="retry", due=due)
        bound.info("failure retried", text=text, due=due.isoformat(), task_id=task.task_id)
        judged.retried.add((xid, wid, eid))

    @staticmethod
    async def _say(
        conn: Connection, xid: int, wid: int, eid: int, text: str, *, by: Actor, now: datetime
    ) -> None:
        """The new execution's INFO system message: what the unit page, ``xmc wu get``
        and the client's status show first."""
        execution = WorkUnitExecution()
        message = backend_message(Severity.INFO, xid, wid, text)
        set_timestamp(message.create_time, now)
        execution.status.system_message.CopyFrom(message)
        await update_work_unit_executions(
            conn,
            [ExecutionUpdate(xid, wid, eid, execution, (SYSTEM_MESSAGE_PATH,))],
            writer=WRITER,
            actor=by,
            now=now,
        )
