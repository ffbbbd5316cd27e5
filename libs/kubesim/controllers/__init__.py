"""kubesim's simulated controllers: JobSet (with the Job controller's part), Kueue and a
kubelet, each an asyncio task in the API server's process, each switchable off.

Every controller is a level-triggered reconciler with the same small surface —
``watches`` (resources whose events matter), ``keys_for(event)`` (which objects to
reconcile), ``initial_keys()`` and a synchronous ``reconcile(key)`` that reads current
objects from the store and writes what differs. ``_run`` feeds it: it coalesces queued
events into an ordered set of dirty keys and reconciles one key at a time, yielding to
the loop after each, so controllers interleave fairly and a key reconciled now always
sees the latest state (never event history). The store is synchronous memory, so a
reconcile is atomic with respect to every other controller and API request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Protocol

from kubesim.clock import SimClock
from kubesim.events import Event, Subscription
from kubesim.resources import Resource
from kubesim.store import ObjectStore

from .jobset import JobSetController
from .kubelet import Kubelet
from .kueue.controller import KueueController
from .kueue.visibility import pending_workloads, pending_workloads_in_local_queue
from .kueue.vocabulary import DEFAULT_KUEUE_VERSION, KueueVersion

__all__ = [
    "ControllerSettings",
    "Controllers",
    "KueueVersion",
    "pending_workloads",
    "pending_workloads_in_local_queue",
]

log = logging.getLogger(__name__)

RETRY_SECONDS = 1.0
"""Simulated seconds before a key whose reconcile raised is tried again."""


@dataclass(frozen=True)
class ControllerSettings:
    time_scale: float = 1.0
    """Informational; the SimClock passed to Controllers carries the scale."""
    jobset: bool = True
    kueue: bool = True
    kubelet: bool = True
    pod_start_seconds: float = 1.0
    """Simulated seconds from a pod's creation until it runs and is ready (no annotation)."""
    pod_run_seconds: float = 3.0
    """Simulated seconds a pod runs before it succeeds (no annotation)."""
    kueue_version: KueueVersion = DEFAULT_KUEUE_VERSION
    """Whose defaults the Kueue simulator's waiting reasons follow."""


class Reconciler(Protocol):
    name: str
    watches: tuple[Resource, ...]

    def keys_for(self, event: Event) -> Iterable[Hashable]: ...

    def initial_keys(self) -> Iterable[Hashable]: ...

    def reconcile(self, key: Hashable) -> None: ...

    async def close(self) -> None: ...


async def _next_event(
    subscription: Subscription, wait_seconds: float | None
) -> Event | bool | None:
    """The next event, None when the feed closed, False when ``wait_seconds`` passed first."""
    try:
        return await asyncio.wait_for(subscription.queue.get(), wait_seconds)
    except TimeoutError:
        return False


async def _run(reconciler: Reconciler, subscription: Subscription, clock: SimClock) -> None:
    watched = {r.key for r in reconciler.watches}
    dirty: dict[Hashable, None] = dict.fromkeys(reconciler.initial_keys())
    retries: dict[Hashable, float] = {}
    loop = asyncio.get_running_loop()

    def absorb(event: Event) -> None:
        if event.resource.key in watched:
            dirty.update(dict.fromkeys(reconciler.keys_for(event)))

    while True:
        if not dirty:
            timeout = max(min(retries.values()) - loop.time(), 0) if retries else None
            event = await _next_event(subscription, timeout)
            if event is None:
                return
            if isinstance(event, Event):
                absorb(event)
        while not subscription.queue.empty():
            queued = subscription.queue.get_nowait()
            if queued is None:
                return
            absorb(queued)
        for key, due in list(retries.items()):
            if due <= loop.time():
                del retries[key]
                dirty[key] = None
        if not dirty:
            continue
        key = next(iter(dirty))
        del dirty[key]
        try:
            reconciler.reconcile(key)
        except Exception:
            log.exception("%s: reconcile %s failed; retrying", reconciler.name, key)
            retries[key] = loop.time() + RETRY_SECONDS / clock.scale
        await asyncio.sleep(0)


class Controllers:
    """Starts and stops the enabled controllers against one store and clock."""

    def __init__(self, store: ObjectStore, clock: SimClock, settings: ControllerSettings) -> None:
        self._store = store
        self._clock = clock
        self._settings = settings
        self._reconcilers: list[Reconciler] = []
        self._subscriptions: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []

    def _build(self) -> list[Reconciler]:
        settings = self._settings
        reconcilers: list[Reconciler] = []
        if settings.jobset:
            reconcilers.append(
                JobSetController(self._store, self._clock, kubelet_finalizer=settings.kubelet)
            )
        if settings.kueue:
            reconcilers.append(
                KueueController(self._store, self._clock, KueueVersion(settings.kueue_version))
            )
        if settings.kubelet:
            reconcilers.append(
                Kubelet(
                    self._store,
                    self._clock,
                    pod_start_seconds=settings.pod_start_seconds,
                    pod_run_seconds=settings.pod_run_seconds,
                )
            )
        return reconcilers

    async def start(self) -> None:
        if self._tasks:
            return
        self._reconcilers = self._build()
        for reconciler in self._reconcilers:
            subscription = self._store.subscribe(None)
            self._subscriptions.append(subscription)
            task = asyncio.create_task(
                _run(reconciler, subscription, self._clock), name=f"kubesim-{reconciler.name}"
            )
            self._tasks.append(task)

    async def stop(self) -> None:
        for subscription in self._subscriptions:
            self._store.unsubscribe(subscription)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for reconciler in self._reconcilers:
            await reconciler.close()
        self._subscriptions.clear()
        self._tasks.clear()
        self._reconcilers.clear()
