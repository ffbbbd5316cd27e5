"""Keep an in-memory cache of one Kubernetes resource in sync: list, then watch from the
list's resourceVersion, forever (SPEC §8.6).

It reads through the shared :class:`xmc.kube_client.KubeClient` (raw JSON, no models,
every call bounded; why not kubernetes-asyncio's ``Watch``: see there): lists page by
page, watches as streams of events.

The loop, level-triggered: the handler is told *that* an object changed and gets its
latest state; it must not depend on the sequence of events, because

- a stream that ends (``timeoutSeconds``, a dropped connection) is resumed from the last
  resourceVersion seen, bookmarks included, so nothing is lost or repeated;
- a 410 (an ``ERROR`` event or an error answer) means the server no longer has the events
  since that version: the watcher re-lists and *diffs* against its cache, synthesizing
  ADDED / MODIFIED / DELETED for whatever changed while it was away — intermediate states
  are gone for good;
- "too large resource version" (504 Timeout with cause ``ResourceVersionTooLarge``, or the
  older servers' message) means the server's history went *backwards* (etcd restored from
  a backup, an ephemeral kubesim restarted): it has never reached our version, so resuming
  from it would wait forever for events that already happened under other numbers. Like
  client-go's reflector it is a re-list from ``""`` (a consistent read) and the same diff:
  whatever vanished is delivered as DELETED. A *watch* from such a version is not refused
  (the server just waits), so every ``freshness_seconds``, and every second after a lost
  connection, a one-item list ``NotOlderThan`` our version asks (docs/reconciler.md);
- every ``resync_seconds`` every cached object is re-delivered as RESYNC, so a handler that
  failed or a decision that depended on something outside Kubernetes is retried.

Failures are classified once, by the client (``KubeError.failure``); :func:`classify`
(``reconciler.watch_rules``, the pure half) maps that to what the watcher does: EXPIRED
(410) and TOO_LARGE re-list, INVALID (400, 422: a malformed selector) stops the watcher,
everything else (no response, THROTTLED, SERVER, FORBIDDEN or NOT_FOUND while RBAC or a
CRD is being installed) is retried with a bounded, logged backoff.

``synced`` is what ``/readyz`` reports: listed at least once, no failure since the last
success, and no re-list owed — a watcher that knows its cache is stale says so until a
list has replaced it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import MappingProxyType
from typing import Any, Final

import structlog

from reconciler import metrics
from reconciler.watch_rules import RELISTS as RELISTS
from reconciler.watch_rules import WATCH_BACKOFFS as WATCH_BACKOFFS
from reconciler.watch_rules import ChangeKind as ChangeKind
from reconciler.watch_rules import Failure as Failure
from reconciler.watch_rules import Obj as Obj
from reconciler.watch_rules import WatchFailed as WatchFailed
from reconciler.watch_rules import WatchSettings as WatchSettings
from reconciler.watch_rules import classify as classify
from reconciler.watch_rules import diff as diff
from reconciler.watch_rules import name_of, resource_version_of
from xmc.kube import KubeError, KubeFailure, Resource
from xmc.kube_client import KubeClient
from xmc.retry import sleep_or_stop

log = structlog.get_logger()

OnChange = Callable[[ChangeKind, Obj], Awaitable[None]]
Sleep = Callable[[float], Coroutine[Any, Any, None]]


#: Seconds between freshness checks while the connection was lately lost.
_SOON: Final = 1.0


class ResourceWatcher:
    """The latest object per name of one resource in one namespace, and a handler told of
    every change. ``run()`` until ``stop()``; ``ready`` is set once the first list is
    delivered."""

    def __init__(
        self,
        kube: KubeClient,
        resource: Resource,
        *,
        namespace: str,
        on_change: OnChange,
        label_selector: str | None = None,
        group_by: Callable[[Obj], str | None] | None = None,
        transform: Callable[[Obj], Obj] | None = None,
        settings: WatchSettings | None = None,
        sleep: Sleep = asyncio.sleep,  # injected for tests
        clock: Callable[[], float] = time.monotonic,  # injected for tests
    ) -> None:
        self._kube = kube
        self._resource = resource
        self._api_version = resource.api_version
        self._namespace = namespace
        self._selector = label_selector
        self._on_change = on_change
        self._settings = settings or WatchSettings()
        self._sleep = sleep
        self._clock = clock
        self.what = resource.plural
        self._cache: dict[str, Obj] = {}
        self._group_by = group_by
        #: Applied to every object as it arrives, before it is cached or delivered
        #: (client-go's ``SetTransform``): the cache keeps only what handlers read.
        self._transform = transform
        self._groups: dict[str, dict[str, Obj]] = {}
        self._resource_version: str | None = None
        self._deliver_lock = asyncio.Lock()
        self._stopping = asyncio.Event()
        self.ready = asyncio.Event()
        #: Full lists done (the first one included): each extra one means a 410 or a restart.
        self.lists = 0
        #: Consecutive failures of the current attempt to (re)connect.
        self.failures = 0
        #: Monotonic time of the last successful list or watch connection.
        self.last_success: float | None = None
        #: Why the cache is known stale and owes a full list (None: it does not).
        self.relist_reason: Failure | None = None
        #: The task reading the watch, which the freshness check may interrupt.
        self._syncing: asyncio.Task[None] | None = None
        self._interrupted = False
        self._in_watch = False
        #: Set when the watch lost its connection: check freshness soon, not on time.
        self._check_soon = asyncio.Event()

    # --- reading ---------------------------------------------------------------------

    @property
    def cache(self) -> Mapping[str, Obj]:
        """Read-only view: the latest object per name."""
        return MappingProxyType(self._cache)

    def get(self, name: str) -> Obj | None:
        return self._cache.get(name)

    def group(self, key: str) -> list[Obj]:
        """The cached objects whose ``group_by`` is ``key``: a handler reads one JobSet's
        pods in O(its pods), not O(every cached pod), at sweep scale (issue 14)."""
        return list(self._groups.get(key, {}).values())

    def _store(self, name: str, obj: Obj | None) -> None:
        """The one writer of the cache and its groups, so the two never disagree."""
        old = self._cache.pop(name, None) if obj is None else self._cache.get(name)
        if obj is not None:
            self._cache[name] = obj
        if self._group_by is None:
            return
        old_key = None if old is None else self._group_by(old)
        new_key = None if obj is None else self._group_by(obj)
        if old_key is not None and old_key != new_key:
            members = self._groups.get(old_key, {})
            members.pop(name, None)
            if not members:
                self._groups.pop(old_key, None)
        if new_key is not None and obj is not None:
            self._groups.setdefault(new_key, {})[name] = obj

    @property
    def synced(self) -> bool:
        """The cache is as fresh as the watch can make it: listed, connected since the last
        failure, no re-list owed. Checks that compare the cache with the world (the
        vanished-JobSet sweep) run only while this holds."""
        return self.ready.is_set() and not self.failures and self.relist_reason is None

    @property
    def resource_version(self) -> str | None:
        """The last resourceVersion seen (list, event or bookmark): where a watch resumes."""
        return self._resource_version

    # --- running ---------------------------------------------------------------------

    def stop(self) -> None:
        self._stopping.set()

    async def run(self) -> None:
        """Sync until :meth:`stop`; raises :class:`WatchFailed` when it gives up."""
        self._syncing = asyncio.create_task(self._sync_forever(), name=f"watch {self.what}")
        tasks = [self._syncing]
        if self._settings.resync_seconds is not None:
            resync = self._resync_forever(self._settings.resync_seconds)
            tasks.append(asyncio.create_task(resync, name=f"resync {self.what}"))
        if self._settings.freshness_seconds is not None:
            fresh = self._check_freshness_forever(self._settings.freshness_seconds)
            tasks.append(asyncio.create_task(fresh, name=f"freshness {self.what}"))
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopping], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (*tasks, stopping):
                task.cancel()
            await asyncio.gather(*tasks, stopping, return_exceptions=True)
        for task in tasks:
            if task in done and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    async def _sync_forever(self) -> None:
        listed_at: str | None = None
        while True:
            try:
                if self._resource_version is None:
                    await self._relist()
                    listed_at = self._resource_version
                self._in_watch = True
                try:
                    await self._watch_once(self._resource_version or "0")
                finally:
                    self._in_watch = False
                self._succeeded()
            except asyncio.CancelledError:
                if not self._interrupted or self._stopping.is_set():
                    raise
                # The freshness check ended this watch: the server is behind; re-list.
                self._interrupted = False
                task = asyncio.current_task()
                if task is not None:
                    task.uncancel()
            except Exception as error:
                kind = classify(error)
                if kind is Failure.FATAL:
                    raise WatchFailed(f"watch of {self.what} failed: {error}") from error
                if kind in RELISTS:
                    log.warning(
                        f"watch of {self.what}: {kind.value}; re-listing",
                        resource_version=self._resource_version,
                        error=str(error),
                    )
                    no_progress = self._resource_version == listed_at
                    self._resource_version = None
                    self.relist_reason = kind
                    if not no_progress:
                        continue  # re-list at once; the same answer right after a list backs off
                await self._back_off(error)

    async def _back_off(self, error: BaseException) -> None:
        self.failures += 1
        if isinstance(error, KubeError) and error.failure is KubeFailure.NO_RESPONSE:
            self._check_soon.set()
        limit = self._settings.max_attempts
        if limit is not None and self.failures >= limit:
            raise WatchFailed(
                f"watch of {self.what} failed {self.failures} times; giving up: {error}"
            ) from error
        delay = self._settings.backoffs.after(self.failures)
        if isinstance(error, KubeError) and error.retry_after is not None:
            delay = max(delay, error.retry_after)
        log.warning(
            f"watch of {self.what} failed (attempt {self.failures}); retrying in {delay:.1f}s",
            error=str(error) or type(error).__name__,
        )
        await sleep_or_stop(self._stopping, delay, sleep=self._sleep)

    def _succeeded(self) -> None:
        self.failures = 0
        self.last_success = self._clock()

    async def _relist(self) -> None:
        """Read the full state page by page, then deliver the difference to the cache."""
        items: dict[str, Obj] = {}
        token: str | None = None
        list_rv = ""
        while True:
            page = await self._kube.list_page(
                self._resource,
                self._namespace,
                label_selector=self._selector,
                limit=self._settings.page_size,
                continue_token=token,
            )
            kind = str(page.get("kind", "")).removesuffix("List")
            for obj in page.get("items") or ():
                # Items of built-in lists carry no apiVersion/kind; handlers may want them.
                obj.setdefault("apiVersion", self._api_version)
                if kind:
                    obj.setdefault("kind", kind)
                items[name_of(obj)] = self._transform(obj) if self._transform else obj
            meta = page.get("metadata") or {}
            list_rv = list_rv or str(meta.get("resourceVersion", ""))
            token = meta.get("continue")
            if not token:
                break
        self.lists += 1
        reason = "initial" if self.lists == 1 else (self.relist_reason or Failure.RETRY).value
        metrics.RELISTS_TOTAL.labels(self.what, reason).inc()
        self._succeeded()
        changes = diff(self._cache, items)
        for name in [n for n in self._cache if n not in items]:
            self._store(name, None)
        for name, obj in items.items():
            self._store(name, obj)
        self._resource_version = list_rv or None
        for kind_, obj in changes:
            await self._deliver(kind_, obj)
        if self.relist_reason is not None:
            log.info(f"watch of {self.what}: re-listed", items=len(items), changes=len(changes),
                     reason=self.relist_reason.value, resource_version=list_rv)  # fmt: skip
        self.relist_reason = None
        self.ready.set()

    async def _watch_once(self, resource_version: str) -> None:
        """One watch request, applied event by event; returns when the server ends it."""
        async with self._kube.watch(
            self._resource,
            self._namespace,
            resource_version=resource_version,
            timeout_seconds=self._settings.timeout_seconds,
            label_selector=self._selector,
        ) as events:
            async for event in events:
                await self._apply(event)

    async def _apply(self, event: Obj) -> None:
        """One event; an ``ERROR`` event was raised by the client already."""
        kind = event.get("type")
        obj = event.get("object") or {}
        self._succeeded()
        rv = resource_version_of(obj)
        if kind == "BOOKMARK":
            self._resource_version = rv or self._resource_version
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            log.warning(f"watch of {self.what}: unknown event type", type=kind)
            return
        obj.setdefault("apiVersion", self._api_version)
        if self._transform is not None:
            obj = self._transform(obj)
        name = name_of(obj)
        self._store(name, None if kind == "DELETED" else obj)
        self._resource_version = rv or self._resource_version
        await self._deliver(kind, obj)

    async def _check_freshness_forever(self, interval: float) -> None:
        """Every ``interval``: has the server reached our resourceVersion? "Too large"
        ends the current watch and owes a re-list; any other failure is the watch's
        business (it meets it too) and only logged."""
        await self.ready.wait()
        while True:
            # Soon after a lost connection (the server may have restarted), else on time.
            if self._check_soon.is_set():
                await self._sleep(_SOON)
            else:
                await sleep_or_stop(self._check_soon, interval, sleep=self._sleep)
            version = self._resource_version
            if version is None or self.relist_reason is not None:
                continue
            try:
                await self._kube.list_page(
                    self._resource, self._namespace, label_selector=self._selector,
                    limit=1, resource_version=version, resource_version_match="NotOlderThan",
                )  # fmt: skip
                self._check_soon.clear()
            except asyncio.CancelledError:
                raise
            except Exception as error:
                if classify(error) is not Failure.TOO_LARGE:
                    log.debug(f"freshness check of {self.what} failed", error=str(error))
                    continue  # a lost connection keeps the check soon
                self._check_soon.clear()
                if self._resource_version != version:
                    continue  # the watch moved on meanwhile (a re-list already)
                log.warning(f"watch of {self.what}: the server is behind our resourceVersion; "
                            "re-listing", resource_version=version, error=str(error))  # fmt: skip
                self._resource_version = None
                self.relist_reason = Failure.TOO_LARGE
                # Only a watch being read is ended; a list or a backoff under way meets the
                # missing resourceVersion by itself.
                if self._syncing is not None and self._in_watch and not self._interrupted:
                    self._interrupted = True
                    self._syncing.cancel()

    async def _resync_forever(self, interval: float) -> None:
        await self.ready.wait()
        while True:
            await self._sleep(interval)
            for name in list(self._cache):
                obj = self._cache.get(name)  # the latest, or gone since the snapshot
                if obj is not None:
                    await self._deliver("RESYNC", obj)

    async def _deliver(self, kind: ChangeKind, obj: Obj) -> None:
        """One handler call at a time, after the cache took the change; a failing handler
        is logged and the watch goes on (the next change or resync delivers the object
        again). The watch waits for the handler, so a handler should be quick: the
        Reconciler's only queue the work (``reconciler.workqueue``)."""
        async with self._deliver_lock:
            try:
                await self._on_change(kind, obj)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception(
                    f"handler for {self.what} failed", change=kind, name=obj["metadata"]["name"]
                )
