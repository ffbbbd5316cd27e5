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

The DLQ is written before the ack, by a script that adds an entry only once, so a
redelivered or doubly processed entry is dead-lettered once (``actuator.settlement``).

The parts live in their own modules: reading and claiming in ``actuator.claiming``, the
lanes and their retries in ``actuator.lanes``, acks and the DLQ in ``actuator.settlement``;
this module holds the settings and the lifecycle that ties them together.

Stopping. ``stop()`` ends reading (within one ``block``), lets held tasks finish for up
to ``stop_timeout`` seconds, then cancels the rest; they stay pending and are reclaimed.
"""

from __future__ import annotations

import asyncio
import os
import random
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import structlog
from redis.exceptions import ResponseError

from actuator.claiming import Delivery, StreamReader
from actuator.lanes import Admission, Lanes, PauseGate
from actuator.outcome import TaskHandler
from actuator.settlement import EntrySettler
from xmc.retry import RetryPolicy, Sleep, sleep_or_stop
from xmc.store.transactions import Store
from xmc.streams import REDIS_UNAVAILABLE, ReadFailure, StreamNames, classify_read_error
from xmc.tasks import TaskRejected, verify_task

log = structlog.get_logger()


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
    dlq_max_entries: int = 100_000
    """Newest entries ``xmc-dlq-stream`` keeps (older ones are trimmed as new ones come):
    the DLQ is for people to read, and a misconfiguration that refuses every task must
    not fill Redis's memory. ``xmc_actuator_dlq_total`` counts every entry."""

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.max_deliveries < 1 or self.dlq_max_entries < 1:
            raise ValueError("concurrency, max_deliveries and dlq_max_entries must be at least 1")
        if self.claim_idle <= 0 or self.block <= 0:
            raise ValueError("claim_idle and block must be positive")


def default_consumer_name() -> str:
    """Unique per process, readable in ``XINFO CONSUMERS``."""
    return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"


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
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[], float] = random.random,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        """``clock`` (wall time) judges token expiry and stamps Operations and the DLQ;
        ``sleep`` and ``jitter`` drive retry backoff (tests inject both); ``pause`` is
        None when scheduling cannot be paused (tests), ``admission`` None when every
        verified task is handled (tests of the consumer alone)."""
        self._names = names
        self._key = signing_key
        self._clock = clock
        self._settings = settings = settings or ConsumerSettings()
        self.name = consumer_name or default_consumer_name()
        self._held: dict[str, Delivery] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._finished = asyncio.Event()
        self._started = False
        self._reader = StreamReader(
            redis=redis, names=names, consumer=self.name, held=self._held,
            concurrency=settings.concurrency, claim_idle=settings.claim_idle,
            monotonic=monotonic,
        )  # fmt: skip
        self._settler = EntrySettler(
            redis=redis, names=names, store=store, consumer=self.name,
            max_deliveries=settings.max_deliveries, dlq_max_entries=settings.dlq_max_entries,
            clock=clock,
        )  # fmt: skip
        self._lanes = Lanes(
            handler=handler, settler=self._settler, max_deliveries=settings.max_deliveries,
            retry=settings.retry, pause=pause, admission=admission, spawn=self._spawn,
            release=self._release, stopping=self._stopping, sleep=sleep, jitter=jitter,
            monotonic=monotonic,
        )  # fmt: skip

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
        claimer = asyncio.create_task(
            self._reader.claim_forever(self._admit, stopping=self._stopping)
        )
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

    async def _read_loop(self) -> None:
        group_ready = False
        while not self._stopping.is_set():
            free = await self._wait_for_capacity()
            if free == 0:
                return
            try:
                if not group_ready:
                    await self._reader.ensure_group()
                    group_ready = True
                deliveries = await self._reader.read_new(free, block=self._settings.block)
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
            for delivery in deliveries:
                self._admit(delivery)

    async def _wait_for_capacity(self) -> int:
        """Free slots, waiting for one; 0 once stopping."""
        while len(self._held) >= self._settings.concurrency and not self._stopping.is_set():
            self._slot_freed.clear()
            await self._slot_freed.wait()
        if self._stopping.is_set():
            return 0
        return self._settings.concurrency - len(self._held)

    # --- dispatch -------------------------------------------------------------------

    def _admit(self, delivery: Delivery) -> None:
        """Hold the entry; verified, it joins its work unit's lane, else the DLQ."""
        self._held[delivery.entry_id] = delivery
        try:
            task = verify_task(delivery.fields, key=self._key, now=self._clock())
        except TaskRejected as rejected:
            self._spawn(self._reject(delivery, rejected))
            return
        self._lanes.add(delivery, task)

    async def _reject(self, delivery: Delivery, rejected: TaskRejected) -> None:
        try:
            await self._settler.reject(delivery, rejected)
        finally:
            self._release(delivery)

    def _spawn(self, work: Awaitable[None]) -> None:
        worker = asyncio.ensure_future(work)
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)

    def _release(self, delivery: Delivery) -> None:
        self._held.pop(delivery.entry_id, None)
        self._slot_freed.set()
