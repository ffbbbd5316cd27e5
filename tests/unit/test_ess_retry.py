"""Table tests of XMC's client rule (``xmc.ess_retry``) and of the rolling bench's order."""

from __future__ import annotations

import json
from pathlib import Path

import grpc
import pytest
from bench.rolling_restart import roll_order

from xmc.ess_retry import NOT_IDEMPOTENT, RETRY, RetryRule

C = grpc.StatusCode


@pytest.mark.parametrize(
    ("code", "attempt", "ceiling"),
    [
        pytest.param(C.UNAVAILABLE, 1, 0.2, id="first retry: below the initial backoff"),
        pytest.param(C.CANCELLED, 2, 0.4, id="a server's CANCELLED: retried the same way"),
        pytest.param(C.UNAVAILABLE, 4, 1.6, id="exponential"),
        pytest.param(C.UNAVAILABLE, 5, None, id="five attempts in all: give up"),
        pytest.param(C.INVALID_ARGUMENT, 1, None, id="a verdict on the request: never"),
        pytest.param(C.DEADLINE_EXCEEDED, 1, None, id="the caller's own deadline: never"),
    ],
)
def test_the_delay_before_each_retry(
    code: grpc.StatusCode, attempt: int, ceiling: float | None
) -> None:
    assert RETRY.delay(code, attempt, jitter=lambda: 1.0) == ceiling
    if ceiling is not None:
        assert RETRY.delay(code, attempt, jitter=lambda: 0.0) == 0.0


def test_the_backoff_is_capped() -> None:
    rule = RetryRule(max_attempts=10)
    assert rule.delay(C.UNAVAILABLE, 9, jitter=lambda: 1.0) == rule.max_backoff


def test_the_service_config_retries_every_method_but_those_that_make_something_new() -> None:
    config = json.loads(RETRY.service_config())
    every, once = config["methodConfig"]
    assert every["name"] == [{}]
    assert every["retryPolicy"]["retryableStatusCodes"] == ["CANCELLED", "UNAVAILABLE"]
    assert every["retryPolicy"]["maxAttempts"] == RETRY.max_attempts
    assert "retryPolicy" not in once
    names = {(n["service"], n["method"]) for n in once["name"]}
    assert names == set(NOT_IDEMPOTENT)
    assert ("cloud.xmanager.v1.ExperimentStateService", "CreateWorkUnit") in names


@pytest.mark.parametrize(
    ("leader", "order"),
    [
        pytest.param(
            "reconciler",
            ["ess", "ess-2", "actuator", "actuator-2", "reconciler-2", "reconciler"],
            id="the leader last",
        ),
        pytest.param(
            "reconciler-2",
            ["ess", "ess-2", "actuator", "actuator-2", "reconciler", "reconciler-2"],
            id="whichever leads",
        ),
    ],
)
def test_the_roll_restarts_every_process_once_and_the_leading_reconciler_last(
    leader: str, order: list[str]
) -> None:
    names = ["kubesim", "ess", "ess-2", "actuator", "actuator-2", "reconciler", "reconciler-2"]
    assert roll_order(names, leader) == order


def test_the_documented_service_config_is_the_one_the_clients_use() -> None:
    text = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    section = text.split("## High availability: rolling restarts", 1)[1]
    block = section.split("```json\n", 1)[1].split("```", 1)[0]
    assert json.loads(block) == json.loads(RETRY.service_config())
