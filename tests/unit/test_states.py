"""The state enums carry the contract's numbers, and the state sets are the SPEC's (§3.1)."""

import enum

import pytest

from xmc.model.states import (
    CLUSTER_OBSERVED_STATES,
    EXECUTION_TERMINAL_STATES,
    WORK_UNIT_STATUS_RETAINING_STATES,
    WORK_UNIT_TIME_IGNORED_STATES,
    ActiveState,
    LaunchState,
    Severity,
    WorkUnitState,
)

S = WorkUnitState


@pytest.mark.parametrize(
    ("enum_type", "expected"),
    [
        pytest.param(
            WorkUnitState,
            {
                "WORK_UNIT_STATE_UNSPECIFIED": 0,
                "INITIALIZING": 1,
                "SCHEDULING": 2,
                "STARTING": 3,
                "RUNNING": 4,
                "PARTIALLY_FAILED": 5,
                "STOPPING": 6,
                "RESTARTING": 7,
                "STOPPED": 8,
                "DESCHEDULING": 9,
                "COMPLETED": 10,
                "FAILED": 11,
                "SCHEDULING_PAUSED": 12,
            },
            id="work unit state",
        ),
        pytest.param(
            Severity,
            {
                "SEVERITY_UNSPECIFIED": 0,
                "DEBUG": 10,
                "INFO": 20,
                "WARNING": 30,
                "ERROR": 40,
                "FATAL": 50,
            },
            id="severity",
        ),
        pytest.param(
            LaunchState,
            {"LAUNCH_STATE_UNSPECIFIED": 0, "LAUNCHING": 1, "COMPLETED": 2, "FAILED": 3},
            id="launch state",
        ),
        pytest.param(
            ActiveState,
            {"ACTIVE_STATE_UNSPECIFIED": 0, "ACTIVE": 1, "INACTIVE": 2},
            id="active state",
        ),
    ],
)
def test_enum_names_and_numbers_match_the_contract(
    enum_type: type[enum.IntEnum], expected: dict[str, int]
) -> None:
    assert {member.name: member.value for member in enum_type} == expected


@pytest.mark.parametrize(
    ("actual", "expected"),
    [
        pytest.param(
            EXECUTION_TERMINAL_STATES, {S.STOPPED, S.COMPLETED, S.FAILED}, id="execution terminal"
        ),
        pytest.param(
            CLUSTER_OBSERVED_STATES,
            {S.SCHEDULING, S.DESCHEDULING, S.STARTING, S.RUNNING, S.PARTIALLY_FAILED},
            id="cluster observed",
        ),
        pytest.param(
            WORK_UNIT_STATUS_RETAINING_STATES, {S.STOPPED, S.FAILED}, id="status retaining"
        ),
        pytest.param(WORK_UNIT_TIME_IGNORED_STATES, {S.STOPPING}, id="time ignored"),
    ],
)
def test_state_sets(actual: frozenset[WorkUnitState], expected: set[WorkUnitState]) -> None:
    assert isinstance(actual, frozenset)
    assert actual == expected


def test_no_cluster_observed_state_is_terminal() -> None:
    assert not CLUSTER_OBSERVED_STATES & EXECUTION_TERMINAL_STATES


def test_retaining_states_are_terminal() -> None:
    assert WORK_UNIT_STATUS_RETAINING_STATES <= EXECUTION_TERMINAL_STATES


def test_severities_order_from_debug_to_fatal() -> None:
    assert Severity.DEBUG < Severity.INFO < Severity.WARNING < Severity.ERROR < Severity.FATAL
