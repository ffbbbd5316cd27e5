"""The business metrics' rules (xmc.model.business): which change is a queue wait, which
may be a first start, and which reason a failure is counted under."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from xmc.model.business import (
    FailureReason,
    Transition,
    failure_reason,
    first_start,
    first_start_candidates,
    may_be_first_start,
    queue_wait_seconds,
)
from xmc.model.retries import Failure
from xmc.model.states import WorkUnitState as S

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


def change(old: S, new: S, *, waited: float = 30.0, eid: int = 1) -> Transition:
    return Transition(
        1, 2, eid, old, new, T0, T0 + timedelta(seconds=waited), T0 - timedelta(seconds=5)
    )


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (None, FailureReason.UNKNOWN),
        (Failure(exit_code=1, disrupted=False, cause="container"), FailureReason.EXIT_CODE),
        (Failure(exit_code=137, disrupted=False, cause="container"), FailureReason.KILLED),
        # A disruption wins over the exit code the killed container left behind.
        (Failure(exit_code=137, disrupted=True, cause="pod"), FailureReason.DISRUPTED),
        (Failure(exit_code=None, disrupted=False, cause="startup"), FailureReason.STARTUP),
        (Failure(exit_code=None, disrupted=False, cause="job"), FailureReason.JOB),
        (Failure(exit_code=None, disrupted=False, cause="jobset"), FailureReason.JOB),
        (Failure(exit_code=None, disrupted=False, cause=""), FailureReason.UNKNOWN),
        (Failure(exit_code=None, disrupted=False, cause="what"), FailureReason.UNKNOWN),
    ],
)
def test_failure_reason(failure: Failure | None, reason: FailureReason) -> None:
    assert failure_reason(failure) is reason


@pytest.mark.parametrize(
    ("old", "new", "waited", "expected"),
    [
        (S.SCHEDULING, S.RUNNING, 30.0, 30.0),
        (S.SCHEDULING, S.STARTING, 12.5, 12.5),
        # Not a wait in the queue: never queued, or left the queue without admission.
        (S.INITIALIZING, S.RUNNING, 30.0, None),
        (S.SCHEDULING, S.STOPPED, 30.0, None),
        (S.SCHEDULING, S.FAILED, 30.0, None),
        (S.STARTING, S.RUNNING, 30.0, None),
        (S.RUNNING, S.SCHEDULING, 30.0, None),
        # Stamps out of order (two Reconciler hosts' clocks): never a negative wait.
        (S.SCHEDULING, S.RUNNING, -3.0, 0.0),
    ],
)
def test_queue_wait(old: S, new: S, waited: float, expected: float | None) -> None:
    assert queue_wait_seconds(change(old, new, waited=waited)) == expected


@pytest.mark.parametrize(
    ("old", "new", "candidate"),
    [
        (S.INITIALIZING, S.RUNNING, True),
        (S.SCHEDULING, S.RUNNING, True),
        (S.STARTING, S.RUNNING, True),
        (S.RESTARTING, S.RUNNING, True),
        (S.SCHEDULING_PAUSED, S.RUNNING, True),
        (S.PARTIALLY_FAILED, S.RUNNING, False),
        (S.SCHEDULING, S.STARTING, False),
        (S.RUNNING, S.COMPLETED, False),
    ],
)
def test_first_start_candidates(old: S, new: S, candidate: bool) -> None:
    assert may_be_first_start(change(old, new)) is candidate
    assert first_start_candidates([change(old, new)]) == ([change(old, new)] if candidate else [])


def test_first_start_counts_from_the_execution_create_on_the_ess_clock() -> None:
    applied = T0 + timedelta(seconds=55)
    start = first_start(change(S.SCHEDULING, S.RUNNING), applied)
    assert start.seconds == 60.0
    assert start.execution == "first"
    assert first_start(change(S.RESTARTING, S.RUNNING, eid=3), applied).execution == "restart"
    # An ESS replica whose clock is behind the one that created the execution.
    assert first_start(change(S.SCHEDULING, S.RUNNING), T0 - timedelta(seconds=60)).seconds == 0
