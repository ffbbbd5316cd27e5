"""The pure timeline logic (xmc.model.timeline): segments, phases, the clock clamp."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from xmc.errors import InvalidArgumentError
from xmc.model.states import WorkUnitState as S
from xmc.model.timeline import (
    Change,
    Phase,
    elapsed,
    execution_timeline,
    stuck_limit,
    work_unit_timeline,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NOW = T0 + timedelta(seconds=1000)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def changes(*steps: tuple[S, float]) -> list[Change]:
    """Changes from (new state, seconds after T0); each one's old state is the previous."""
    result, old = [], S.WORK_UNIT_STATE_UNSPECIFIED
    for state, seconds in steps:
        result.append(Change(old, state, at(seconds), "w", at(seconds)))
        old = state
    return result


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


PREEMPTED = [
    (S.INITIALIZING, 0),
    (S.SCHEDULING, 1),
    (S.RUNNING, 10),
    (S.DESCHEDULING, 40),
    (S.SCHEDULING, 45),
    (S.RUNNING, 70),
    (S.COMPLETED, 100),
]


@pytest.mark.parametrize(
    ("steps", "queue_wait", "startup", "run", "requeue", "preemptions"),
    [
        pytest.param(
            [
                (S.INITIALIZING, 0),
                (S.SCHEDULING, 1),
                (S.STARTING, 5),
                (S.RUNNING, 9),
                (S.COMPLETED, 20),
            ],
            Phase(s(5), False),
            Phase(s(4), False),
            Phase(s(11), False),
            s(0),
            0,
            id="straight-through",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.SCHEDULING, 1), (S.RUNNING, 10), (S.FAILED, 12)],
            Phase(s(10), False),
            Phase(s(0), False),
            Phase(s(2), False),
            s(0),
            0,
            id="no-starting-state",
        ),
        pytest.param(
            PREEMPTED,
            Phase(s(10), False),
            Phase(s(0), False),
            Phase(s(90), False),
            s(30),
            1,
            id="preempted-requeue-not-in-queue-wait",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.SCHEDULING, 1)],
            Phase(s(1000), True),
            None,
            None,
            s(0),
            0,
            id="still-queued",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.SCHEDULING, 1), (S.STARTING, 4)],
            Phase(s(4), False),
            Phase(s(996), True),
            None,
            s(0),
            0,
            id="still-starting",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.SCHEDULING, 1), (S.RUNNING, 3)],
            Phase(s(3), False),
            Phase(s(0), False),
            Phase(s(997), True),
            s(0),
            0,
            id="still-running",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.SCHEDULING, 1), (S.STOPPING, 8), (S.STOPPED, 9)],
            None,
            None,
            None,
            s(0),
            0,
            id="stopped-while-queued",
        ),
        pytest.param(
            [
                (S.INITIALIZING, 0),
                (S.SCHEDULING_PAUSED, 1),
                (S.SCHEDULING, 50),
                (S.RUNNING, 60),
                (S.COMPLETED, 70),
            ],
            Phase(s(60), False),
            Phase(s(0), False),
            Phase(s(10), False),
            s(0),
            0,
            id="paused-counts-as-queue",
        ),
        pytest.param(
            # ESS clock at 0.7 s; the cluster's (second resolution, a little behind) says
            # SCHEDULING at 0 and RUNNING at 0: time runs backwards, clamped to zero.
            [(S.INITIALIZING, 0.7), (S.SCHEDULING, 0), (S.RUNNING, 0), (S.COMPLETED, 5)],
            Phase(s(0), False),
            Phase(s(0), False),
            Phase(s(5), False),
            s(0),
            0,
            id="skewed-clocks",
        ),
    ],
)
def test_phases(
    steps: list[tuple[S, float]],
    queue_wait: Phase | None,
    startup: Phase | None,
    run: Phase | None,
    requeue: timedelta,
    preemptions: int,
) -> None:
    phases = execution_timeline(1, changes(*steps), superseded_at=None, now=NOW).phases
    assert (phases.queue_wait, phases.startup, phases.run) == (queue_wait, startup, run)
    assert (phases.requeue, phases.preemptions) == (requeue, preemptions)


@pytest.mark.parametrize(
    ("steps", "superseded_at", "expected"),
    [
        pytest.param(
            [(S.INITIALIZING, 0), (S.SCHEDULING, 2), (S.COMPLETED, 5)],
            None,
            [
                (S.INITIALIZING, at(2), s(2), False),
                (S.SCHEDULING, at(5), s(3), False),
                (S.COMPLETED, None, s(0), False),
            ],
            id="terminal-last-state-never-ends",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.RUNNING, 2)],
            None,
            [(S.INITIALIZING, at(2), s(2), False), (S.RUNNING, None, s(998), True)],
            id="ongoing-runs-to-now",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.RUNNING, 2)],
            at(30),
            [(S.INITIALIZING, at(2), s(2), False), (S.RUNNING, at(30), s(28), False)],
            id="superseded-ends-at-restart",
        ),
        pytest.param(
            [(S.INITIALIZING, 3.5), (S.SCHEDULING, 3), (S.RUNNING, 9)],
            None,
            [
                (S.INITIALIZING, at(3), s(0), False),
                (S.SCHEDULING, at(9), s(6), False),
                (S.RUNNING, None, s(991), True),
            ],
            id="backwards-clock-clamped",
        ),
        pytest.param(
            [(S.INITIALIZING, 0), (S.RUNNING, 2000)],
            None,
            [(S.INITIALIZING, at(2000), s(2000), False), (S.RUNNING, None, s(0), True)],
            id="writer-clock-ahead-of-now",
        ),
    ],
)
def test_segments(
    steps: list[tuple[S, float]],
    superseded_at: datetime | None,
    expected: list[tuple[S, datetime | None, timedelta, bool]],
) -> None:
    timeline = execution_timeline(1, changes(*steps), superseded_at=superseded_at, now=NOW)
    assert [(g.state, g.end, g.duration, g.ongoing) for g in timeline.segments] == expected


def test_restart_supersedes_the_previous_execution() -> None:
    first = changes((S.INITIALIZING, 0), (S.SCHEDULING, 1), (S.RUNNING, 10))
    second = [
        Change(S.RUNNING, S.RESTARTING, at(50), "ess", at(50)),
        Change(S.RESTARTING, S.SCHEDULING, at(52), "r", at(52)),
        Change(S.SCHEDULING, S.RUNNING, at(60), "r", at(60)),
    ]
    history = [(1, c) for c in first] + [(2, c) for c in second]
    old, new = work_unit_timeline(history, now=NOW)
    assert (old.eid, old.superseded, old.terminal, old.state) == (1, True, False, S.RUNNING)
    assert old.phases.run == Phase(s(40), False)
    assert (new.eid, new.superseded) == (2, False)
    assert new.phases.queue_wait == Phase(s(10), False)
    assert new.phases.run == Phase(s(940), True)


def test_no_changes_is_refused() -> None:
    with pytest.raises(ValueError, match="execution 3"):
        execution_timeline(3, [], superseded_at=None, now=NOW)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [(0, 5, s(5)), (5, 5, s(0)), (5, 4, s(0))],
)
def test_elapsed_never_negative(start: float, end: float, expected: timedelta) -> None:
    assert elapsed(at(start), at(end)) == expected


@pytest.mark.parametrize(
    ("requested", "expected"), [(0, 10), (1, 1), (100, 100), (-1, None), (101, None)]
)
def test_stuck_limit(requested: int, expected: int | None) -> None:
    if expected is None:
        with pytest.raises(InvalidArgumentError, match="stuck_limit"):
            stuck_limit(requested)
    else:
        assert stuck_limit(requested) == expected


def test_state_totals_sum_repeated_visits_in_order_of_first_visit() -> None:
    timeline = execution_timeline(1, changes(*PREEMPTED), superseded_at=None, now=NOW)
    assert list(timeline.state_totals().items()) == [
        (S.INITIALIZING, s(1)),
        (S.SCHEDULING, s(9 + 25)),
        (S.RUNNING, s(30 + 30)),
        (S.DESCHEDULING, s(5)),
        (S.COMPLETED, s(0)),
    ]
