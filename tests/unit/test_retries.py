"""The retry decision (xmc.model.retries), one row per rule of its docstring."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from xmc.model.retries import (
    MAX_DISRUPTION_RETRIES,
    Attempt,
    Failure,
    RetryDecision,
    Verdict,
    decide_retry,
    final_text,
    retry_text,
    take_slot,
)
from xmc.model.retry_policy import RetryPolicy

POLICY = RetryPolicy(
    max_attempts=3, on_exit_codes=frozenset({1, 137}), never_on_exit_codes=frozenset({2})
)
ANY = RetryPolicy(max_attempts=3)
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("policy", "attempt", "failure", "verdict", "next_attempt", "counted"),
    [
        (POLICY, Attempt(1), Failure(137), Verdict.RETRY, Attempt(2), True),
        (POLICY, Attempt(2), Failure(1), Verdict.RETRY, Attempt(3), True),
        (POLICY, Attempt(3), Failure(1), Verdict.EXHAUSTED, None, False),
        (POLICY, Attempt(1), Failure(2), Verdict.NEVER, None, False),
        (POLICY, Attempt(1), Failure(3), Verdict.NOT_MATCHED, None, False),
        (POLICY, Attempt(1), Failure(None, cause="job"), Verdict.NOT_MATCHED, None, False),
        (ANY, Attempt(1), Failure(None, cause="job"), Verdict.RETRY, Attempt(2), True),
        (ANY, Attempt(1), Failure(3), Verdict.RETRY, Attempt(2), True),
        (RetryPolicy(), Attempt(1), Failure(1), Verdict.EXHAUSTED, None, False),
        # never wins over on_exit_codes
        (
            RetryPolicy(3, frozenset({2}), frozenset({2})),
            Attempt(1),
            Failure(2),
            Verdict.NEVER,
            None,
            False,
        ),
        # a disruption spends no attempt, even on the last one, even for a code never retried
        (POLICY, Attempt(3), Failure(137, disrupted=True), Verdict.RETRY, Attempt(3, 1), False),
        (POLICY, Attempt(1), Failure(2, disrupted=True), Verdict.RETRY, Attempt(1, 1), False),
        (RetryPolicy(), Attempt(1), Failure(None, True), Verdict.RETRY, Attempt(1, 1), False),
        (
            POLICY,
            Attempt(2, MAX_DISRUPTION_RETRIES),
            Failure(None, disrupted=True),
            Verdict.DISRUPTIONS,
            None,
            False,
        ),
    ],
)
def test_decide_retry(
    policy: RetryPolicy,
    attempt: Attempt,
    failure: Failure,
    verdict: Verdict,
    next_attempt: Attempt | None,
    counted: bool,
) -> None:
    decision = decide_retry(policy, attempt, failure)
    assert (decision.verdict, decision.next, decision.counted) == (verdict, next_attempt, counted)
    assert decision.retry is (verdict is Verdict.RETRY)


@pytest.mark.parametrize(
    ("next_free", "due", "start", "after"),
    [
        (None, NOW, NOW, NOW + timedelta(seconds=1)),
        (NOW - timedelta(hours=1), NOW, NOW, NOW + timedelta(seconds=1)),
        (NOW + timedelta(seconds=5), NOW, NOW + timedelta(seconds=5), NOW + timedelta(seconds=6)),
        (
            NOW,
            NOW + timedelta(seconds=30),
            NOW + timedelta(seconds=30),
            NOW + timedelta(seconds=31),
        ),
    ],
)
def test_take_slot_spaces_retries_at_the_cap(
    next_free: datetime | None, due: datetime, start: datetime, after: datetime
) -> None:
    assert take_slot(next_free, due, per_minute=60) == (start, after)


def test_a_burst_is_spread_at_the_cap() -> None:
    next_free = None
    starts = []
    for _ in range(5):
        start, next_free = take_slot(next_free, NOW, per_minute=6)
        starts.append((start - NOW).total_seconds())
    assert starts == [0, 10, 20, 30, 40]


@pytest.mark.parametrize(
    ("decision", "due", "want"),
    [
        (
            RetryDecision(Verdict.RETRY, "exit code 137", Attempt(2), counted=True),
            NOW,
            "attempt 2 of 3, retried after exit code 137",
        ),
        (
            RetryDecision(Verdict.RETRY, "exit code 1", Attempt(3), counted=True),
            NOW + timedelta(seconds=30),
            "attempt 3 of 3, retried after exit code 1; starts at 12:00:30 UTC",
        ),
        (
            RetryDecision(Verdict.RETRY, "a disruption", Attempt(2, 1), counted=False),
            NOW,
            "attempt 2 of 3 again, retried after a disruption (a disruption spends no attempt)",
        ),
    ],
)
def test_retry_text(decision: RetryDecision, due: datetime, want: str) -> None:
    assert retry_text(decision, 3, due=due, now=NOW) == want


def test_final_text_says_why_not() -> None:
    decision = decide_retry(POLICY, Attempt(3), Failure(137))
    assert final_text(decision, Attempt(3), 3) == (
        "attempt 3 of 3: not retried (exit code 137; no attempts left)"
    )
