"""Backoff schedules, retry decisions and the stoppable sleep (xmc.retry): tables."""

from __future__ import annotations

import asyncio

import pytest

from xmc.retry import (
    Backoffs,
    ErrorClass,
    RetryAction,
    RetryDecision,
    RetryPolicy,
    decide_retry,
    sleep_or_stop,
)

POLICY = RetryPolicy(max_attempts=5, base=1.0, cap=8.0, max_retry_after=60.0)
UNAVAILABLE = ErrorClass("UNAVAILABLE", False)


@pytest.mark.parametrize(
    ("attempt", "jitter", "expected"),
    [
        pytest.param(1, 0.0, 0.5, id="first retry, no jitter: half the base"),
        pytest.param(1, 0.999, 0.9995, id="first retry, full jitter: almost the base"),
        pytest.param(2, 0.5, 1.5, id="second retry doubles"),
        pytest.param(3, 0.0, 2.0, id="third retry"),
        pytest.param(5, 1.0, 8.0, id="capped"),
        pytest.param(500, 0.0, 4.0, id="huge attempt stays capped"),
    ],
)
def test_backoff(attempt: int, jitter: float, expected: float) -> None:
    assert POLICY.backoff(attempt, lambda: jitter) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("error", "attempt", "expected"),
    [
        pytest.param(
            ErrorClass("NOT_FOUND", True),
            1,
            RetryDecision(RetryAction.GIVE_UP_PERMANENT, 0.0, "NOT_FOUND is permanent"),
            id="permanent: never retried",
        ),
        pytest.param(
            UNAVAILABLE,
            1,
            RetryDecision(RetryAction.RETRY, 0.5, "UNAVAILABLE: attempt #1/5 failed; will retry"),
            id="first transient failure",
        ),
        pytest.param(
            UNAVAILABLE,
            4,
            RetryDecision(RetryAction.RETRY, 4.0, "UNAVAILABLE: attempt #4/5 failed; will retry"),
            id="last retry",
        ),
        pytest.param(
            UNAVAILABLE,
            5,
            RetryDecision(
                RetryAction.GIVE_UP_EXHAUSTED, 0.0, "UNAVAILABLE: attempt #5/5 failed; giving up"
            ),
            id="attempts exhausted",
        ),
        pytest.param(
            ErrorClass("UNAVAILABLE", False, 30.0),
            1,
            RetryDecision(RetryAction.RETRY, 30.0, "UNAVAILABLE: attempt #1/5 failed; will retry"),
            id="retry-after longer than the backoff is honoured",
        ),
        pytest.param(
            ErrorClass("UNAVAILABLE", False, 0.1),
            3,
            RetryDecision(RetryAction.RETRY, 2.0, "UNAVAILABLE: attempt #3/5 failed; will retry"),
            id="retry-after shorter than the backoff is a floor only",
        ),
        pytest.param(
            ErrorClass("UNAVAILABLE", False, 3600.0),
            1,
            RetryDecision(RetryAction.RETRY, 60.0, "UNAVAILABLE: attempt #1/5 failed; will retry"),
            id="retry-after is bounded",
        ),
    ],
)
def test_decide_retry(error: ErrorClass, attempt: int, expected: RetryDecision) -> None:
    assert decide_retry(error, attempt, policy=POLICY, jitter=lambda: 0.0) == expected


SCHEDULE = Backoffs((0.2, 0.5, 1.0))


@pytest.mark.parametrize(
    ("failures", "forever", "bounded"),
    [
        pytest.param(1, 0.2, 0.2, id="first failure: first delay"),
        pytest.param(2, 0.5, 0.5, id="second failure"),
        pytest.param(3, 1.0, 1.0, id="last delay"),
        pytest.param(4, 1.0, None, id="past the end: repeats, or gives up"),
        pytest.param(40, 1.0, None, id="far past the end"),
        pytest.param(0, 0.2, 0.2, id="no failure yet reads as the first"),
    ],
)
def test_backoffs(failures: int, forever: float, bounded: float | None) -> None:
    assert (SCHEDULE.after(failures), SCHEDULE.within(failures)) == (forever, bounded)


@pytest.mark.parametrize(
    "delays",
    [pytest.param((), id="empty"), pytest.param((1.0, -0.5), id="negative delay")],
)
def test_a_bad_schedule_is_refused(delays: tuple[float, ...]) -> None:
    with pytest.raises(ValueError, match="backoff schedule"):
        Backoffs(delays)


async def test_sleep_or_stop_waits_the_delay_out() -> None:
    delays: list[float] = []

    async def sleep(seconds: float) -> None:
        delays.append(seconds)

    assert await sleep_or_stop(asyncio.Event(), 5.0, sleep=sleep) is False
    assert delays == [5.0]


async def test_sleep_or_stop_wakes_on_stop() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, stop.set)
    assert await asyncio.wait_for(sleep_or_stop(stop, 3600.0), timeout=5) is True


async def test_sleep_or_stop_returns_at_once_when_already_stopped() -> None:
    stop = asyncio.Event()
    stop.set()
    assert await sleep_or_stop(stop, 3600.0) is True


async def test_sleep_or_stop_wakes_on_wake_without_stopping() -> None:
    wake = asyncio.Event()
    asyncio.get_running_loop().call_later(0.01, wake.set)
    stopped = await asyncio.wait_for(sleep_or_stop(asyncio.Event(), 3600.0, wake=wake), 5)
    assert stopped is False
