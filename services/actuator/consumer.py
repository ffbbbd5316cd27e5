"""The stream side of the Actuator (SPEC §6): read, verify, dispatch, settle.

Protocol, in the order an entry meets it:

1. **Read.** ``XREADGROUP`` in group ``xmc-actuators`` (created with ``MKSTREAM`` when
   missing) under one consumer name per process, asking only for as many entries as there
   are free slots: at most ``concurrency`` entries are held (running or queued) at once.
2. **Verify.** Signature, issuer, audience, digest and expiry (``verify_task``) before
   anything else. A rejected entry touches nothing — no Operation, no outbox row, no
   work unit: whatever it names is untrusted (a forged entry must not close a real
   Operation). It is copied to the DLQ with its reason and acked. A genuine task that
   was refused (say, its token expired in a long backlog) is still in the outbox,
   unfinished, and the relay re-drives it with a fresh token.
3. **Serialize per work unit.** Verified tasks go to one lane per (xid, wid); a lane runs
   its tasks one after the other in stream order, different lanes run concurrently (the
   shape of kopf's per-object queues).
4. **Handle.** The admission gate first (``actuator.admission``: a replayed or no longer
   wanted task stops here), then the pause gate (it may park the task), then the
   handler. A RETRY result is retried in-process with ``decide_retry`` backoff; an
   exception is treated as RETRY (code ``UNKNOWN``), so a bug or a Postgres outage cannot
   lose a task.
5. **Settle** (``decide_settlement``): DONE / SKIPPED / PARKED → ``XACK``; PERMANENT →
   DLQ + ``XACK`` (the handler closed the Operation); RETRY with retries exhausted → left
   pending, so a later ``XAUTOCLAIM`` retries it, unless the entry has been delivered
   ``max_deliveries`` times: then the task is settled here as failed (outbox finished,
   Operation closed with the error, a create or restart FAILED with a FATAL message so
   it never hangs in INITIALIZING), dead-lettered and acked.

Retries survive restarts because they are counted where every consumer sees them: the
delivery count of the entry in the group's pending list. An entry claimed with a count
past ``max_deliveries`` (its consumers keep dying on it) goes to the DLQ unhandled.

Claiming. Every ``claim_idle / 4`` seconds the consumer refreshes the idle time of the
entries it holds (``XCLAIM … JUSTID``, which does not count as a delivery), so a slow
handler is never mistaken for a dead consumer, then ``XAUTOCLAIM``s entries idle longer
than ``claim_idle``: those whose consumer died, and those left pending after exhausted
retries. Handlers are idempotent, so the rare double run after a stall is harmless.

DLQ and ack are one Lua script: the entry is copied to the DLQ only if this ``XACK``
removed it from the pending list, so a redelivered or doubly processed entry is
dead-lettered once. Both keys must live in one Redis slot (as with ``TaskPublisher``).

Stopping. ``stop()`` ends reading (within one ``block``), lets held tasks finish for up
to ``stop_timeout`` seconds, then cancels the rest; they stay pending and are reclaimed.
"""

from __future__ import annotations

import asyncio
import enum
import os
import random
import secrets
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Protocol

import structlog
from redis.exceptions import ResponseError

from actuator.metrics import DLQ_TOTAL, RECLAIMED_TOTAL, TASK_SECONDS, TASKS_TOTAL
from actuator.outcome import Outcome, TaskHandler, TaskResult
from actuator.settle import TaskSettler
from xmc.model.resume import TaskKind
from xmc.retry import ErrorClass, RetryAction, RetryPolicy, decide_retry, sleep_or_stop
from xmc.store.repository import Store
from xmc.streams import (
    ACTUATOR_GROUP,
    REDIS_UNAVAILABLE,
    ReadFailure,
    StreamNames,
    classify_read_error,
)
from xmc.tasks import TaskRejected, TaskRejectReason, task_execution_id, verify_task
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

# KEYS: tasks stream, DLQ stream. ARGV: group, entry id, then the DLQ entry's field/values.
_DEAD_LETTER = """
if redis.call('XACK', KEYS[1], ARGV[1], ARGV[2]) == 1 then
  return redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
end
return false
"""


class PauseGate(Protocol):
    """``TaskPauseHandler``: a PARKED result when the task was parked, None to proceed."""

    async def park_if_paused(self, task: Task) -> TaskResult | None: ...


class Admission(Protocol):
    """``AdmissionGate``: the result of a replayed or unwanted task, None to proceed."""

    async def admit(self, task: Task) -> TaskResult | None: ...


@dataclass(frozen=True)
class ConsumerSettings:
    concurrency: int = 16
    """Entries held at once (running, or queued behind a task of the same work unit)."""
    claim_idle: float = 60.0
    """Seconds an entry may sit unacked before any consumer may claim it."""
    max_deliveries: int = 5
    """Deliveries of one entry (across all consumers) before it goes to the DLQ."""
    block: float = 1.0
    """Seconds one XREADGROUP blocks; also how long ``stop()`` may take to stop reading."""
    stop_timeout: float = 30.0
    """Seconds ``stop()`` lets held tasks finish before cancelling them (left unacked)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """In-process retries of RETRY outcomes, per delivery."""
    redis_backoff: float = 1.0
    """Seconds to wait after a Redis error before reading or claiming again."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_deliveries < 1:
            raise ValueError("concurrency and max_deliveries must be at least 1")
        if self.claim_idle <= 0 or self.block <= 0:
            raise ValueError("claim_idle and block must be positive")


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


def default_consumer_name() -> str:
    """Unique per process, readable in ``XINFO CONSUMERS``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class Delivery:
    """One entry as this consumer received it."""

    entry_id: str
    fields: Mapping[Any, Any]
    #: Delivery count of the entry in the group, this delivery included.
    deliveries: int
    #: Monotonic time it was received, for the latency histogram.
    received: float


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _kind_label(task: Task | None) -> str:
    if task is None:
        return "unknown"
    try:
        return TaskKind(task.kind).name.lower()
    except ValueError:
        return "unknown"


class TaskConsumer:
    """One Actuator process's member of the ``xmc-actuators`` consumer group."""

    def __init__(
        self,
        redis: Any,
        names: StreamNames,
        store: Store,
        handler: TaskHandler,
        *,
        signing_key: str,
        clock: Callable[[], datetime],
        settings: ConsumerSettings | None = None,
        pause: PauseGate | None = None,
        admission: Admission | None = None,
        consumer_name: str | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (wall time) judges token expiry and stamps Operations and the DLQ;
        ``sleep`` and ``jitter`` drive retry backoff (tests inject both); ``pause`` is
        None when scheduling cannot be paused (tests), ``admission`` None when every
        verified task is handled (tests of the consumer alone)."""
        self._redis = redis
        self._names = names
        self._store = store
        self._handler = handler
        self._key = signing_key
        self._clock = clock
        self._settings = settings or ConsumerSettings()
        self._pause = pause
        self._admission = admission
        self._settler = TaskSettler(store, clock=clock)
        self.name = consumer_name or default_consumer_name()
        self._sleep = sleep
        self._jitter = jitter
        self._monotonic = monotonic
        self._dead_letter_script = redis.register_script(_DEAD_LETTER)
        self._held: dict[str, Delivery] = {}
        self._lanes: dict[tuple[int, int], deque[tuple[Delivery, Task]]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()
        self._started = False
        self._claim_cursor = "0-0"

    @property
    def in_flight(self) -> int:
        """Entries held now (running or queued behind their work unit)."""
        return len(self._held)

    # --- lifecycle ------------------------------------------------------------------

    async def run(self) -> None:
        """Consume until :meth:`stop`; returns once held tasks are finished or released."""
        if self._started:
            raise RuntimeError("a TaskConsumer runs once")
        self._started = True
        log.info("task consumer starting", consumer=self.name, stream=self._names.tasks)
        claimer = asyncio.create_task(self._claim_loop())
        try:
            await self._read_loop()
            await self._drain()
        finally:
            # After a drain only the cancelled stragglers remain; after a cancelled run(),
            # everything held is released unacked, as a crash would.
            claimer.cancel()
            for worker in self._workers:
                worker.cancel()
            await asyncio.gather(claimer, *self._workers, return_exceptions=True)
            self._finished.set()
            log.info("task consumer stopped", consumer=self.name)

    async def stop(self) -> None:
        """Stop reading, let held tasks finish (bounded), and wait for :meth:`run` to end."""
        self._stopping.set()
        self._slot_freed.set()
        if self._started:
            await self._finished.wait()

    async def _drain(self) -> None:
        if self._workers:
            _done, pending = await asyncio.wait(
                set(self._workers), timeout=self._settings.stop_timeout
            )
            if pending:
                log.warning("stop timeout: leaving tasks unacked for reclaim", count=len(pending))

    # --- reading --------------------------------------------------------------------

    async def _ensure_group(self) -> None:
        try:
            await self._redis.xgroup_create(
                self._names.tasks, ACTUATOR_GROUP, id="0", mkstream=True
            )
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def _read_loop(self) -> None:
        group_ready = False
        while not self._stopping.is_set():
            free = await self._wait_for_capacity()
            if free == 0:
                return
            try:
                if not group_ready:
                    await self._ensure_group()
                    group_ready = True
                reply = await self._redis.xreadgroup(
                    ACTUATOR_GROUP,
                    self.name,
                    {self._names.tasks: ">"},
                    count=free,
                    block=max(1, int(self._settings.block * 1000)),
                )
            except ResponseError as exc:
                failure = classify_read_error(str(exc))
                if failure is ReadFailure.FATAL:
                    raise
                log.warning("task stream read failed", error=str(exc), failure=failure.value)
                if failure is ReadFailure.GROUP_GONE:
                    group_ready = False  # the stream or group was deleted under us
                    continue
                await sleep_or_stop(self._stopping, self._settings.redis_backoff)
                continue
            except REDIS_UNAVAILABLE as exc:
                log.warning("task stream unavailable", error=str(exc))
                await sleep_or_stop(self._stopping, self._settings.redis_backoff)
                continue
            now = self._monotonic()
            for _stream, entries in reply or []:
                for entry_id, fields in entries:
                    self._admit(Delivery(_text(entry_id), fields, 1, now))

    async def _wait_for_capacity(self) -> int:
        """Free slots, waiting for one; 0 once stopping."""
        while len(self._held) >= self._settings.concurrency and not self._stopping.is_set():
            self._slot_freed.clear()
            await self._slot_freed.wait()
        if self._stopping.is_set():
            return 0
        return self._settings.concurrency - len(self._held)

    # --- claiming -------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        interval = self._settings.claim_idle / 4
        while True:
            await asyncio.sleep(interval)
            try:
                await self._heartbeat()
                if not self._stopping.is_set():
                    await self._autoclaim()
            except (*REDIS_UNAVAILABLE, ResponseError) as exc:
                log.warning("could not claim task entries", error=str(exc))
            except Exception:
                # Claiming is what rescues stranded tasks: keep the loop alive, loudly.
                log.exception("claim loop failed; trying again next interval")

    async def _heartbeat(self) -> None:
        """Reset the idle time of held entries so no one claims them from a live consumer."""
        if self._held:
            await self._redis.xclaim(
                self._names.tasks,
                ACTUATOR_GROUP,
                self.name,
                min_idle_time=0,
                message_ids=list(self._held),
                justid=True,
            )

    async def _autoclaim(self) -> None:
        free = self._settings.concurrency - len(self._held)
        if free <= 0:
            return
        reply = await self._redis.xautoclaim(
            self._names.tasks,
            ACTUATOR_GROUP,
            self.name,
            min_idle_time=int(self._settings.claim_idle * 1000),
            start_id=self._claim_cursor,
            count=free,
        )
        self._claim_cursor = _text(reply[0])
        claimed = [
            (_text(entry_id), fields)
            for entry_id, fields in reply[1]
            if fields is not None and _text(entry_id) not in self._held
        ]
        if not claimed:
            return
        counts = await self._delivery_counts([entry_id for entry_id, _ in claimed])
        now = self._monotonic()
        for entry_id, fields in claimed:
            if entry_id in counts:  # else acked by someone in the meantime
                RECLAIMED_TOTAL.inc()
                log.info("reclaimed idle entry", entry_id=entry_id, deliveries=counts[entry_id])
                self._admit(Delivery(entry_id, fields, counts[entry_id], now))

    async def _delivery_counts(self, entry_ids: list[str]) -> dict[str, int]:
        """Delivery count of each entry still pending for this consumer."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for entry_id in entry_ids:
                pipe.xpending_range(
                    self._names.tasks,
                    ACTUATOR_GROUP,
                    min=entry_id,
                    max=entry_id,
                    count=1,
                    consumername=self.name,
                )
            replies: list[list[dict[str, Any]]] = await pipe.execute()
        return {
            _text(row["message_id"]): int(row["times_delivered"])
            for rows in replies
            for row in rows
        }

    # --- dispatch -------------------------------------------------------------------

    def _admit(self, delivery: Delivery) -> None:
        self._held[delivery.entry_id] = delivery
        try:
            task = verify_task(delivery.fields, key=self._key, now=self._clock())
        except TaskRejected as rejected:
            self._spawn(self._reject(delivery, rejected))
            return
        key = (task.xid, task.wid)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = deque()
            self._spawn(self._run_lane(key, lane))
        lane.append((delivery, task))

    def _spawn(self, work: Awaitable[None]) -> None:
        worker = asyncio.ensure_future(work)
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)

    def _release(self, delivery: Delivery) -> None:
        self._held.pop(delivery.entry_id, None)
        self._slot_freed.set()

    async def _run_lane(self, key: tuple[int, int], lane: deque[tuple[Delivery, Task]]) -> None:
        """One work unit's tasks, one at a time, in the order they were admitted."""
        try:
            while lane:
                delivery, task = lane[0]
                await self._process(delivery, task)
                lane.popleft()
        finally:
            if self._lanes.get(key) is lane:
                del self._lanes[key]

    # --- handling -------------------------------------------------------------------

    async def _process(self, delivery: Delivery, task: Task) -> None:
        kind = _kind_label(task)
        with structlog.contextvars.bound_contextvars(
            task_id=task.task_id,
            xid=task.xid,
            wid=task.wid,
            eid=task_execution_id(task),
            entry_id=delivery.entry_id,
        ):
            try:
                if delivery.deliveries > self._settings.max_deliveries:
                    await self._give_up(delivery, task, MAX_DELIVERIES_CODE, "never finished")
                    TASKS_TOTAL.labels(kind, REASON_MAX_DELIVERIES).inc()
                    return
                result, interrupted = await self._handle_with_retries(task)
                await self._settle(delivery, task, result, interrupted=interrupted)
                TASKS_TOTAL.labels(kind, result.outcome.value).inc()
            except Exception:
                # Redis or Postgres failed while settling: the entry stays pending and is
                # reclaimed, which is safe because every step is idempotent.
                log.exception("could not settle task; leaving it pending")
            finally:
                TASK_SECONDS.labels(kind).observe(self._monotonic() - delivery.received)
                self._release(delivery)

    async def _handle_with_retries(self, task: Task) -> tuple[TaskResult, bool]:
        """The final result, and whether a stop interrupted the retries."""
        attempt = 1
        while True:
            result = await self._attempt(task)
            if result.outcome != Outcome.RETRY:
                return result, False
            error = ErrorClass(result.code, permanent=False, retry_after=result.retry_after)
            decision = decide_retry(
                error, attempt, policy=self._settings.retry, jitter=self._jitter
            )
            log.warning(decision.reason, cause=result.reason, delay=decision.delay)
            if decision.action != RetryAction.RETRY:
                return result, False
            if await sleep_or_stop(self._stopping, decision.delay, sleep=self._sleep):
                return result, True
            attempt += 1

    async def _attempt(self, task: Task) -> TaskResult:
        try:
            if self._admission is not None:
                settled = await self._admission.admit(task)
                if settled is not None:
                    return settled
            if self._pause is not None:
                parked = await self._pause.park_if_paused(task)
                if parked is not None:
                    return parked
            return await self._handler.handle(task)
        except Exception as exc:
            log.exception("task handling raised; treating it as transient")
            return TaskResult(Outcome.RETRY, f"{type(exc).__name__}: {exc}", code="UNKNOWN")

    async def _settle(
        self, delivery: Delivery, task: Task, result: TaskResult, *, interrupted: bool
    ) -> None:
        settlement = decide_settlement(
            result.outcome,
            deliveries=delivery.deliveries,
            max_deliveries=self._settings.max_deliveries,
            interrupted=interrupted,
        )
        if settlement == Settlement.ACK:
            await asyncio.shield(
                self._redis.xack(self._names.tasks, ACTUATOR_GROUP, delivery.entry_id)
            )
            log.info("task finished", outcome=result.outcome.value, reason=result.reason)
        elif settlement == Settlement.DEAD_LETTER:
            await self._dead_letter(delivery, REASON_PERMANENT, result.code, result.reason)
        elif settlement == Settlement.DEAD_LETTER_AND_CLOSE:
            await self._give_up(delivery, task, result.code, result.reason)
        else:
            log.warning(
                "retries exhausted; leaving the entry pending for a later claim",
                deliveries=delivery.deliveries,
                reason=result.reason,
            )

    async def _give_up(self, delivery: Delivery, task: Task, code: str, detail: str) -> None:
        """Out of deliveries: settle the task as failed (nobody else will), then dead-letter."""
        if code == "OK":
            code = MAX_DELIVERIES_CODE
        message = f"task not carried out after {delivery.deliveries} deliveries: {detail}"
        failed = TaskResult(Outcome.PERMANENT, message, code)
        await self._settler.finish(task, failed, outcome=REASON_MAX_DELIVERIES)
        await self._dead_letter(delivery, REASON_MAX_DELIVERIES, code, message)

    async def _reject(self, delivery: Delivery, rejected: TaskRejected) -> None:
        """Dead-letter an entry that failed verification; it touches nothing else."""
        task = rejected.task
        bound = {"task_id": task.task_id, "xid": task.xid, "wid": task.wid} if task else {}
        code = REJECTION_CODES.get(rejected.reason, "INVALID_ARGUMENT")
        with structlog.contextvars.bound_contextvars(entry_id=delivery.entry_id, **bound):
            try:
                log.warning("task rejected", reason=rejected.reason.value, detail=rejected.detail)
                await self._dead_letter(delivery, rejected.reason.value, code, rejected.detail)
                TASKS_TOTAL.labels(_kind_label(task), "rejected").inc()
            except Exception:
                log.exception("could not dead-letter a rejected task; leaving it pending")
            finally:
                self._release(delivery)

    async def _dead_letter(self, delivery: Delivery, reason: str, code: str, detail: str) -> None:
        """Copy the entry to the DLQ and ack it, atomically and at most once."""
        entry: dict[Any, Any] = dict(delivery.fields)
        entry.update(
            reason=reason,
            code=code,
            detail=detail,
            consumer=self.name,
            source_id=delivery.entry_id,
            failed_at=self._clock().isoformat(),
        )
        args = [ACTUATOR_GROUP, delivery.entry_id]
        for name, value in entry.items():
            args.extend((name, value))
        added = await asyncio.shield(
            self._dead_letter_script(keys=[self._names.tasks, self._names.dlq], args=args)
        )
        if added:
            DLQ_TOTAL.labels(reason).inc()
            log.warning("task dead-lettered", reason=reason, code=code, detail=detail)
