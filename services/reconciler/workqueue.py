"""A keyed work queue served by a few workers, as client-go's ``util/workqueue`` and a
controller's worker loop: so one slow key never stalls the others (issue 25.5).

The Reconciler used to run each event's handler while holding its watcher's delivery
lock, Kubernetes calls of up to 5 s included: one FAILED JobSet whose Job and pods the
API server answered slowly held up every other JobSet's events behind it. Now a watch only
updates its cache and adds the JobSet's name here; a worker takes the name and reads the
latest cached objects when it runs. Hence the rules, client-go's:

- keys, not objects: a key already queued is not queued again, so the ten events of one
  JobSet that arrived while it waited are one run, of its newest state — free coalescing,
  since the handlers are level-triggered;
- never two workers on one key: a key added while it is being processed is marked dirty
  and queued again, once, when that run ends (the ``dirty`` and ``processing`` sets), so
  the runs of one key are in order and each reads a cache at least as new as the last;
- distinct keys are taken in the order they were queued (FIFO);
- a run that raises is logged with its traceback, counted, and its key added again after
  ``retries.after(n)`` seconds, at most ``len(retries.delays)`` times; then the key is
  dropped at ERROR (its next event, or the resync, adds it again). The worker goes on; a
  worker that ends anyway (a bug here) ends :meth:`run`, which the service's supervisor
  turns into an exit: a loop that can die silently will;
- :meth:`stop` refuses new keys, lets the workers finish what is queued for up to
  ``within`` seconds, then cancels them, logging how much it abandoned.

Every operation is O(1) in the number of keys (a FIFO, a dict, a set): a resync adding
thousands of live JobSets costs each one the same as a single event.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Final, Generic, TypeVar

import structlog

from reconciler import metrics
from xmc.retry import Backoffs
from xmc.supervise import supervise

log = structlog.get_logger()

K = TypeVar("K", bound=Hashable)

#: Seconds before each retry of a key whose run raised; past the last, it is dropped.
RETRIES: Final = Backoffs((0.1, 0.5, 2.0, 5.0, 10.0))


class WorkQueue(Generic[K]):
    """Keys to ``process``, by ``workers`` tasks (see the module docstring). ``add`` from
    anywhere in the event loop; :meth:`run` until :meth:`stop`."""

    def __init__(
        self,
        name: str,
        process: Callable[[K], Awaitable[None]],
        *,
        workers: int = 4,
        retries: Backoffs = RETRIES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if workers < 1:
            raise ValueError("a work queue needs at least one worker")
        self.name = name
        self._process = process
        self._workers = workers
        self._retries = retries
        self._clock = clock
        self._fifo: asyncio.Queue[K] = asyncio.Queue()
        #: Keys owed a run (queued, or re-queued once their current run ends) → when added.
        self._dirty: dict[K, float] = {}
        self._processing: set[K] = set()
        #: Consecutive failed runs per key; a success forgets it.
        self._failures: dict[K, int] = {}
        self._retrying: dict[K, asyncio.TimerHandle] = {}
        self._closed = False
        self._finished = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def __len__(self) -> int:
        """Keys waiting for a worker."""
        return self._fifo.qsize()

    def add(self, key: K) -> None:
        """Owe ``key`` a run: queued unless it already is; after the current run if one is
        under way. Ignored once stopping."""
        if self._closed or key in self._dirty:
            return
        self._dirty[key] = self._clock()
        metrics.WORKQUEUE_ADDS_TOTAL.labels(self.name).inc()
        if key not in self._processing:
            self._put(key)

    async def run(self) -> None:
        """The workers, until :meth:`stop`; raises ``TaskEnded`` if one ends on its own."""
        self._tasks = [
            asyncio.create_task(self._work(), name=f"{self.name} worker {n}")
            for n in range(self._workers)
        ]
        try:
            await supervise(self._tasks, stopping=self._finished)
        finally:
            await self._cancel_workers()

    async def stop(self, *, within: float) -> None:
        """Refuse new keys; give the queued ones ``within`` seconds, then cancel the
        workers. Pending retries are abandoned (logged with the rest)."""
        self._closed = True
        for timer in self._retrying.values():
            timer.cancel()
        retries = len(self._retrying)
        self._retrying.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._fifo.join(), timeout=within)
        abandoned = self._fifo.qsize() + len(self._processing)
        if abandoned or retries:
            log.warning(f"{self.name}: stopped with work left undone", queued_or_running=abandoned,
                        retries=retries)  # fmt: skip
        self._finished.set()
        await self._cancel_workers()

    async def _cancel_workers(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # --- one worker --------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            key = await self._fifo.get()
            added = self._dirty.pop(key)
            self._processing.add(key)
            metrics.WORKQUEUE_DEPTH.labels(self.name).set(self._fifo.qsize())
            started = self._clock()
            metrics.WORKQUEUE_WAIT_SECONDS.labels(self.name).observe(started - added)
            try:
                await self._process(key)
            except asyncio.CancelledError:
                raise
            except Exception:
                self._failed(key)
            else:
                self._failures.pop(key, None)
            finally:
                metrics.WORKQUEUE_PROCESSING_SECONDS.labels(self.name).observe(
                    self._clock() - started
                )
                self._done(key)

    def _done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:  # added while it ran: once more, now
            self._put(key)
        self._fifo.task_done()

    def _failed(self, key: K) -> None:
        """Log and count a raising run; retry it after a backoff, or drop it past the last."""
        failures = self._failures.get(key, 0) + 1
        delay = self._retries.within(failures)
        log.exception(f"{self.name}: processing failed", key=str(key), failures=failures,
                      retry_in=delay)  # fmt: skip
        if delay is None:
            self._failures.pop(key, None)
            metrics.WORKQUEUE_DROPPED_TOTAL.labels(self.name).inc()
            log.error(f"{self.name}: dropped after {failures} failed runs; its next event "
                      "or the resync adds it again", key=str(key))  # fmt: skip
            return
        self._failures[key] = failures
        metrics.WORKQUEUE_RETRIES_TOTAL.labels(self.name).inc()
        earlier = self._retrying.pop(key, None)
        if earlier is not None:
            earlier.cancel()
        loop = asyncio.get_running_loop()
        self._retrying[key] = loop.call_later(delay, self._retry, key)

    def _retry(self, key: K) -> None:
        self._retrying.pop(key, None)
        self.add(key)

    def _put(self, key: K) -> None:
        self._fifo.put_nowait(key)
        metrics.WORKQUEUE_DEPTH.labels(self.name).set(self._fifo.qsize())
