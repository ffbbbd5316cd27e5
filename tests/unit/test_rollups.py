"""Experiment rollups (SPEC §3.3): active state, child-state and severity counts, complete time."""

from collections.abc import Mapping
from dataclasses import dataclass

import pytest

from xmc.model.rollups import (
    apply_child_state_change,
    apply_severity_change,
    best_severity,
    compute_active_state,
    get_best_message_from_status,
    should_set_complete_time,
    update_experiment_active_state,
)
from xmc.model.states import ActiveState, LaunchState, Severity, WorkUnitState

S = WorkUnitState
L = LaunchState
A = ActiveState
V = Severity


@dataclass(frozen=True)
class Message:
    """Stands in for a `StructuredMessage`; only `severity` matters to the rollups."""

    severity: int
    text: str = ""


@pytest.mark.parametrize(
    ("launch_state", "counts", "expected"),
    [
        pytest.param(L.FAILED, {S.RUNNING: 2}, A.INACTIVE, id="failed launch with running units"),
        pytest.param(L.FAILED, {}, A.INACTIVE, id="failed launch with no units"),
        pytest.param(L.LAUNCHING, {}, A.ACTIVE, id="launching with no units yet"),
        pytest.param(
            L.LAUNCHING, {S.COMPLETED: 3}, A.ACTIVE, id="launching with every unit finished"
        ),
        pytest.param(
            L.LAUNCH_STATE_UNSPECIFIED, {}, A.ACTIVE, id="unspecified launch treated as launching"
        ),
        pytest.param(
            L.LAUNCH_STATE_UNSPECIFIED,
            {S.FAILED: 1},
            A.ACTIVE,
            id="unspecified launch with every unit finished",
        ),
        pytest.param(L.COMPLETED, {}, A.INACTIVE, id="launched with no units"),
        pytest.param(
            L.COMPLETED,
            {S.COMPLETED: 2, S.FAILED: 1, S.STOPPED: 1},
            A.INACTIVE,
            id="launched and every unit terminal",
        ),
        pytest.param(
            L.COMPLETED, {S.COMPLETED: 2, S.RUNNING: 1}, A.ACTIVE, id="launched and one running"
        ),
        pytest.param(
            L.COMPLETED,
            {S.COMPLETED: 2, S.RUNNING: 0},
            A.INACTIVE,
            id="zero counts of live states do not keep it active",
        ),
        pytest.param(
            L.COMPLETED, {S.STOPPING: 1}, A.ACTIVE, id="STOPPING is not execution-terminal"
        ),
        pytest.param(
            L.COMPLETED,
            {S.SCHEDULING_PAUSED: 1},
            A.ACTIVE,
            id="SCHEDULING_PAUSED is not execution-terminal",
        ),
        pytest.param(L.COMPLETED, {S.INITIALIZING: 1}, A.ACTIVE, id="a unit just created"),
    ],
)
def test_compute_active_state(
    launch_state: LaunchState, counts: Mapping[WorkUnitState, int], expected: ActiveState
) -> None:
    assert compute_active_state(launch_state, counts) == expected
    assert update_experiment_active_state(launch_state, counts) == expected


@pytest.mark.parametrize(
    ("counts", "old", "new", "expected"),
    [
        pytest.param({}, None, S.INITIALIZING, {S.INITIALIZING: 1}, id="first unit created"),
        pytest.param(
            {S.INITIALIZING: 1, S.RUNNING: 2},
            None,
            S.INITIALIZING,
            {S.INITIALIZING: 2, S.RUNNING: 2},
            id="another unit created",
        ),
        pytest.param(
            {S.RUNNING: 2},
            S.RUNNING,
            S.SCHEDULING,
            {S.RUNNING: 1, S.SCHEDULING: 1},
            id="preemption moves one unit",
        ),
        pytest.param(
            {S.SCHEDULING: 1, S.RUNNING: 1},
            S.SCHEDULING,
            S.RUNNING,
            {S.RUNNING: 2},
            id="a state emptied is dropped",
        ),
        pytest.param(
            {S.COMPLETED: 1},
            S.COMPLETED,
            S.RESTARTING,
            {S.RESTARTING: 1},
            id="restart counts as a change",
        ),
        pytest.param(
            {S.RUNNING: 1, S.FAILED: 0},
            S.RUNNING,
            S.STOPPING,
            {S.STOPPING: 1},
            id="stored zero entries are dropped",
        ),
        pytest.param(
            {S.FAILED: 0, S.RUNNING: 2},
            S.RUNNING,
            S.STOPPING,
            {S.RUNNING: 1, S.STOPPING: 1},
            id="stored zero entries are dropped when nothing empties",
        ),
        pytest.param(
            {S.RUNNING: 3, S.SCHEDULING: 1, S.STARTING: 2},
            S.STARTING,
            S.RUNNING,
            {S.RUNNING: 4, S.SCHEDULING: 1, S.STARTING: 1},
            id="nothing to drop: a move within the tally",
        ),
    ],
)
def test_apply_child_state_change(
    counts: dict[WorkUnitState, int],
    old: WorkUnitState | None,
    new: WorkUnitState,
    expected: dict[WorkUnitState, int],
) -> None:
    before = dict(counts)

    result = apply_child_state_change(counts, old, new)
    assert result == expected
    assert list(result) == [k for k in {**counts, new: 0} if k in result], "order is kept"
    assert result is not counts
    assert counts == before


@pytest.mark.parametrize(
    "counts",
    [
        pytest.param({}, id="old state missing"),
        pytest.param({S.RUNNING: 0}, id="old state at zero"),
    ],
)
def test_apply_child_state_change_refuses_underflow(counts: dict[WorkUnitState, int]) -> None:
    with pytest.raises(ValueError, match="RUNNING"):
        apply_child_state_change(counts, S.RUNNING, S.STOPPING)


SYSTEM_ERROR = Message(V.ERROR, "system")
SYSTEM_INFO = Message(V.INFO, "system")
SYSTEM_UNSPECIFIED = Message(V.SEVERITY_UNSPECIFIED, "system")
USER_ERROR = Message(V.ERROR, "user")
USER_WARNING = Message(V.WARNING, "user")
USER_FATAL = Message(V.FATAL, "user")
USER_UNSPECIFIED = Message(V.SEVERITY_UNSPECIFIED, "user")


@pytest.mark.parametrize(
    ("system", "user", "expected"),
    [
        pytest.param(None, None, None, id="no messages"),
        pytest.param(SYSTEM_INFO, None, SYSTEM_INFO, id="only system"),
        pytest.param(None, USER_WARNING, USER_WARNING, id="only user"),
        pytest.param(SYSTEM_INFO, USER_WARNING, USER_WARNING, id="user more severe"),
        pytest.param(SYSTEM_ERROR, USER_WARNING, SYSTEM_ERROR, id="system more severe"),
        pytest.param(SYSTEM_ERROR, USER_ERROR, SYSTEM_ERROR, id="system wins ties"),
        pytest.param(SYSTEM_ERROR, USER_FATAL, USER_FATAL, id="user fatal beats system error"),
        pytest.param(
            SYSTEM_UNSPECIFIED, None, SYSTEM_UNSPECIFIED, id="unspecified severity still counts"
        ),
        pytest.param(None, USER_UNSPECIFIED, USER_UNSPECIFIED, id="unspecified user message"),
        pytest.param(
            SYSTEM_UNSPECIFIED, USER_UNSPECIFIED, SYSTEM_UNSPECIFIED, id="unspecified tie"
        ),
    ],
)
def test_get_best_message_from_status(
    system: Message | None, user: Message | None, expected: Message | None
) -> None:
    assert get_best_message_from_status(system, user) is expected


@pytest.mark.parametrize(
    ("system", "user", "expected"),
    [
        pytest.param(None, None, None, id="no messages"),
        pytest.param(SYSTEM_INFO, USER_WARNING, V.WARNING, id="best of both"),
        pytest.param(SYSTEM_UNSPECIFIED, None, V.SEVERITY_UNSPECIFIED, id="unspecified"),
        pytest.param(Message(40), None, V.ERROR, id="plain int severity"),
    ],
)
def test_best_severity(
    system: Message | None, user: Message | None, expected: Severity | None
) -> None:
    got = best_severity(system, user)

    assert got == expected
    assert got is None or isinstance(got, Severity)


def test_best_severity_rejects_a_severity_outside_the_contract() -> None:
    with pytest.raises(ValueError, match="35"):
        best_severity(Message(35), None)


@pytest.mark.parametrize(
    ("counts", "old", "new", "expected"),
    [
        pytest.param({}, None, V.INFO, {V.INFO: 1}, id="first message of a unit"),
        pytest.param(
            {V.INFO: 2}, V.INFO, V.ERROR, {V.INFO: 1, V.ERROR: 1}, id="best message gets worse"
        ),
        pytest.param({V.ERROR: 1}, V.ERROR, None, {}, id="unit no longer contributes"),
        pytest.param({V.INFO: 1}, None, None, {V.INFO: 1}, id="no message before or after"),
        pytest.param({V.WARNING: 1}, V.WARNING, V.WARNING, {V.WARNING: 1}, id="same severity"),
    ],
)
def test_apply_severity_change(
    counts: dict[Severity, int],
    old: Severity | None,
    new: Severity | None,
    expected: dict[Severity, int],
) -> None:
    assert apply_severity_change(counts, old, new) == expected


def test_apply_severity_change_refuses_underflow() -> None:
    with pytest.raises(ValueError, match="ERROR"):
        apply_severity_change({V.INFO: 1}, V.ERROR, V.INFO)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        pytest.param(A.ACTIVE, A.INACTIVE, True, id="experiment finishes"),
        pytest.param(A.ACTIVE, A.ACTIVE, False, id="still active"),
        pytest.param(A.INACTIVE, A.INACTIVE, False, id="already finished"),
        pytest.param(A.INACTIVE, A.ACTIVE, False, id="reactivated by a restart"),
        pytest.param(A.ACTIVE_STATE_UNSPECIFIED, A.INACTIVE, False, id="never was active"),
    ],
)
def test_should_set_complete_time(old: ActiveState, new: ActiveState, expected: bool) -> None:
    assert should_set_complete_time(old, new) is expected
