"""One shared poller feeding every watcher of this ESS (decision 0043).

The hub keeps a **horizon** ``h``: every event of a transaction below ``h`` has been
handed to the watchers registered at the time. A poll reads the current horizon ``H``
(the oldest running transaction that may write this database, ``xmc.store.watch_events``)
and the events of transactions in ``[h, H)`` — one query for all watchers, however many
— and offers each watcher that
window and the events of its scope. A poll runs when a transaction of this ESS commits
(``Store.on_commit``; wakes closer than ``min_gap_seconds`` are coalesced) and every
``poll_seconds`` while anyone watches, for commits of other processes (the Actuator,
other ESS replicas). A local commit is final only once every transaction of this
database that began before it has ended, whichever process runs them; until the horizon
passes what was committed before a wake, the hub polls every ``min_gap_seconds`` instead
of waiting out the period. With no watcher the hub does not query at all.

Memory is bounded per watcher: a watcher holding more than ``buffer_events`` undelivered
events (a slow consumer) drops them and reads its own way back from the database from
its last delivered position (:mod:`ess.watching`); the windows say when a watcher missed
one, so it never has to trust that nothing was dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import structlog

from ess.metrics import WATCH_EVENTS, WATCHERS
from xmc.model.watch import Scope
from xmc.store.transactions import Store, StoredEvent, read_horizon, read_window

log = structlog.get_logger()


@dataclass(frozen=True)
class WatchSettings:
    #: Poll period while anyone watches: how late a commit of another process is seen.
    poll_seconds: float = 0.5
    #: Shortest time between two polls: a burst of commits is one poll.
    min_gap_seconds: float = 0.02
    #: After a wake, how long to poll every ``min_gap_seconds`` while the commit that woke
    #: the hub is not final yet (a transaction that began before it still runs).
    chase_seconds: float = 2.0
    #: Undelivered events a watcher may hold before it falls back to the database.
    buffer_events: int = 10_000
    #: Events per catch-up read from the database.
    catch_up_page: int = 1_000
    #: A Sync is sent after this long without an event (keeps proxies and SSE alive).
    heartbeat_seconds: float = 15.0


@dataclass(frozen=True)
class Window:
    """Every event of the subscriber's scope from transactions ``low <= txid < high``."""

    low: int
    high: int
    events: Sequence[StoredEvent]


class Subscriber:
    """One watcher's inbox: windows in order, bounded; ``overflowed`` once it dropped some."""

    def __init__(self, scope: Scope, *, limit: int) -> None:
        self.scope = scope
        self._limit = limit
        self._windows: deque[Window] = deque()
        self._held = 0
        self.overflowed = False
        self.closed = False
        self.ready = asyncio.Event()

    def offer(self, window: Window) -> None:
        if self.overflowed:
            return
        if self._held + len(window.events) > self._limit:
            self.overflowed = True
            self._windows.clear()
            self._held = 0
        elif self._windows and not window.events and self._windows[-1].high == window.low:
            last = self._windows[-1]
            self._windows[-1] = Window(last.low, window.high, last.events)
        else:
            self._windows.append(window)
            self._held += len(window.events)
        self.ready.set()

    def take(self) -> list[Window]:
        """Everything offered since the last take."""
        taken = list(self._windows)
        self._windows.clear()
        self._held = 0
        self.ready.clear()
        return taken

    def reset(self) -> None:
        """Before a catch-up read: drop what is held and accept windows again."""
        self.take()
        self.overflowed = False

    def close(self) -> None:
        self.closed = True
        self.ready.set()


class WatchHub:
    def __init__(self, store: Store, settings: WatchSettings | None = None) -> None:
        self._store = store
        self.settings = settings or WatchSettings()
        self._subscribers: set[Subscriber] = set()
        self._kick = asyncio.Event()
        self._horizon: int | None = None
        #: The horizon must reach this before every local commit so far is delivered.
        self._target = 0
        self._chase_until = 0.0
        #: Polls run (each one query pair), for the bench and the tests.
        self.polls = 0

    def wake(self) -> None:
        """A transaction of this process committed (cheap: called after every commit)."""
        self._kick.set()

    def subscribe(self, scope: Scope) -> Subscriber:
        subscriber = Subscriber(scope, limit=self.settings.buffer_events)
        self._subscribers.add(subscriber)
        WATCHERS.set(len(self._subscribers))
        self._kick.set()
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)
        WATCHERS.set(len(self._subscribers))

    def close(self) -> None:
        """The ESS is stopping: end every stream now (its client resumes elsewhere with
        its cursor) rather than holding the server's grace period."""
        for subscriber in list(self._subscribers):
            subscriber.close()
        self._kick.set()

    @property
    def watchers(self) -> int:
        return len(self._subscribers)

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop``: poll on wakes and on the period while anyone watches."""
        settings = self.settings
        failures = 0
        while not stop.is_set():
            if not self._subscribers:
                timeout: float | None = None
            elif self._chasing():
                timeout = settings.min_gap_seconds
            else:
                timeout = settings.poll_seconds
            kicked = False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), timeout=timeout)
                kicked = True
            self._kick.clear()
            if stop.is_set():
                break
            if not self._subscribers:
                self._horizon = None  # nobody to keep a continuous record for
                continue
            try:
                await self.poll_once(woken=kicked)
                failures = 0
            except Exception:
                failures += 1
                log.exception("watch poll failed; trying again", failures=failures)
                await asyncio.sleep(min(5.0, 0.2 * 2**failures))  # bounded backoff
            await asyncio.sleep(settings.min_gap_seconds)  # coalesce the next burst
        self.close()

    def _chasing(self) -> bool:
        """A commit of this process is not below the horizon yet (another transaction,
        of any process, that began before it is still running): poll again soon rather
        than at the period, since no commit of this process may come to wake the hub —
        for ``chase_seconds`` after the wake at most (a transaction left open would
        otherwise keep the hub polling at that pace)."""
        if self._horizon is None or self._horizon >= self._target:
            return False
        return time.monotonic() < self._chase_until

    async def poll_once(self, *, woken: bool = True) -> None:
        async with self._store.connection() as conn:
            high, xmax = await read_horizon(conn)
            if woken:
                # Every transaction this process committed before the wake is below xmax.
                self._target = max(self._target, xmax)
                self._chase_until = time.monotonic() + self.settings.chase_seconds
            low = self._horizon
            if low is None or high <= low:
                self._horizon = high if low is None else low
                return
            events = await read_window(conn, low, high)
        self.polls += 1
        WATCH_EVENTS.inc(len(events))
        self._horizon = high
        self._fan_out(low, high, events)

    def _fan_out(self, low: int, high: int, events: list[StoredEvent]) -> None:
        """One filtered list per distinct scope, shared by its watchers."""
        by_scope: dict[Scope, Window] = {}
        for subscriber in self._subscribers:
            window = by_scope.get(subscriber.scope)
            if window is None:
                scope = subscriber.scope
                mine = [e for e in events if scope.matches(e.xid, e.creator, e.readers)]
                window = by_scope[scope] = Window(low, high, mine)
            subscriber.offer(window)
