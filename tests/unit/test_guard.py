"""State guard (SPEC §5.2): the full transition matrix and the ordered checks before it."""

from datetime import UTC, datetime, timedelta, timezone

import pytest

from xmc.model.guard import (
    ALLOWED_TRANSITIONS,
    GuardReason,
    StateUpdateDecision,
    decide_state_update,
    should_update_work_unit_execution_state,
)
from xmc.model.states import WorkUnitState

S = WorkUnitState
T1 = datetime(2026, 1, 2, 3, 0, 0, tzinfo=UTC)
T2 = T1 + timedelta(seconds=1)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Expected outcome for (current row, new column) when the new time is later than the current.
#   Y accepted   . transition not allowed   = same state   T current is terminal
EXPECTED_MATRIX = """
                             WORK_UNIT_STATE_UNSPECIFIED
                             | INITIALIZING
                             | | SCHEDULING
                             | | | STARTING
                             | | | | RUNNING
                             | | | | | PARTIALLY_FAILED
                             | | | | | | STOPPING
                             | | | | | | | RESTARTING
                             | | | | | | | | STOPPED
                             | | | | | | | | | DESCHEDULING
                             | | | | | | | | | | COMPLETED
                             | | | | | | | | | | | FAILED
                             | | | | | | | | | | | | SCHEDULING_PAUSED
WORK_UNIT_STATE_UNSPECIFIED  = . . . . . . . . . . . .
INITIALIZING                 . = Y Y Y Y Y . Y Y Y Y Y
SCHEDULING                   . . = Y Y Y Y . Y Y Y Y .
STARTING                     . . Y = Y Y Y . Y Y Y Y .
RUNNING                      . . Y Y = Y Y . Y Y Y Y .
PARTIALLY_FAILED             . . Y Y Y = Y . Y Y Y Y .
STOPPING                     . . . . . . = . Y . Y Y .
RESTARTING                   . . Y Y Y Y Y = Y Y Y Y Y
STOPPED                      T T T T T T T T T T T T T
DESCHEDULING                 . . Y Y Y Y Y . Y = Y Y .
COMPLETED                    T T T T T T T T T T T T T
FAILED                       T T T T T T T T T T T T T
SCHEDULING_PAUSED            . . Y Y Y Y Y . Y Y Y Y =
"""
COLUMNS = sorted(WorkUnitState)

_SYMBOLS = {
    "Y": StateUpdateDecision(allowed=True, reason=GuardReason.ACCEPTED),
    ".": StateUpdateDecision(allowed=False, reason=GuardReason.TRANSITION_NOT_ALLOWED),
    "=": StateUpdateDecision(allowed=False, reason=GuardReason.SAME_STATE),
    "T": StateUpdateDecision(allowed=False, reason=GuardReason.TERMINAL),
}


def _matrix_rows() -> dict[WorkUnitState, list[str]]:
    """Parse the matrix; header lines start with a column name or "|", not a row name."""
    rows = {}
    for line in EXPECTED_MATRIX.strip().splitlines():
        name, *symbols = line.split()
        if name in WorkUnitState.__members__ and symbols:
            rows[WorkUnitState[name]] = symbols
    return rows


def _matrix_cases() -> list[object]:
    return [
        pytest.param(current, new, _SYMBOLS[symbol], id=f"{current.name}->{new.name}")
        for current, symbols in _matrix_rows().items()
        for new, symbol in zip(COLUMNS, symbols, strict=True)
    ]


def test_matrix_covers_every_pair() -> None:
    header = [line.split()[-1] for line in EXPECTED_MATRIX.strip().splitlines()[: len(COLUMNS)]]
    assert header == [state.name for state in COLUMNS]
    rows = _matrix_rows()
    assert list(rows) == COLUMNS
    assert all(len(symbols) == len(COLUMNS) for symbols in rows.values())


@pytest.mark.parametrize(("current", "new", "expected"), _matrix_cases())
def test_transition_matrix(
    current: WorkUnitState, new: WorkUnitState, expected: StateUpdateDecision
) -> None:
    assert decide_state_update(current, T1, new, T2) == expected
    assert should_update_work_unit_execution_state(current, T1, new, T2) is expected.allowed


def _decision(reason: GuardReason) -> StateUpdateDecision:
    return StateUpdateDecision(allowed=reason is GuardReason.ACCEPTED, reason=reason)


@pytest.mark.parametrize(
    ("current", "current_time", "new", "new_time", "expected"),
    [
        pytest.param(
            S.INITIALIZING,
            T1,
            S.SCHEDULING,
            EPOCH,
            GuardReason.ZERO_TIME,
            id="zero time drops an otherwise valid change",
        ),
        pytest.param(
            S.RUNNING,
            None,
            S.STOPPING,
            datetime(1970, 1, 1),
            GuardReason.ZERO_TIME,
            id="naive zero time from Timestamp.ToDatetime drops the change",
        ),
        pytest.param(
            S.COMPLETED,
            T1,
            S.RUNNING,
            EPOCH,
            GuardReason.ZERO_TIME,
            id="zero time is checked before terminal",
        ),
        pytest.param(
            S.RUNNING,
            T2,
            S.SCHEDULING,
            T1,
            GuardReason.STALE_TIME,
            id="stale time rejected",
        ),
        pytest.param(
            S.RUNNING,
            T2,
            S.STOPPING,
            T1,
            GuardReason.ACCEPTED,
            id="stale time but new STOPPING accepted",
        ),
        pytest.param(
            S.SCHEDULING_PAUSED,
            T2,
            S.STOPPING,
            T1,
            GuardReason.ACCEPTED,
            id="stale STOPPING from SCHEDULING_PAUSED accepted",
        ),
        pytest.param(
            S.COMPLETED,
            T2,
            S.STOPPING,
            T1,
            GuardReason.TERMINAL,
            id="stale STOPPING still cannot reopen a terminal execution",
        ),
        pytest.param(
            S.RUNNING,
            T2,
            S.INITIALIZING,
            T1,
            GuardReason.STALE_TIME,
            id="time order is checked before the transition table",
        ),
        pytest.param(
            S.STOPPING,
            T2,
            S.RUNNING,
            T1,
            GuardReason.TRANSITION_NOT_ALLOWED,
            id="an observation older than a stop is refused by the table, not the clock",
        ),
        pytest.param(
            S.RUNNING,
            T2,
            S.RUNNING,
            T1,
            GuardReason.SAME_STATE,
            id="same state is checked before time order",
        ),
        pytest.param(
            S.RUNNING,
            T1,
            S.SCHEDULING,
            T1,
            GuardReason.ACCEPTED,
            id="equal times accepted",
        ),
        pytest.param(
            S.INITIALIZING,
            None,
            S.SCHEDULING,
            T1,
            GuardReason.ACCEPTED,
            id="current time None accepted",
        ),
        pytest.param(
            S.STARTING,
            None,
            S.INITIALIZING,
            T1,
            GuardReason.TRANSITION_NOT_ALLOWED,
            id="current time None still checks the transition",
        ),
        pytest.param(
            S.RUNNING,
            datetime(2026, 1, 2, 4, 30, 0, tzinfo=timezone(timedelta(hours=2))),
            S.SCHEDULING,
            T1,
            GuardReason.ACCEPTED,
            id="times with offsets compare as instants",
        ),
        pytest.param(
            S.RUNNING,
            T2,
            S.SCHEDULING,
            datetime(2026, 1, 2, 3, 0, 0),
            GuardReason.STALE_TIME,
            id="naive times are read as UTC",
        ),
        pytest.param(
            S.RUNNING,
            T1,
            S.SCHEDULING,
            T2,
            GuardReason.ACCEPTED,
            id="preemption moves RUNNING back to SCHEDULING",
        ),
        pytest.param(
            S.STOPPING,
            T1,
            S.RUNNING,
            T2,
            GuardReason.TRANSITION_NOT_ALLOWED,
            id="a late observation cannot undo a stop",
        ),
        pytest.param(
            S.COMPLETED,
            T1,
            S.RUNNING,
            T2,
            GuardReason.TERMINAL,
            id="COMPLETED is immutable",
        ),
        pytest.param(
            S.FAILED,
            T1,
            S.STOPPED,
            T2,
            GuardReason.TERMINAL,
            id="FAILED is immutable even towards another terminal state",
        ),
        pytest.param(
            S.STOPPED,
            T1,
            S.STOPPED,
            T2,
            GuardReason.TERMINAL,
            id="terminal is checked before same state",
        ),
    ],
)
def test_ordered_checks(
    current: WorkUnitState,
    current_time: datetime | None,
    new: WorkUnitState,
    new_time: datetime,
    expected: GuardReason,
) -> None:
    assert decide_state_update(current, current_time, new, new_time) == _decision(expected)
    assert should_update_work_unit_execution_state(current, current_time, new, new_time) is (
        expected is GuardReason.ACCEPTED
    )


@pytest.mark.parametrize(
    ("current", "new"),
    [
        pytest.param(S.INITIALIZING, S.SCHEDULING, id="valid transition"),
        pytest.param(S.COMPLETED, S.RUNNING, id="even when current is terminal"),
        pytest.param(S.RUNNING, S.RUNNING, id="even for the same state"),
    ],
)
def test_missing_new_time_raises(current: WorkUnitState, new: WorkUnitState) -> None:
    with pytest.raises(ValueError, match=r"status\.state_update_time"):
        decide_state_update(current, T1, new, None)
    with pytest.raises(ValueError, match=r"status\.state_update_time"):
        should_update_work_unit_execution_state(current, T1, new, None)


def test_allowed_transitions_table_is_total_and_read_only() -> None:
    assert set(ALLOWED_TRANSITIONS) == set(WorkUnitState)
    with pytest.raises(TypeError):
        ALLOWED_TRANSITIONS[S.STOPPING] = frozenset()  # type: ignore[index]


def test_reasons_are_plain_string_labels() -> None:
    assert {r.value for r in GuardReason} == {
        "accepted",
        "zero_time",
        "terminal",
        "same_state",
        "stale_time",
        "transition_not_allowed",
    }


XMC_WRITTEN = (S.INITIALIZING, S.RESTARTING, S.SCHEDULING_PAUSED, S.STOPPING)
OBSERVED_OR_TERMINAL = (
    S.SCHEDULING,
    S.DESCHEDULING,
    S.STARTING,
    S.RUNNING,
    S.PARTIALLY_FAILED,
    S.STOPPED,
    S.COMPLETED,
    S.FAILED,
)
#: XMC stamps to the microsecond with its own clock...
XMC_TIME = datetime(2026, 1, 2, 12, 0, 5, 300_000, tzinfo=UTC)
#: ...the cluster to the whole second with the API server's, possibly skewed.
CLUSTER_TIMES = {
    "same second": XMC_TIME.replace(microsecond=0),
    "cluster 5 s behind": XMC_TIME.replace(microsecond=0) - timedelta(seconds=5),
    "cluster 5 s ahead": XMC_TIME.replace(microsecond=0) + timedelta(seconds=5),
}


def _cross_clock_cases() -> list[object]:
    cases: list[object] = []
    for current in XMC_WRITTEN:
        for new in OBSERVED_OR_TERMINAL:
            allowed = new in ALLOWED_TRANSITIONS[current]
            want = GuardReason.ACCEPTED if allowed else GuardReason.TRANSITION_NOT_ALLOWED
            for skew, cluster_time in CLUSTER_TIMES.items():
                cases.append(
                    pytest.param(
                        current, new, cluster_time, want, id=f"{current.name}->{new.name} {skew}"
                    )
                )
    return cases


@pytest.mark.parametrize(("current", "new", "cluster_time", "expected"), _cross_clock_cases())
def test_a_state_xmc_wrote_never_makes_a_cluster_observation_stale(
    current: WorkUnitState, new: WorkUnitState, cluster_time: datetime, expected: GuardReason
) -> None:
    """SPEC §5.2 step 5: the stored time came from XMC's clock, the proposed one from the
    cluster's; only the transition table may refuse (STOPPING → an observed state)."""
    assert decide_state_update(current, XMC_TIME, new, cluster_time) == _decision(expected)


def test_the_stop_that_hung_at_real_time_now_lands() -> None:
    """The bug: STOPPING stamped 12:00:05.300 by the ESS, the JobSet deleted at 12:00:05 by
    the API server, the finalizer's STOPPED write refused as stale."""
    got = decide_state_update(S.STOPPING, XMC_TIME, S.STOPPED, XMC_TIME.replace(microsecond=0))
    assert got == _decision(GuardReason.ACCEPTED)


CLUSTER_OBSERVED = (S.SCHEDULING, S.DESCHEDULING, S.STARTING, S.RUNNING, S.PARTIALLY_FAILED)


ORDER_BY_OFFSET = {
    "same second: equal times pass": (timedelta(0), GuardReason.ACCEPTED),
    "older observation": (timedelta(seconds=-5), GuardReason.STALE_TIME),
    "newer observation": (timedelta(seconds=5), GuardReason.ACCEPTED),
}


def _same_clock_cases() -> list[object]:
    return [
        pytest.param(current, new, offset, want, id=f"{current.name}->{new.name} {label}")
        for current in CLUSTER_OBSERVED
        for new in (*CLUSTER_OBSERVED, S.STOPPED, S.COMPLETED, S.FAILED)
        if new != current
        for label, (offset, want) in ORDER_BY_OFFSET.items()
    ]


@pytest.mark.parametrize(("current", "new", "offset", "expected"), _same_clock_cases())
def test_between_cluster_observations_the_order_holds(
    current: WorkUnitState, new: WorkUnitState, offset: timedelta, expected: GuardReason
) -> None:
    stored = XMC_TIME.replace(microsecond=0)
    assert decide_state_update(current, stored, new, stored + offset) == _decision(expected)
