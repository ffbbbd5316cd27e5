"""Business metrics of the ESS (docs/metrics.md, decision 0050): what the shared cluster's
users and operators ask of XMC — how long a unit waits and takes to start, why units fail,
how many are retried — counted from the state changes the ESS accepts.

Counted after the transaction commits, never inside it: a rolled-back batch counts
nothing, and a kill -9 between the commit and the count loses at most that batch's
samples (a metric, not a record; the history keeps the truth).

Labels are bounded by construction: failure reasons and retry verdicts are enums, the
execution label is ``first`` or ``restart``. No id, email or free text is a label here
(the gauges by owner and queue live in :mod:`ess.unit_gauges`, bounded by people and
queues, not by work units).
"""

from __future__ import annotations

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
from xmc.store.transactions import Connection, confirm_first_starts

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

_STATE_CHILDREN = {state: STATE_CHANGES.labels(state.name) for state in WorkUnitState}


async def first_starts(
    conn: Connection, transitions: Sequence[Transition]
) -> set[tuple[int, int, int]]:
    """In the batch's transaction: which of its RUNNING changes are first starts."""
    return await confirm_first_starts(conn, first_start_candidates(transitions))


def count_batch(
    transitions: Sequence[Transition],
    items: Sequence[ExecutionUpdate],
    *,
    first: set[tuple[int, int, int]],
    verdicts: Iterable[str],
    applied_at: datetime,
) -> None:
    """Count one committed batch of observations. On the hot path: one increment per
    state entered (not per change), and per change only a tuple compare unless it ends a
    queue wait, fails, or starts for the first time."""
    if not transitions:
        for verdict in verdicts:
            RETRIES.labels(verdict).inc()
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
    for transition in transitions if first else ():
        if (transition.xid, transition.wid, transition.eid) in first:
            start = first_start(transition, applied_at)
            CREATE_TO_RUNNING.labels(start.execution).observe(start.seconds)
    for verdict in verdicts:
        RETRIES.labels(verdict).inc()
