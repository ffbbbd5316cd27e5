"""Queue positions from Kueue's visibility API, at most one request per queue per tick.

Each waiting Workload's event needs its position, and the only source is the LocalQueue's
whole ``pendingworkloads`` summary. Fetching it once per event made each event cost the
length of the queue: O(N²) over a sweep that queues N work units at once (issue 14).
Here, one summary per queue serves every event within ``max_age`` seconds, and callers
that arrive while it is being fetched wait for that same request. A position is
informational (SPEC §8.2), and a second-old one is as good as the one the event saw.

A queue whose summary cannot be read (Kueue's visibility API not served, or not
answering) leaves its units without a position; ``Outages`` makes that one warning per
queue until a read succeeds again, not one line per event.

A position also changes when nothing happens to the Workload itself: another one ahead of
it is admitted or arrives, and Kueue writes nothing to this one. On the real control
plane even a unit's first position was missed: the Workload's event came before Kueue's
queue manager listed it, and no later event came to correct it. So the Reconciler
re-reads the positions of its waiting Workloads periodically (:class:`PositionReader`'s
``stale``: one summary per queue per look) and re-observes only those whose position
differs from the one last reported.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from reconciler.observe import QueuePosition
from xmc.kjson import as_mapping, condition_of
from xmc.kube import KubeError

log = structlog.get_logger()

Fetch = Callable[[str], Awaitable[Mapping[str, Any]]]
"""The summary of one LocalQueue (raises when it cannot be read)."""


@dataclass(frozen=True)
class QueueSnapshot:
    """One summary, indexed: name → 0-based position in the ClusterQueue."""

    positions: Mapping[str, int | None]
    total: int
    taken_at: float


def index_summary(summary: Mapping[str, Any], taken_at: float) -> QueueSnapshot:
    items = [i for i in summary.get("items") or () if isinstance(i, Mapping)]
    positions = {
        str((i.get("metadata") or {}).get("name", "")): i.get("positionInClusterQueue")
        for i in items
    }
    return QueueSnapshot(positions, len(items), taken_at)


def position_in(snapshot: QueueSnapshot, name: str) -> QueuePosition:
    return QueuePosition(snapshot.positions.get(name), snapshot.total)


class QueuePositions:
    """Cached per-queue snapshots; ``position`` raises what ``fetch`` raises."""

    def __init__(
        self, fetch: Fetch, *, max_age: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch
        self._max_age = max_age
        self._clock = clock
        self._snapshots: dict[str, QueueSnapshot] = {}
        self._fetching: dict[str, asyncio.Future[QueueSnapshot]] = {}

    async def position(self, queue: str, name: str) -> QueuePosition:
        return position_in(await self._snapshot(queue), name)

    async def _snapshot(self, queue: str) -> QueueSnapshot:
        cached = self._snapshots.get(queue)
        if cached is not None and self._clock() - cached.taken_at < self._max_age:
            return cached
        loading = self._fetching.get(queue)
        if loading is None:
            # Its own task: a caller that is cancelled mid-wait never cancels the request
            # the other callers are waiting on.
            loading = asyncio.ensure_future(self._load(queue))
            self._fetching[queue] = loading
        return await asyncio.shield(loading)

    async def _load(self, queue: str) -> QueueSnapshot:
        try:
            snapshot = index_summary(await self._fetch(queue), self._clock())
        finally:
            self._fetching.pop(queue, None)
        self._snapshots[queue] = snapshot
        return snapshot


class Outages:
    """Which queues' summaries are failing: the first failure of an outage is worth a
    warning, the rest of it only debug; a successful read ends the outage."""

    def __init__(self) -> None:
        self._down: set[str] = set()

    def failed(self, queue: str) -> bool:
        """Note a failed read; True when it starts an outage of ``queue``."""
        starts = queue not in self._down
        self._down.add(queue)
        return starts

    def answered(self, queue: str) -> None:
        self._down.discard(queue)


def waiting_queue(workload: Mapping[str, Any]) -> str | None:
    """The LocalQueue of a Workload waiting for quota (``QuotaReserved=False``), else None."""
    waiting = condition_of(workload, "QuotaReserved", status="False") is not None
    queue = as_mapping(workload.get("spec")).get("queueName")
    return str(queue) if waiting and queue else None


class PositionReader:
    """Each waiting Workload's position (``QueuePositions``), the outage warnings, and
    what was last reported per Workload, so a periodic look re-observes only the
    Workloads whose position moved."""

    def __init__(self, fetch: Fetch, *, max_age: float) -> None:
        self._positions = QueuePositions(fetch, max_age=max_age)
        self._outages = Outages()
        #: Workload name → the position its last observation carried.
        self._reported: dict[str, QueuePosition | None] = {}

    async def of(self, workload: Mapping[str, Any]) -> QueuePosition | None:
        """Kueue's visibility API: 0-based position (the observer adds 1) and queue size;
        None for a Workload not waiting; unknown (None, None) when it cannot be read."""
        queue = waiting_queue(workload)
        if queue is None:
            return None
        try:
            position = await self._positions.position(queue, _name(workload))
        except KubeError as error:
            if self._outages.failed(queue):
                log.warning(
                    "queue positions unavailable: Kueue's visibility API (pendingworkloads) "
                    "could not be read; this queue's waiting work units show no position "
                    "until it can",
                    queue=queue,
                    error=str(error),
                )
            else:
                log.debug("queue position unavailable", queue=queue, error=str(error))
            return QueuePosition(None, None)
        self._outages.answered(queue)
        return position

    def reported(self, workload: Mapping[str, Any], position: QueuePosition | None) -> None:
        self._reported[_name(workload)] = position

    async def stale(self, workloads: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The waiting ones among ``workloads`` whose position is not the one last
        reported; what is remembered is trimmed to the Workloads still waiting."""
        waiting = [w for w in workloads if waiting_queue(w) is not None]
        current = {_name(w): await self.of(w) for w in waiting}
        self._reported = {n: p for n, p in self._reported.items() if n in current}
        return [w for w in waiting if self._reported.get(_name(w), _NEVER) != current[_name(w)]]


_NEVER = QueuePosition(-1, -1)
"""No position reported yet: differs from every position, unknown included."""


def _name(workload: Mapping[str, Any]) -> str:
    metadata = workload.get("metadata")
    return str(metadata.get("name", "")) if isinstance(metadata, Mapping) else ""
