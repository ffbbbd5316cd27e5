"""The finalizer path judges its terminal write by the ESS's per-item result (SPEC §8.4):
only a write that leaves the execution live is a failure; everything else releases."""

from __future__ import annotations

import pytest

from reconciler.ess_client import TerminalWrite, judge_terminal_write
from xmc.model.states import WorkUnitState
from xmc_api.internal.v1.executions_pb2 import UpdateWorkUnitExecutionResult as Result

S = WorkUnitState


def _result(outcome: int, state: WorkUnitState, rejection: str = "") -> Result:
    return Result(outcome=outcome, state=int(state), state_rejection=rejection)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("result", "want"),
    [
        pytest.param(_result(Result.APPLIED, S.STOPPED), TerminalWrite.LANDED, id="stopped now"),
        pytest.param(
            _result(Result.UNCHANGED, S.COMPLETED, "terminal"),
            TerminalWrite.LANDED,
            id="completed before the stop: terminal all the same",
        ),
        pytest.param(
            _result(Result.UNCHANGED, S.STOPPED, "same_state"),
            TerminalWrite.LANDED,
            id="the Actuator wrote STOPPED first",
        ),
        pytest.param(
            _result(Result.STALE_EXECUTION, S.RESTARTING),
            TerminalWrite.FENCED,
            id="the JobSet of an older execution (restart)",
        ),
        pytest.param(_result(Result.NOT_FOUND, S(0)), TerminalWrite.GONE, id="work unit deleted"),
        pytest.param(
            _result(Result.APPLIED, S.STOPPING, "stale_time"),
            TerminalWrite.REJECTED,
            id="refused as stale: the stop would hang",
        ),
        pytest.param(
            _result(Result.UNCHANGED, S.RUNNING, "transition_not_allowed"),
            TerminalWrite.REJECTED,
            id="refused by the transition table",
        ),
    ],
)
def test_judge_terminal_write(result: Result, want: TerminalWrite) -> None:
    assert judge_terminal_write(result) is want
