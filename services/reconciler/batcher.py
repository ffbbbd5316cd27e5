"""UpdateBatcher (SPEC §8.5): coalesce observations per slot, write them to ESS in batches.

Why coalesce. Watches deliver bursts (every Pod of a JobSet flips at once, a resync
re-observes everything), but ESS only needs the latest view of each (xid, wid, source):
``add`` replaces the pending observation of its slot, so 100 rapid updates cost one write.

Why work units are never split or overlapped. Items of one work unit are kept in one batch
(in arrival order), and a work unit with a flush in flight is left out of other flushes until
that flush ends. So two writes of one work unit never race each other, whatever
``max_in_flight`` is, and a failed flush can put its items back without clobbering anything:
an item returns to its slot only if no newer observation took it meanwhile.

Why at most ``max_in_flight`` flushes. While all are busy (ESS slow or down) new observations
keep coalescing in memory instead of piling up as requests.

Why leadership is checked at send time, not only at ``add``. Only the leader observes,
but a leader can lose its Lease while it holds observations (a long GC or SIGSTOP, an ESS
outage that kept them put back); flushed after a standby took over, they would overwrite
the new leader's fresher writes in fields the ESS does not order by time
(``detailed_status``, scheduling information). So each batch is sent only while
``may_send()`` says this replica leads; otherwise everything held is dropped, counted and
logged, and the next leader's re-observation of its cache writes the truth. A pause that
falls between this check and the bytes reaching the ESS is closed by the fence: each
write carries the term's generation and the ESS refuses an older one (decision 0054).

Time is injected (``clock`` for latency, ``sleep`` for the interval), so tests drive flushes
explicitly; ``flush_now`` is the test (and shutdown) entry point.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import structlog

from reconciler import metrics
from reconciler.observation import Observation, Source

log = structlog.get_logger()

#: Writes one batch (e.g. one ``UpdateWorkUnitExecutions`` call); raises on failure.
Send = Callable[[Sequence[Observation]], Awaitable[None]]
Sleep = Callable[[float], Awaitable[None]]
WorkUnitKey = tuple[int, int]
T = TypeVar("T")


@dataclass(frozen=True)
class BatcherOptions:
    max_batch: int = 100
    """Most items in one ``UpdateWorkUnitExecutions`` call (at least one per source)."""
    max_in_flight: int = 2
    """Most flushes running at once."""
    flush_interval: float = 0.2
    """Seconds between interval flushes (SPEC default 200 ms)."""
    flush_size: int = 200
    """A flush starts early once this many observations are pending."""
    stop_timeout: float = 10.0
    """Seconds ``stop()`` may spend on in-flight flushes and the final flush."""

    def __post_init__(self) -> None:
        if self.max_batch < len(Source):
            raise ValueError(f"max_batch must hold one work unit ({len(Source)} sources)")
        if self.max_in_flight < 1 or self.flush_size < 1 or self.flush_interval <= 0:
            raise ValueError("max_in_flight, flush_size and flush_interval must be positive")


@dataclass(frozen=True)
class FlushResult:
    """What one flush did: ``sent`` items were written, ``put_back`` returned to their slots
    after a failure (older items superseded meanwhile are neither)."""

    sent: int = 0
    put_back: int = 0
    batches: int = 0
    failed: bool = False
    dropped: int = 0


@dataclass(frozen=True)
class _Entry:
    seq: int  # arrival order: orders the items of one work unit within a batch
    observation: Observation


def split_batches(groups: Sequence[Sequence[T]], max_batch: int) -> list[list[T]]:
    """Pack work-unit groups, in order, into batches of at most ``max_batch`` items without
    splitting a group (pure: the flush's decision as data)."""
    batches: list[list[T]] = []
    current: list[T] = []
    for group in groups:
        if current and len(current) + len(group) > max_batch:
            batches.append(current)
            current = []
        current.extend(group)
    if current:
        batches.append(current)
    return batches


class UpdateBatcher:
    """In-memory index ``xid → wid → source → pending observation`` flushed through ``send``."""

    def __init__(
        self,
        send: Send,
        *,
        options: BatcherOptions | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Sleep = asyncio.sleep,
        may_send: Callable[[], bool] = lambda: True,
    ) -> None:
        self._send = send
        self._may_send = may_send
        self._options = options or BatcherOptions()
        self._clock = clock
        self._sleep = sleep
        self._index: dict[int, dict[int, dict[Source, _Entry]]] = {}
        self._pending = 0
        self._seq = itertools.count()
        self._in_flight: set[WorkUnitKey] = set()
        self._slots = asyncio.Semaphore(self._options.max_in_flight)
        self._wake = asyncio.Event()
        self._stopping = False
        self._loop_done: asyncio.Event | None = None
        self._flushes: set[asyncio.Task[FlushResult]] = set()

    @property
    def pending(self) -> int:
        return self._pending

    def add(self, observation: Observation) -> None:
        """Make ``observation`` the pending one of its slot (latest wins)."""
        source = observation.source
        metrics.OBSERVATIONS_TOTAL.labels(source=source.value).inc()
        slots = self._index.setdefault(observation.xid, {}).setdefault(observation.wid, {})
        if source in slots:
            metrics.COALESCED_TOTAL.labels(source=source.value).inc()
        else:
            self._pending += 1
            metrics.PENDING_UPDATES.inc()
        slots[source] = _Entry(next(self._seq), observation)
        if self._pending >= self._options.flush_size:
            self._wake.set()

    async def flush_now(self) -> FlushResult:
        """Take everything pending (but work units already in flight) and send it, waiting
        for a free flush slot first."""
        async with self._slots:
            return await self._flush()

    async def run(self) -> None:
        """Flush on the interval or the size threshold until :meth:`stop`."""
        self._loop_done = asyncio.Event()
        try:
            while not self._stopping:
                await self._wait_for_trigger()
                if self._stopping:
                    break
                await self._slots.acquire()
                task = asyncio.create_task(self._flush_holding_slot())
                self._flushes.add(task)
                task.add_done_callback(self._flushes.discard)
        finally:
            self._loop_done.set()

    async def stop(self, *, grace: float | None = None) -> None:
        """End the loop, let in-flight flushes finish, then flush what is pending; whatever
        is still pending after ``grace`` seconds (default ``stop_timeout``) is dropped and logged:
        the next resync re-observes it."""
        self._stopping = True
        self._wake.set()
        limit = self._options.stop_timeout if grace is None else grace
        try:
            async with asyncio.timeout(limit):
                if self._loop_done is not None:
                    await self._loop_done.wait()
                if self._flushes:
                    await asyncio.gather(*self._flushes, return_exceptions=True)
                if self._pending:
                    await self.flush_now()
        except TimeoutError:
            log.warning("update batcher stop timed out", seconds=limit)
        if self._pending:
            log.warning("update batcher stopped with unsent observations", count=self._pending)

    async def _wait_for_trigger(self) -> None:
        """Until the interval passes (injected ``sleep``) or ``add`` signals the size threshold."""
        if not self._wake.is_set():
            woken = asyncio.ensure_future(self._wake.wait())
            ticked = asyncio.ensure_future(self._sleep(self._options.flush_interval))
            try:
                await asyncio.wait({woken, ticked}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                woken.cancel()
                ticked.cancel()
        self._wake.clear()

    async def _flush_holding_slot(self) -> FlushResult:
        try:
            return await self._flush()
        finally:
            self._slots.release()

    async def _flush(self) -> FlushResult:
        groups = self._take()
        if not groups:
            return FlushResult()
        keys = {(group[0].observation.xid, group[0].observation.wid) for group in groups}
        self._in_flight |= keys
        batches = split_batches(groups, self._options.max_batch)
        started = self._clock()
        sent = 0
        try:
            for i, batch in enumerate(batches):
                if not self._may_send():
                    unsent = [entry for rest in batches[i:] for entry in rest]
                    dropped = len(unsent) + self.drop_pending("not leading")
                    self._count_dropped(len(unsent), "not leading")
                    return FlushResult(sent, 0, len(batches), dropped=dropped)
                try:
                    await self._send([entry.observation for entry in batch])
                except asyncio.CancelledError:
                    self._put_back([entry for rest in batches[i:] for entry in rest])
                    raise
                except Exception as exc:
                    unsent = [entry for rest in batches[i:] for entry in rest]
                    restored = self._put_back(unsent)
                    metrics.FLUSH_FAILURES_TOTAL.inc()
                    log.warning(
                        "update flush failed; items put back",
                        error=repr(exc),
                        sent=sent,
                        put_back=restored,
                        superseded=len(unsent) - restored,
                    )
                    return FlushResult(sent, restored, len(batches), failed=True)
                for entry in batch:
                    metrics.WRITES_TOTAL.labels(source=entry.observation.source.value).inc()
                sent += len(batch)
            return FlushResult(sent, 0, len(batches))
        finally:
            metrics.FLUSH_SECONDS.observe(max(0.0, self._clock() - started))
            self._in_flight -= keys
            if self._pending >= self._options.flush_size:
                self._wake.set()

    def drop_pending(self, why: str) -> int:
        """Forget every pending observation (leadership ended); how many were dropped."""
        dropped = [entry for units in self._index.values() for slots in units.values()
                   for entry in slots.values()]  # fmt: skip
        self._index.clear()
        self._pending = 0
        metrics.PENDING_UPDATES.dec(len(dropped))
        self._count_dropped(len(dropped), why)
        return len(dropped)

    @staticmethod
    def _count_dropped(count: int, why: str) -> None:
        if count:
            metrics.UPDATES_DROPPED_NOT_LEADING_TOTAL.inc(count)
            log.warning("update batcher dropped observations", count=count, reason=why)

    def _take(self) -> list[list[_Entry]]:
        """Remove every pending work unit not in flight; one group per work unit, sorted by
        (xid, wid), items in arrival order."""
        groups: list[list[_Entry]] = []
        for xid in sorted(self._index):
            units = self._index[xid]
            for wid in sorted(units):
                if (xid, wid) in self._in_flight:
                    continue
                groups.append(sorted(units.pop(wid).values(), key=lambda e: e.seq))
            if not units:
                del self._index[xid]
        taken = sum(len(g) for g in groups)
        self._pending -= taken
        metrics.PENDING_UPDATES.dec(taken)
        return groups

    def _put_back(self, entries: Sequence[_Entry]) -> int:
        """Return failed items to their slots unless a newer observation took the slot; they
        keep their sequence number, so they still sort before anything newer."""
        restored = 0
        for entry in entries:
            item = entry.observation
            slots = self._index.setdefault(item.xid, {}).setdefault(item.wid, {})
            if item.source in slots:
                continue
            slots[item.source] = entry
            restored += 1
        self._pending += restored
        metrics.PENDING_UPDATES.inc(restored)
        return restored
