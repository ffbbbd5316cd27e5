"""Watch streams as the Kubernetes API server serves them: newline-delimited JSON events in
one chunked response.

- ``resourceVersion`` unset or ``"0"``: synthetic ADDED events for the current matching
  objects, then live events. Otherwise: every event strictly after that version, from the
  store's bounded history, then live; a version older than the history is answered with
  HTTP 200 and one ``ERROR`` event carrying a 410 Expired Status, then the end of the
  stream (this is what kubernetes-asyncio's ``Watch`` turns into ``ApiException(410)``).
  A version newer than the store's is no error, as on kube-apiserver (``freshness.py``
  says why): the stream stays open and delivers the events after it, with no bookmark
  until the store has reached it (upstream's ``cacheWatcher`` drops older ones).
- label/field selectors apply to both sides of a change, so an object that starts matching
  is ADDED and one that stops matching is DELETED (carrying its last matching state at the
  new resourceVersion), like the real watch cache.
- ``allowWatchBookmarks``: a BOOKMARK right after the initial state and then at least every
  ``bookmark_interval`` seconds, carrying a resourceVersion the watcher has seen everything
  up to.
- ``timeoutSeconds`` ends the stream cleanly; ``WatchHub.close_all`` ends every stream
  (fault injection) and a client disconnect unsubscribes.

Ordering: the store is synchronous, so subscribing and reading the initial state in one
step without an ``await`` between them means the subscription queue holds exactly the
events after that state — nothing is lost or repeated.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from kubesim.errors import ApiError, bad_request
from kubesim.events import Event, Subscription
from kubesim.resources import Resource
from kubesim.selectors import Requirement, fields_match, labels_match
from kubesim.store import ObjectStore

Obj = dict[str, Any]

_TRUE = frozenset({"true", "1"})


def is_true(value: str | None) -> bool:
    """Query flags as the API server reads them: ``true`` in any case, or ``1``."""
    return (value or "").strip().lower() in _TRUE


def parse_resource_version(value: str | None) -> int | None:
    """None means "start from the current state" (unset or ``"0"``)."""
    if value in (None, "", "0"):
        return None
    try:
        version = int(value)
    except ValueError:
        raise bad_request(f"invalid resource version: {value!r}") from None
    if version < 0:
        raise bad_request(f"invalid resource version: {value!r}")
    return version


@dataclass(frozen=True)
class WatchSpec:
    resource: Resource
    version: str
    """The API version the client asked for; objects are sent in it."""
    namespace: str | None
    labels: tuple[Requirement, ...] = ()
    fields: tuple[tuple[str, str, str], ...] = ()
    resource_version: int | None = None
    bookmarks: bool = False
    timeout_seconds: float | None = None
    render: Callable[[Obj], Obj] | None = None
    """How event objects are sent when not as stored (``as=Table``: a one-row Table)."""

    def matches(self, obj: Obj) -> bool:
        namespace = obj.get("metadata", {}).get("namespace")
        if self.resource.namespaced and self.namespace not in (None, namespace):
            return False
        return labels_match(self.labels, obj) and fields_match(self.fields, obj)


def translate(spec: WatchSpec, event: Event) -> tuple[str, Obj] | None:
    """What a watcher with ``spec`` sees of one store event, or None (not for it)."""
    now = spec.matches(event.object)
    before = event.old is not None and event.type != "ADDED" and spec.matches(event.old)
    if event.type == "DELETED":
        return ("DELETED", event.object) if before or now else None
    if now:
        return ("MODIFIED" if before else "ADDED", event.object)
    if before and event.old is not None:
        left = dict(event.old)
        left["metadata"] = {
            **event.old.get("metadata", {}),
            "resourceVersion": str(event.resource_version),
        }
        return ("DELETED", left)
    return None


def served_as(obj: Obj, resource: Resource, version: str) -> Obj:
    """``obj`` as served in ``version``: objects are identical across served versions, only
    ``apiVersion`` says which (a shallow copy only when it differs)."""
    api_version = resource.api_version(version)
    if obj.get("apiVersion") == api_version:
        return obj
    return {**obj, "apiVersion": api_version}


def encode(spec: WatchSpec, type_: str, obj: Obj) -> bytes:
    obj = served_as(obj, spec.resource, spec.version)
    if spec.render is not None and type_ != "BOOKMARK":
        obj = spec.render(obj)
    line = json.dumps({"type": type_, "object": obj}, separators=(",", ":"))
    return line.encode() + b"\n"


def bookmark(spec: WatchSpec, resource_version: int) -> bytes:
    obj = {
        "kind": spec.resource.kind,
        "apiVersion": spec.resource.api_version(spec.version),
        "metadata": {"resourceVersion": str(resource_version)},
    }
    return encode(spec, "BOOKMARK", obj)


def error_event(error: ApiError) -> bytes:
    return json.dumps({"type": "ERROR", "object": error.status()}).encode() + b"\n"


def initial_events(store: ObjectStore, spec: WatchSpec) -> tuple[list[tuple[str, Obj]], int]:
    """The events a new watcher starts with and the resourceVersion they bring it to.
    Raises 410 Expired when ``spec.resource_version`` is older than the history."""
    if spec.resource_version is None:
        objects = store.list(spec.resource, spec.namespace, labels=spec.labels, fields=spec.fields)
        return [("ADDED", obj) for obj in objects], store.resource_version
    events = store.events_since(spec.resource_version)
    ours = (translate(spec, e) for e in events if e.resource.key == spec.resource.key)
    return [seen for seen in ours if seen], max(spec.resource_version, store.resource_version)


class WatchHub:
    """The open watch streams of one API server, so they can all be ended at once."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self._subscriptions: dict[int, Subscription] = {}

    @property
    def open_count(self) -> int:
        return len(self._subscriptions)

    def open(self, resource: Resource) -> Subscription:
        subscription = self._store.subscribe(resource)
        self._subscriptions[id(subscription)] = subscription
        return subscription

    def close(self, subscription: Subscription) -> None:
        self._store.unsubscribe(subscription)
        self._subscriptions.pop(id(subscription), None)

    def close_all(self) -> int:
        """End every open stream (each sees the end-of-feed marker); returns how many."""
        subscriptions = list(self._subscriptions.values())
        for subscription in subscriptions:
            self.close(subscription)
            subscription.queue.put_nowait(None)
        return len(subscriptions)


@dataclass
class _Cursor:
    """Where one stream is: the resourceVersion it has delivered everything up to, and when
    it last sent a bookmark."""

    resource_version: int
    last_bookmark: float


async def serve_watch(
    request: web.Request,
    store: ObjectStore,
    hub: WatchHub,
    spec: WatchSpec,
    *,
    bookmark_interval: float,
) -> web.StreamResponse:
    subscription = hub.open(spec.resource)
    try:
        try:
            initial, resource_version = initial_events(store, spec)
        except ApiError as error:
            return await _refuse(request, error)
        response = await _start(request)
        cursor = _Cursor(resource_version, time.monotonic())
        chunk = b"".join(encode(spec, type_, obj) for type_, obj in initial)
        if spec.bookmarks and store.resource_version >= resource_version:
            chunk += bookmark(spec, resource_version)
        try:
            if chunk:
                await response.write(chunk)
            await _follow(response, store, subscription, spec, cursor, bookmark_interval)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away; the subscription is closed below
        return response
    finally:
        hub.close(subscription)


async def _refuse(request: web.Request, error: ApiError) -> web.StreamResponse:
    """A watch that cannot start is still a 200 with one ERROR event, like a real server."""
    response = await _start(request)
    await response.write(error_event(error))
    await response.write_eof()
    return response


async def _start(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    return response


async def _follow(
    response: web.StreamResponse,
    store: ObjectStore,
    subscription: Subscription,
    spec: WatchSpec,
    cursor: _Cursor,
    bookmark_interval: float,
) -> None:
    """Live events until the feed ends or ``timeoutSeconds`` passes."""
    deadline = None if spec.timeout_seconds is None else time.monotonic() + spec.timeout_seconds
    queue = subscription.queue
    while deadline is None or time.monotonic() < deadline:
        wait = _wait_time(spec, cursor, deadline, bookmark_interval)
        events, ended = await _next_batch(queue, wait)
        chunk = b"".join(_encode_new(spec, cursor, events))
        # No bookmark once the feed has ended: a feed is closed when its subscriber fell
        # behind (events were dropped) or kubesim is stopping, so the store's version is
        # not one this stream delivered; a bookmark at it would let a resumed watch skip
        # those events instead of getting the 410 that makes it re-list.
        due = time.monotonic() - cursor.last_bookmark >= bookmark_interval
        if spec.bookmarks and due and not ended:
            if queue.empty():  # every event up to the store's version has been handled
                cursor.resource_version = max(cursor.resource_version, store.resource_version)
            if store.resource_version >= cursor.resource_version:
                chunk += bookmark(spec, cursor.resource_version)
            cursor.last_bookmark = time.monotonic()
        if chunk:
            await response.write(chunk)
        if ended:
            return


def _encode_new(spec: WatchSpec, cursor: _Cursor, events: list[Event]) -> list[bytes]:
    lines = []
    for event in events:
        if event.resource_version <= cursor.resource_version:
            continue  # already covered by the initial state
        cursor.resource_version = event.resource_version
        if seen := translate(spec, event):
            lines.append(encode(spec, *seen))
    return lines


def _wait_time(
    spec: WatchSpec, cursor: _Cursor, deadline: float | None, bookmark_interval: float
) -> float | None:
    """Seconds until something is due without an event (timeout or bookmark); None = no
    limit."""
    now = time.monotonic()
    waits = []
    if deadline is not None:
        waits.append(deadline - now)
    if spec.bookmarks:
        waits.append(cursor.last_bookmark + bookmark_interval - now)
    return min(waits) if waits else None


async def _next_batch(
    queue: asyncio.Queue[Event | None], wait: float | None
) -> tuple[list[Event], bool]:
    """Every event queued now, waiting up to ``wait`` seconds for the first (None =
    forever); True once the end-of-feed marker was seen."""
    try:
        if wait is None:
            item = await queue.get()
        elif wait > 0:
            item = await asyncio.wait_for(queue.get(), timeout=wait)
        elif queue.empty():
            return [], False
        else:
            item = queue.get_nowait()
    except TimeoutError:
        return [], False
    events: list[Event] = []
    while item is not None:
        events.append(item)
        if queue.empty():
            return events, False
        item = queue.get_nowait()
    return events, True
