"""``xmc.v1.WatchService``: the committed changes of experiments, streamed (docs/watch.md,
decision 0043).

Each stream registers with the shared :class:`~ess.watch_hub.WatchHub` *before* it reads
anything, then:

1. without a cursor, starts at the current horizon; with one, reads its own way from the
   cursor to the horizon in pages (the catch-up), so a reconnect misses nothing;
2. then takes the hub's windows; a window that does not start at or below what the
   stream has covered (the watcher overflowed, or registered while the hub was idle)
   sends it back to step 1 from its last delivered position;
3. delivers only positions past the last one delivered, so the overlap of a catch-up and
   the windows is never sent twice.

A Sync opens every stream and stands in for events while nothing happens. A stream
started without a cursor skips what had ended before it started (``Snapshot``): its
client reads that state after the opening Sync.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any

from ess.interceptor import caller
from ess.metrics import WATCH_CATCH_UPS
from ess.watch_hub import Subscriber, WatchHub
from xmc.errors import InvalidArgumentError, UnavailableError
from xmc.model.watch import (
    CURSOR_MAX_AGE,
    EventSource,
    Position,
    Scope,
    ScopeKind,
    Snapshot,
    check_cursor_age,
    decode_cursor,
    encode_cursor,
    parse_snapshot,
    starts_execution,
)
from xmc.names import experiment_name, parse_experiment_name, status_message_name, work_unit_name
from xmc.store.transactions import Store, StoredEvent, read_after, read_snapshot
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.xmc.v1 import watch_pb2, watch_pb2_grpc

#: Serialized events kept for sharing between streams (~100 bytes each).
_WIRE_CACHE_SIZE = 50_000
#: Events per stream message at most (a message of ~100 KiB).
_MAX_BATCH = 1_000


def frame(event: bytes) -> bytes:
    """A serialized WatchEvent as an element of ``WatchEvents.events`` (field 1, length
    delimited): stream messages are joined from these without parsing anything."""
    size, prefix = len(event), bytearray(b"\x0a")
    while size > 0x7F:
        prefix.append(size & 0x7F | 0x80)
        size >>= 7
    prefix.append(size)
    return bytes(prefix) + event


def event_message(event: StoredEvent, cursor: str) -> watch_pb2.WatchEvent:
    """The wire form of one stored change."""
    xid = event.xid
    message = watch_pb2.WatchEvent(cursor=cursor, experiment=experiment_name(xid))
    source = event.position.source
    if source == EventSource.STATE:
        change = message.state_change
        change.work_unit = work_unit_name(xid, event.wid or 0)
        change.execution_id = event.eid
        change.from_state = event.a  # type: ignore[assignment]
        change.to_state = event.b  # type: ignore[assignment]
        set_timestamp(change.time, event.time)
        change.writer = event.text
        change.new_execution = starts_execution(event.a, event.b)
    elif source == EventSource.MESSAGE:
        status = message.message
        status.name = status_message_name(xid, event.wid, event.position.id)
        status.content.CopyFrom(StructuredMessage.FromString(event.content or b""))
        status.execution_id = event.eid
    else:
        experiment = message.experiment_change
        experiment.created = event.text == "created"
        experiment.active_state = event.a  # type: ignore[assignment]
        experiment.launch_state = event.b  # type: ignore[assignment]
        set_timestamp(experiment.time, event.time)
    return message


class WatchService(watch_pb2_grpc.WatchServiceServicer):
    def __init__(
        self,
        store: Store,
        hub: WatchHub,
        *,
        clock: Callable[[], datetime],
        max_cursor_age: timedelta = CURSOR_MAX_AGE,
    ) -> None:
        self._store = store
        self._hub = hub
        self._clock = clock
        self._max_cursor_age = max_cursor_age
        #: Serialized events by position, shared by every stream that sends them: 200
        #: watchers of one experiment cost one encoding per event, not 200. Bounded: the
        #: oldest are dropped first (a late reader encodes its own again).
        self._wire_cache: OrderedDict[Position, bytes] = OrderedDict()

    def _framed(self, event: StoredEvent) -> bytes:
        """``event`` as one element of ``WatchEvents.events``, serialized once for every
        stream that sends it (the interceptor passes bytes through unchanged)."""
        position = event.position
        cached = self._wire_cache.get(position)
        if cached is None:
            cached = frame(event_message(event, self._cursor(position)).SerializeToString())
            self._wire_cache[position] = cached
            if len(self._wire_cache) > _WIRE_CACHE_SIZE:
                self._wire_cache.popitem(last=False)
        return cached

    async def WatchExperiments(  # type: ignore[override]  # bytes: see _framed
        self, request: watch_pb2.WatchRequest, context: Any
    ) -> AsyncIterator[bytes]:
        after = None
        if request.cursor:
            cursor = decode_cursor(request.cursor, field="cursor")
            check_cursor_age(cursor, now=self._clock(), max_age=self._max_cursor_age)
            after = cursor.position
        scope = await self._scope(request)
        subscriber = self._hub.subscribe(scope)
        try:
            async for batch in self._stream(subscriber, after, once=request.once):
                for start in range(0, len(batch), _MAX_BATCH):
                    yield b"".join(batch[start : start + _MAX_BATCH])
        finally:
            self._hub.unsubscribe(subscriber)

    async def _scope(self, request: watch_pb2.WatchRequest) -> Scope:
        """What the stream carries, within what the caller may read: one experiment (the
        read gate has answered NOT_FOUND already if the caller may not read it), all of
        them, or the caller's own (decision 0048)."""
        reads = caller().reads
        if request.experiment:
            if request.all_experiments:
                raise InvalidArgumentError(
                    "all_experiments: must not be set together with experiment"
                )
            xid = parse_experiment_name(request.experiment, field="experiment")
            await self._store.get_experiment(xid)  # NOT_FOUND for an unknown experiment
            return Scope(ScopeKind.EXPERIMENT, xid=xid, reads=reads)
        if request.all_experiments:
            return Scope(ScopeKind.ALL, reads=reads)
        return Scope(ScopeKind.CREATOR, creator=caller().email, reads=reads)

    def _cursor(self, position: Position) -> str:
        return encode_cursor(position, self._clock())

    def _sync(self, position: Position) -> list[bytes]:
        sync = watch_pb2.WatchEvent(cursor=self._cursor(position), sync=watch_pb2.Sync())
        return [frame(sync.SerializeToString())]

    async def _stream(
        self, subscriber: Subscriber, after: Position | None, *, once: bool = False
    ) -> AsyncIterator[list[bytes]]:
        """Each stream message's events, framed: a page of the catch-up, or what the
        hub's windows held since the last message."""
        settings = self._hub.settings
        covered: int | None = None  # every event of the scope below this txid was sent
        started = Snapshot(0, 0)  # with a cursor: nothing to skip
        if after is None:
            async with self._store.connection() as conn:
                started = parse_snapshot(await read_snapshot(conn))
            covered = started.xmin
            after = Position.horizon(covered)
        last = after
        yield self._sync(last)

        while True:
            if covered is None or subscriber.overflowed:
                # 1. Catch up from the database, one page at a time.
                subscriber.reset()
                WATCH_CATCH_UPS.inc()
                async with self._store.connection() as conn:
                    events, horizon = await read_after(
                        conn, last, subscriber.scope, limit=settings.catch_up_page
                    )
                batch = []
                for event in events:
                    last = event.position
                    if not started.ended(last.txid):
                        batch.append(self._framed(event))
                if batch:
                    yield batch
                covered = horizon if len(events) < settings.catch_up_page else None
                continue
            if once:  # caught up: where a later call resumes, and the end
                yield self._sync(max(last, Position.horizon(covered)))
                return
            if subscriber.closed:
                raise UnavailableError("the ESS is stopping: watch again with the last cursor")
            if not subscriber.ready.is_set():
                try:
                    await asyncio.wait_for(subscriber.ready.wait(), settings.heartbeat_seconds)
                except TimeoutError:
                    last = max(last, Position.horizon(covered))
                    yield self._sync(last)
                    continue
            # 2. The hub's windows, in order; a gap sends the stream back to step 1.
            batch = []
            for window in subscriber.take():
                if window.low > covered:
                    covered = None
                    break
                for event in window.events:
                    if event.position > last:  # 3. never twice
                        last = event.position
                        if not started.ended(last.txid):
                            batch.append(self._framed(event))
                covered = max(covered, window.high)
            if batch:
                yield batch
