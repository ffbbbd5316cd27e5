"""Business metrics of the ESS (docs/metrics.md, decision 0050): what the shared cluster's
users and operators ask of XMC — how long a unit waits and takes to start, why units fail,
how many are retried — counted from the state changes the ESS accepts.

Counted after the transaction commits, never inside it: a rolled-back batch counts
nothing, and a kill -9 between the commit and the count loses at most that batch's
samples (a metric, not a record; the history keeps the truth). Whether a start is an
execution's first needs a read of its history: :class:`FirstStarts` does that for all
queued starts at once, off the request path, so the observation path pays nothing for it.

Labels are bounded by construction: failure reasons and retry verdicts are enums, the
execution label is ``first`` or ``restart``. No id, email or free text is a label here
(the gauges by owner and queue live in :mod:`ess.unit_gauges`, bounded by people and
queues, not by work units).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Final

from prometheus_client import Counter as PromCounter
from prometheus_client import Histogram

from xmc.failure_metrics import FAILURES
from xmc.model.business import (
    Transition,
    failure_reason,
    first_start,
    first_start_candidates,
    queue_wait_seconds,
)
from xmc.model.merge import ExecutionUpdate
from xmc.model.retries import Failure
from xmc.model.states import WorkUnitState
from xmc.store.transactions import Store, fetch_first_running
from xmc.supervise import every

#: Seconds to minutes to a day: a unit may start at once or wait a night for GPUs.
WAIT_BUCKETS: Final = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)

CREATE_TO_RUNNING = Histogram(
    "xmc_work_unit_create_to_running_seconds",
    "Time from an execution's create (or restart) to its first RUNNING, as the ESS applied "
    "it; execution=first for a work unit's first execution, restart for later ones",
    ["execution"],
    buckets=WAIT_BUCKETS,
)
QUEUE_WAIT = Histogram(
    "xmc_work_unit_queue_wait_seconds",
    "Time an execution waited in SCHEDULING (Kueue's queue) before it was admitted; a "
    "preempted execution that queues again counts each wait",
    buckets=WAIT_BUCKETS,
)
RETRIES = PromCounter(
    "xmc_work_unit_retry_verdicts_total",
    "Failed executions a retry policy judged, by verdict (retry, not_matched, never, "
    "exhausted, disruptions)",
    ["verdict"],
)
STATE_CHANGES = PromCounter(
    "xmc_work_unit_state_changes_total",
    "Accepted state changes of executions, by the state entered",
    ["state"],
)

FIRST_STARTS_DROPPED = PromCounter(
    "xmc_work_unit_first_starts_dropped_total",
    "Changes into RUNNING not checked for a first start because too many were queued",
)

_STATE_CHILDREN = {state: STATE_CHANGES.labels(state.name) for state in WorkUnitState}


class FirstStarts:
    """Which changes into RUNNING are executions' first starts, decided off the request
    path: the observation path queues its candidates after the commit, and a supervised
    loop resolves everything queued in one read per interval (an execution's first RUNNING
    history row's time, compared with the change's own), then observes the create-to-RUNNING
    histogram. A return after a preemption has a later time than the first row, so it is not
    counted again, however the loop and the commits interleave. Bounded: past ``limit``
    queued candidates the newest are dropped (a metric, not a record) and counted."""

    def __init__(self, store: Store, *, interval: float = 1.0, limit: int = 100_000) -> None:
        self._store = store
        self._interval = interval
        self._limit = limit
        self._queued: list[tuple[Transition, datetime]] = []

    def offer(self, transitions: Sequence[Transition], applied_at: datetime) -> None:
        for transition in first_start_candidates(transitions):
            if len(self._queued) >= self._limit:
                FIRST_STARTS_DROPPED.inc()
                continue
            self._queued.append((transition, applied_at))

    async def resolve(self) -> None:
        queued, self._queued = self._queued, []
        if not queued:
            return
        keys = sorted({(t.xid, t.wid, t.eid) for t, _ in queued})
        async with self._store.connection() as conn:
            first = await fetch_first_running(conn, keys)
        for transition, applied_at in queued:
            key = (transition.xid, transition.wid, transition.eid)
            if first.get(key) == transition.new_since:
                start = first_start(transition, applied_at)
                CREATE_TO_RUNNING.labels(start.execution).observe(start.seconds)

    async def run(self, stopping: asyncio.Event) -> None:
        await every("first-starts", self._interval, self.resolve, stopping=stopping)


def count_batch(
    transitions: Sequence[Transition],
    items: Sequence[ExecutionUpdate],
    *,
    verdicts: Iterable[str],
) -> None:
    """Count one committed batch of observations. On the hot path: one increment per
    state entered (not per change), and per change only a compare unless it ends a
    queue wait or fails."""
    for verdict in verdicts:
        RETRIES.labels(verdict).inc()
    if not transitions:
        return
    for state, times in Counter(t.new for t in transitions).items():
        _STATE_CHILDREN[state].inc(times)
    facts: Mapping[tuple[int, int, int], Failure | None] = {
        (item.xid, item.wid, item.eid): item.failure for item in items if item.failure is not None
    }
    for transition in transitions:
        if transition.new == WorkUnitState.FAILED:
            key = (transition.xid, transition.wid, transition.eid)
            FAILURES.labels(failure_reason(facts.get(key)).value).inc()
        elif (wait := queue_wait_seconds(transition)) is not None:
            QUEUE_WAIT.observe(wait)
