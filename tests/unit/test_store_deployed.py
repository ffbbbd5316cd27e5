"""The pure rules of ``ListDeployedExecutions`` (``xmc.store.deployed``): which execution
should have a JobSet, and the page token. Tables; the query runs in
tests/integration/test_ess_deployed.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from xmc.errors import InvalidArgumentError
from xmc.model.states import WorkUnitState
from xmc.store.deployed import (
    MAX_PAGE,
    decode_page_token,
    encode_page_token,
    is_deployed,
    page_size,
)

S = WorkUnitState
DONE = datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "tasks", "blocking", "deploy_time", "expected"),
    [
        pytest.param(S.RUNNING, 1, 0, DONE, True, id="created, running"),
        pytest.param(S.SCHEDULING, 2, 0, DONE, True, id="created, then an update done"),
        pytest.param(S.DESCHEDULING, 1, 0, DONE, True, id="descheduling"),
        pytest.param(S.RUNNING, 0, 0, None, True, id="outbox rows expired: the state says"),
        pytest.param(S.RUNNING, 1, 0, None, False, id="create skipped or failed: never made"),
        pytest.param(S.RUNNING, 2, 1, DONE, False, id="a task on its way (stop, update)"),
        pytest.param(S.INITIALIZING, 1, 0, DONE, False, id="initializing: the repair sweep's"),
        pytest.param(S.RESTARTING, 1, 0, DONE, False, id="restarting: the repair sweep's"),
        pytest.param(S.STOPPING, 2, 1, DONE, False, id="stopping"),
        pytest.param(S.SCHEDULING_PAUSED, 1, 1, None, False, id="parked"),
        pytest.param(S.COMPLETED, 1, 0, DONE, False, id="terminal"),
        pytest.param(S.FAILED, 1, 0, DONE, False, id="failed"),
    ],
)
def test_which_executions_should_have_a_jobset(
    state: WorkUnitState, tasks: int, blocking: int, deploy_time: datetime | None, expected: bool
) -> None:
    assert is_deployed(state, tasks=tasks, blocking=blocking, deploy_time=deploy_time) is expected


def test_page_tokens_round_trip_and_strangers_are_refused() -> None:
    assert decode_page_token(encode_page_token((12, 3))) == (12, 3)
    assert decode_page_token("") == (0, 0)
    assert encode_page_token(None) == ""
    for bad in ("x", "1/", "/1", "-1/2", "1/2/3", "1/99999999999999999999", "١/1"):
        with pytest.raises(InvalidArgumentError, match="page_token"):
            decode_page_token(bad)


def test_page_sizes() -> None:
    assert page_size(0) == 1000
    assert page_size(7) == 7
    assert page_size(10**9) == MAX_PAGE
    with pytest.raises(InvalidArgumentError, match="page_size"):
        page_size(-1)
