"""Settling a task entry: ack, dead-letter, or leave pending (step 5 of
``actuator.consumer``).

:func:`decide_settlement` is the pure decision; :class:`EntrySettler` carries it out.

Dead-lettering is two steps, because the DLQ and the task stream are different keys (on a
Redis Cluster, in different slots; decision 0027): first a script on the DLQ's slot adds
the entry to the DLQ unless its source entry id is among the dead-lettered ones
(``StreamNames.dead_lettered_key``, a sorted set capped like the DLQ), then ``XACK``. A
crash between the two leaves the entry pending; its redelivery dead-letters it again,
finds it there, adds nothing and acks. Two consumers racing on one entry: the script runs
for one at a time, and the second finds the first's entry. So an entry is in the DLQ once,
and ``xmc_actuator_dlq_total`` counts it once.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import structlog

from actuator.claiming import Delivery
from actuator.metrics import DLQ_REPEATS_TOTAL, DLQ_TOTAL, TASKS_TOTAL
from actuator.outcome import Outcome, TaskResult
from actuator.settle import TaskSettler
from xmc.model.resume import TaskKind
from xmc.store.transactions import Store
from xmc.streams import ACTUATOR_GROUP, StreamNames
from xmc.tasks import TaskRejected, TaskRejectReason
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

#: DLQ ``reason`` of a task the handler failed permanently (the ``code`` field says how).
REASON_PERMANENT: Final = "permanent"
#: DLQ ``reason`` of a task delivered ``max_deliveries`` times without finishing.
REASON_MAX_DELIVERIES: Final = "max_deliveries"
#: Operation error of a task that never finished; the last transient code when known.
MAX_DELIVERIES_CODE: Final = "UNAVAILABLE"

#: The DLQ ``code`` per rejection: a forged or unsigned task is not authorized, a garbled
#: one is invalid, and one signed too long ago (or for later) is no longer (not yet) in a
#: state to be carried out; none of them can succeed on a retry.
REJECTION_CODES: Final[Mapping[TaskRejectReason, str]] = {
    TaskRejectReason.MISSING_FIELD: "PERMISSION_DENIED",
    TaskRejectReason.BAD_SIGNATURE: "PERMISSION_DENIED",
    TaskRejectReason.WRONG_ISSUER: "PERMISSION_DENIED",
    TaskRejectReason.WRONG_AUDIENCE: "PERMISSION_DENIED",
    TaskRejectReason.DIGEST_MISMATCH: "INVALID_ARGUMENT",
    TaskRejectReason.UNDECODABLE: "INVALID_ARGUMENT",
    TaskRejectReason.EXPIRED: "FAILED_PRECONDITION",
    TaskRejectReason.NOT_YET_VALID: "FAILED_PRECONDITION",
}

# Add an entry to the DLQ unless its source entry is there already. KEYS: the set of
# dead-lettered source ids, the DLQ (one slot: the set is tagged with the DLQ's name).
# ARGV: the source entry id, the cap of both, then the DLQ entry's field/values. Both are
# trimmed to the cap together, exactly (dead letters are rare: the cost does not matter),
# so the set remembers the source of each entry the DLQ holds and no more: a refusal storm
# cannot fill Redis with it. Returns the DLQ entry id, or false when it was there.
_DEAD_LETTER = """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return false
end
local id = redis.call('XADD', KEYS[2], 'MAXLEN', ARGV[2], '*', unpack(ARGV, 3))
redis.call('ZADD', KEYS[1], tonumber(string.match(id, '^%d+')), ARGV[1])
redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -tonumber(ARGV[2]) - 1)
return id
"""


class Settlement(enum.StrEnum):
    """What to do with an entry once its handling is over."""

    ACK = "ack"
    #: The handler closed the Operation with its error; copy to the DLQ and ack.
    DEAD_LETTER = "dead_letter"
    #: Out of deliveries; nobody closed the Operation, so close it, then DLQ and ack.
    DEAD_LETTER_AND_CLOSE = "dead_letter_and_close"
    #: Transient failure with deliveries left: a later claim retries it.
    LEAVE_PENDING = "leave_pending"


def decide_settlement(
    outcome: Outcome, *, deliveries: int, max_deliveries: int, interrupted: bool = False
) -> Settlement:
    """``interrupted``: a stop cut the retries short, so they do not count as exhausted."""
    if outcome in (Outcome.DONE, Outcome.SKIPPED, Outcome.PARKED):
        return Settlement.ACK
    if outcome == Outcome.PERMANENT:
        return Settlement.DEAD_LETTER
    if deliveries >= max_deliveries and not interrupted:
        return Settlement.DEAD_LETTER_AND_CLOSE
    return Settlement.LEAVE_PENDING


def kind_label(task: Task | None) -> str:
    if task is None:
        return "unknown"
    try:
        return TaskKind(task.kind).name.lower()
    except ValueError:
        return "unknown"


@dataclass(kw_only=True)
class EntrySettler:
    """Acks, dead-letters and gives up entries for one consumer (``consumer`` names it in
    each DLQ entry)."""

    redis: Any
    names: StreamNames
    store: Store
    consumer: str
    max_deliveries: int
    #: Newest entries the DLQ keeps.
    dlq_max_entries: int
    #: Wall time: stamps the DLQ entry and the settled Operation.
    clock: Callable[[], datetime]
    _tasks: TaskSettler = field(init=False)
    _script: Any = field(init=False)

    def __post_init__(self) -> None:
        self._tasks = TaskSettler(self.store, clock=self.clock)
        self._script = self.redis.register_script(_DEAD_LETTER)

    async def settle(
        self, delivery: Delivery, task: Task, result: TaskResult, *, interrupted: bool
    ) -> None:
        settlement = decide_settlement(
            result.outcome,
            deliveries=delivery.deliveries,
            max_deliveries=self.max_deliveries,
            interrupted=interrupted,
        )
        if settlement == Settlement.ACK:
            await asyncio.shield(
                self.redis.xack(self.names.tasks, ACTUATOR_GROUP, delivery.entry_id)
            )
            log.info("task finished", outcome=result.outcome.value, reason=result.reason)
        elif settlement == Settlement.DEAD_LETTER:
            await self.dead_letter(delivery, REASON_PERMANENT, result.code, result.reason)
        elif settlement == Settlement.DEAD_LETTER_AND_CLOSE:
            await self.give_up(delivery, task, result.code, result.reason)
        else:
            log.warning(
                "retries exhausted; leaving the entry pending for a later claim",
                deliveries=delivery.deliveries,
                reason=result.reason,
            )

    async def give_up(self, delivery: Delivery, task: Task, code: str, detail: str) -> None:
        """Out of deliveries: settle the task as failed (nobody else will), then dead-letter."""
        if code == "OK":
            code = MAX_DELIVERIES_CODE
        message = f"task not carried out after {delivery.deliveries} deliveries: {detail}"
        failed = TaskResult(Outcome.PERMANENT, message, code)
        await self._tasks.finish(task, failed, outcome=REASON_MAX_DELIVERIES)
        await self.dead_letter(delivery, REASON_MAX_DELIVERIES, code, message)

    async def reject(self, delivery: Delivery, rejected: TaskRejected) -> None:
        """Dead-letter an entry that failed verification; it touches nothing else."""
        task = rejected.task
        bound = {"task_id": task.task_id, "xid": task.xid, "wid": task.wid} if task else {}
        code = REJECTION_CODES.get(rejected.reason, "INVALID_ARGUMENT")
        with structlog.contextvars.bound_contextvars(entry_id=delivery.entry_id, **bound):
            try:
                log.warning("task rejected", reason=rejected.reason.value, detail=rejected.detail)
                if await self.dead_letter(delivery, rejected.reason.value, code, rejected.detail):
                    TASKS_TOTAL.labels(kind_label(task), "rejected").inc()
            except Exception:
                log.exception("could not dead-letter a rejected task; leaving it pending")

    async def dead_letter(self, delivery: Delivery, reason: str, code: str, detail: str) -> bool:
        """Copy the entry to the DLQ once, then ack it (see the module docstring); whether
        this call added it. Shielded: a cancelled caller does not stop it halfway."""
        return await asyncio.shield(self._dead_letter(delivery, reason, code, detail))

    async def _dead_letter(self, delivery: Delivery, reason: str, code: str, detail: str) -> bool:
        if not await self._pending(delivery.entry_id):
            # Another consumer holding it too acked it (it finished the task): nothing to
            # dead-letter, as when the XACK came first in the one-script version.
            log.info("entry already acked by another consumer; not dead-lettered")
            return False
        entry: dict[Any, Any] = dict(delivery.fields)
        entry.update(
            reason=reason,
            code=code,
            detail=detail,
            consumer=self.consumer,
            source_id=delivery.entry_id,
            failed_at=self.clock().isoformat(),
        )
        args: list[Any] = [delivery.entry_id, self.dlq_max_entries]
        for name, value in entry.items():
            args.extend((name, value))
        added = await self._script(keys=[self.names.dead_lettered_key, self.names.dlq], args=args)
        if added:
            DLQ_TOTAL.labels(reason).inc()
            log.warning("task dead-lettered", reason=reason, code=code, detail=detail)
        else:
            DLQ_REPEATS_TOTAL.inc()
            log.info("entry already dead-lettered (a redelivery or a second consumer)")
        await self.redis.xack(self.names.tasks, ACTUATOR_GROUP, delivery.entry_id)
        return bool(added)

    async def _pending(self, entry_id: str) -> bool:
        """Whether the entry is still in the group's pending list (any consumer's)."""
        rows = await self.redis.xpending_range(
            self.names.tasks, ACTUATOR_GROUP, min=entry_id, max=entry_id, count=1
        )
        return bool(rows)
