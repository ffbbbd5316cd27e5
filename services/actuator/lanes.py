"""One lane per work unit (steps 3 and 4 of ``actuator.consumer``): serialize, handle, retry.

Verified tasks go to one lane per (xid, wid); a lane runs its tasks one after the other
in stream order, different lanes run concurrently (the shape of kopf's per-object
queues). Each task meets the admission gate, then the pause gate, then its handler; a
RETRY result is retried in-process with ``xmc.retry.decide_retry`` backoff, and an
exception counts as RETRY (code ``UNKNOWN``), so a bug or a Postgres outage cannot lose a
task. Whatever the result, the lane hands it to the :class:`EntrySettler`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from actuator.claiming import Delivery
from actuator.metrics import TASK_SECONDS, TASKS_TOTAL
from actuator.outcome import Outcome, TaskHandler, TaskResult
from actuator.settlement import (
    MAX_DELIVERIES_CODE,
    REASON_MAX_DELIVERIES,
    EntrySettler,
    kind_label,
)
from xmc.retry import ErrorClass, RetryAction, RetryPolicy, Sleep, decide_retry, sleep_or_stop
from xmc.tasks import task_execution_id
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

WorkUnitKey = tuple[int, int]


class PauseGate(Protocol):
    """``TaskPauseHandler``: a PARKED result when the task was parked, None to proceed."""

    async def park_if_paused(self, task: Task) -> TaskResult | None: ...


class Admission(Protocol):
    """``AdmissionGate``: the result of a replayed or unwanted task, None to proceed."""

    async def admit(self, task: Task) -> TaskResult | None: ...


@dataclass(kw_only=True)
class Lanes:
    """The consumer's lanes; ``spawn`` runs a lane as one of the consumer's workers and
    ``release`` frees an entry's slot once it is settled (or left pending)."""

    handler: TaskHandler
    settler: EntrySettler
    max_deliveries: int
    retry: RetryPolicy
    pause: PauseGate | None
    admission: Admission | None
    spawn: Callable[[Awaitable[None]], None]
    release: Callable[[Delivery], None]
    #: The consumer's stop: cuts a retry's backoff short.
    stopping: asyncio.Event
    sleep: Sleep
    jitter: Callable[[], float]
    monotonic: Callable[[], float]
    _lanes: dict[WorkUnitKey, deque[tuple[Delivery, Task]]] = field(
        default_factory=dict, init=False, repr=False
    )

    def add(self, delivery: Delivery, task: Task) -> None:
        """Queue a verified task behind the others of its work unit."""
        key = (task.xid, task.wid)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
            self.spawn(self._run_lane(key, lane))
        lane.append((delivery, task))

    async def _run_lane(self, key: WorkUnitKey, lane: deque[tuple[Delivery, Task]]) -> None:
        """One work unit's tasks, one at a time, in the order they were admitted."""
        try:
            while lane:
                delivery, task = lane[0]
                await self._process(delivery, task)
                lane.popleft()
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    async def _process(self, delivery: Delivery, task: Task) -> None:
        kind = kind_label(task)
        with structlog.contextvars.bound_contextvars(
            task_id=task.task_id,
            xid=task.xid,
            wid=task.wid,
            eid=task_execution_id(task),
            entry_id=delivery.entry_id,
        ):
            try:
                if delivery.deliveries > self.max_deliveries:
                    await self.settler.give_up(
                        delivery, task, MAX_DELIVERIES_CODE, "never finished"
                    )
                    TASKS_TOTAL.labels(kind, REASON_MAX_DELIVERIES).inc()
                    return
                result, interrupted = await self._handle_with_retries(task)
                await self.settler.settle(delivery, task, result, interrupted=interrupted)
                TASKS_TOTAL.labels(kind, result.outcome.value).inc()
            except Exception:
                # Redis or Postgres failed while settling: the entry stays pending and is
                # reclaimed, which is safe because every step is idempotent.
                log.exception("could not settle task; leaving it pending")
            finally:
                TASK_SECONDS.labels(kind).observe(self.monotonic() - delivery.received)
                self.release(delivery)

    async def _handle_with_retries(self, task: Task) -> tuple[TaskResult, bool]:
        """The final result, and whether a stop interrupted the retries."""
        attempt = 1
        while True:
            result = await self._attempt(task)
            if result.outcome != Outcome.RETRY:
                return result, False
            error = ErrorClass(result.code, permanent=False, retry_after=result.retry_after)
            decision = decide_retry(error, attempt, policy=self.retry, jitter=self.jitter)
            log.warning(decision.reason, cause=result.reason, delay=decision.delay)
            if decision.action != RetryAction.RETRY:
                return result, False
            if await sleep_or_stop(self.stopping, decision.delay, sleep=self.sleep):
                return result, True
            attempt += 1

    async def _attempt(self, task: Task) -> TaskResult:
        try:
            if self.admission is not None:
                settled = await self.admission.admit(task)
                if settled is not None:
                    return settled
            if self.pause is not None:
                parked = await self.pause.park_if_paused(task)
                if parked is not None:
                    return parked
            return await self.handler.handle(task)
        except Exception as exc:
            log.exception("task handling raised; treating it as transient")
            return TaskResult(Outcome.RETRY, f"{type(exc).__name__}: {exc}", code="UNKNOWN")
