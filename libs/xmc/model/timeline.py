"""An execution's timeline from its status history: the time spent in each state and the
three phases, queue wait, start-up and run (docs/timelines.md).

Order and clock (docs/decisions/0034-timelines-from-the-history.md): the changes come in
the order the ESS committed them (the history's ``id``), and every duration is measured
with their ``state_update_time``, the writer's clock: the ESS's for intents, the
cluster's (to the second) for what the Reconciler observes. Two consecutive changes from
different clocks can go backwards; :func:`elapsed` clamps such a duration to zero rather
than report time running backwards. ``record_time`` (the ESS's clock when it stored the
change) is only reported: it adds the Reconciler's watch and batching delay to every
observation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from xmc.errors import InvalidArgumentError
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState

_ZERO = timedelta(0)

#: The most stuck units one GetExperimentTimings lists, and how many when asked for 0.
MAX_STUCK = 100
DEFAULT_STUCK = 10

ADMITTED_STATES: frozenset[WorkUnitState] = frozenset(
    {WorkUnitState.STARTING, WorkUnitState.RUNNING, WorkUnitState.PARTIALLY_FAILED}
)
"""Entering one of these for the first time ends the queue wait: the scheduler let it in."""

RUN_STATES: frozenset[WorkUnitState] = frozenset(
    {WorkUnitState.RUNNING, WorkUnitState.PARTIALLY_FAILED}
)
"""Entering one of these for the first time ends the start-up: the workload runs."""

REQUEUE_STATES: frozenset[WorkUnitState] = frozenset(
    {WorkUnitState.DESCHEDULING, WorkUnitState.SCHEDULING, WorkUnitState.SCHEDULING_PAUSED}
)
"""After admission, time in these is time lost to a preemption (SPEC §8, scenario 2)."""


@dataclass(frozen=True)
class Change:
    """One row of ``work_unit_status_history``."""

    old_state: WorkUnitState
    new_state: WorkUnitState
    time: datetime
    writer: str
    record_time: datetime
    #: Who asked for it and in which request (docs/audit.md); '' for rows older than that.
    principal: str = ""
    request_id: str = ""


@dataclass(frozen=True)
class Segment:
    """A stretch in one state; ``end`` is None while ongoing and for a terminal state."""

    state: WorkUnitState
    start: datetime
    end: datetime | None
    duration: timedelta
    ongoing: bool


@dataclass(frozen=True)
class Phase:
    duration: timedelta
    ongoing: bool


@dataclass(frozen=True)
class Phases:
    """None for a phase that never began or that the execution's end cut short."""

    queue_wait: Phase | None
    startup: Phase | None
    run: Phase | None
    requeue: timedelta
    preemptions: int


@dataclass(frozen=True)
class ExecutionTimeline:
    eid: int
    changes: tuple[Change, ...]
    segments: tuple[Segment, ...]
    phases: Phases
    terminal: bool
    superseded: bool

    @property
    def state(self) -> WorkUnitState:
        return self.changes[-1].new_state

    def state_totals(self) -> dict[WorkUnitState, timedelta]:
        """Time in each visited state, summed over its segments, in order of first visit."""
        totals: dict[WorkUnitState, timedelta] = {}
        for segment in self.segments:
            totals[segment.state] = totals.get(segment.state, _ZERO) + segment.duration
        return totals


def elapsed(start: datetime, end: datetime) -> timedelta:
    """``end - start``, or zero when the two clocks behind them put ``end`` first."""
    return max(end - start, _ZERO)


def _first(changes: Sequence[Change], states: frozenset[WorkUnitState]) -> int | None:
    return next((i for i, c in enumerate(changes) if c.new_state in states), None)


def _phase(
    start: datetime | None, end: datetime | None, *, finished: bool, now: datetime
) -> Phase | None:
    """From ``start`` to ``end``; to ``now`` (ongoing) if the execution is still alive;
    None if it never began, or the execution ended before ``end`` came."""
    if start is None:
        return None
    if end is not None:
        return Phase(elapsed(start, end), ongoing=False)
    if finished:
        return None
    return Phase(elapsed(start, now), ongoing=True)


def segments_of(
    changes: Sequence[Change], *, superseded_at: datetime | None, now: datetime
) -> tuple[Segment, ...]:
    """One segment per change: the state it entered, until the next change."""
    result = []
    for i, change in enumerate(changes):
        state, start = change.new_state, change.time
        if i + 1 < len(changes):
            end: datetime | None = changes[i + 1].time
        elif state in EXECUTION_TERMINAL_STATES:
            result.append(Segment(state, start, None, _ZERO, ongoing=False))
            continue
        else:
            end = superseded_at
        ongoing = end is None
        duration = elapsed(start, now if end is None else end)
        result.append(Segment(state, start, end, duration, ongoing))
    return tuple(result)


def phases_of(
    changes: Sequence[Change],
    segments: Sequence[Segment],
    *,
    superseded_at: datetime | None,
    now: datetime,
) -> Phases:
    """Queue wait, start-up and run time, and the cost of preemptions (docs/timelines.md)."""

    def time_at(index: int | None) -> datetime | None:
        return None if index is None else changes[index].time

    admitted = _first(changes, ADMITTED_STATES)
    running = _first(changes, RUN_STATES)
    ended = time_at(_first(changes, EXECUTION_TERMINAL_STATES)) or superseded_at
    finished = ended is not None
    after = [] if admitted is None else segments[admitted:]
    return Phases(
        queue_wait=_phase(changes[0].time, time_at(admitted), finished=finished, now=now),
        startup=_phase(time_at(admitted), time_at(running), finished=finished, now=now),
        run=_phase(time_at(running), ended, finished=finished, now=now),
        requeue=sum((s.duration for s in after if s.state in REQUEUE_STATES), _ZERO),
        preemptions=sum(1 for c in changes[1:] if c.new_state is WorkUnitState.DESCHEDULING),
    )


def execution_timeline(
    eid: int, changes: Sequence[Change], *, superseded_at: datetime | None, now: datetime
) -> ExecutionTimeline:
    """The timeline of one execution from its changes in commit order (at least its
    creation). ``superseded_at``: when a restart replaced it (the next execution's first
    change), None for the current execution."""
    if not changes:
        raise ValueError(f"execution {eid} has no recorded state change")
    terminal = changes[-1].new_state in EXECUTION_TERMINAL_STATES
    if terminal:
        superseded_at = None
    segments = segments_of(changes, superseded_at=superseded_at, now=now)
    return ExecutionTimeline(
        eid=eid,
        changes=tuple(changes),
        segments=segments,
        phases=phases_of(changes, segments, superseded_at=superseded_at, now=now),
        terminal=terminal,
        superseded=superseded_at is not None,
    )


def work_unit_timeline(
    history: Sequence[tuple[int, Change]], *, now: datetime
) -> list[ExecutionTimeline]:
    """Each execution's timeline, oldest first, from a unit's (eid, change) history rows in
    commit order; each execution but the last is superseded by the next one's creation."""
    by_eid: dict[int, list[Change]] = {}
    for eid, change in history:
        by_eid.setdefault(eid, []).append(change)
    eids = sorted(by_eid)
    return [
        execution_timeline(
            eid,
            by_eid[eid],
            superseded_at=by_eid[eids[i + 1]][0].time if i + 1 < len(eids) else None,
            now=now,
        )
        for i, eid in enumerate(eids)
    ]


def stuck_limit(requested: int) -> int:
    """How many stuck units to list: 0 means the default; out of range is refused, not
    silently changed, so a caller asking for 1,000 learns it gets at most 100."""
    if not 0 <= requested <= MAX_STUCK:
        raise InvalidArgumentError(f"stuck_limit: must be between 0 and {MAX_STUCK}")
    return requested or DEFAULT_STUCK
