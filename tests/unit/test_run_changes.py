"""Which runs a batch of history rows opens and closes (xmc.model.runs)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from xmc.model.runs import RunChanges, run_changes
from xmc.model.states import WorkUnitState as S

T0 = datetime(2026, 12, 3, tzinfo=UTC)


def t(s: float) -> datetime:
    return T0 + timedelta(seconds=s)


def row(wid: int, old: S, new: S, at: float, eid: int = 1) -> tuple[Any, ...]:
    return (7, wid, eid, int(old), int(new), t(at), "writer", t(at), "p", "r")


@pytest.mark.parametrize(
    ("rows", "closes", "runs"),
    [
        ([], [], []),
        ([row(1, S.SCHEDULING, S.STARTING, 1)], [], []),  # never crosses: nothing to write
        ([row(1, S.RUNNING, S.PARTIALLY_FAILED, 1)], [], []),  # still running
        ([row(1, S.STARTING, S.RUNNING, 1)], [], [(7, 1, 1, t(1), None)]),
        ([row(1, S.RUNNING, S.FAILED, 5)], [(7, 1, t(5))], []),  # a run of an earlier batch
        # Opened and closed in one batch: written closed, the earlier batch's run untouched.
        (
            [row(1, S.STARTING, S.RUNNING, 1), row(1, S.PARTIALLY_FAILED, S.COMPLETED, 9)],
            [],
            [(7, 1, 1, t(1), t(9))],
        ),
        # Closed, then a new run opened (a preemption and readmission in one batch).
        (
            [row(1, S.RUNNING, S.DESCHEDULING, 3), row(1, S.SCHEDULING, S.RUNNING, 8)],
            [(7, 1, t(3))],
            [(7, 1, 1, t(8), None)],
        ),
        # A restart's row of execution 2 closes execution 1's run.
        ([row(1, S.RUNNING, S.RESTARTING, 4, eid=2)], [(7, 1, t(4))], []),
        # An end a skewed clock put before its start is the start.
        (
            [row(1, S.STARTING, S.RUNNING, 10), row(1, S.RUNNING, S.STOPPING, 6)],
            [],
            [(7, 1, 1, t(10), t(10))],
        ),
        # Units apart.
        (
            [row(1, S.STARTING, S.RUNNING, 1), row(2, S.RUNNING, S.FAILED, 2)],
            [(7, 2, t(2))],
            [(7, 1, 1, t(1), None)],
        ),
    ],
)
def test_run_changes(rows: list[tuple[Any, ...]], closes: list[Any], runs: list[Any]) -> None:
    changes = run_changes(rows)
    assert (changes.closes, changes.runs) == (closes, runs)
    assert bool(changes) == bool(closes or runs)
    assert isinstance(changes, RunChanges)
