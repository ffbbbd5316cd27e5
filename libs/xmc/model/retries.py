"""Whether a failed execution is retried, and what it says (issue 28, docs/retries.md).

Pure: the ESS calls :func:`decide_retry` in the transaction that records the FAILED state,
with the unit's policy (``xmc.model.retry_policy``), where the failed execution stood in
its chain of retries (:class:`Attempt`) and what the Reconciler knew of the failure
(:class:`Failure`). Every case is a row of a table test.

The rules, in order:

1. No policy: never retried (retries are asked for, not assumed).
2. No facts: the FAILED state was XMC's own decision (a manifest the API server refused,
   a task that could not be delivered, a JobSet that vanished), not a run that failed on
   the cluster; retrying it would fail the same way, so it is not.
3. A disruption (a pod of the failed Job has ``DisruptionTarget``: preempted, evicted, its
   node gone) is retried without spending an attempt, at most
   :data:`MAX_DISRUPTION_RETRIES` times in one chain, so a unit that keeps getting its
   node killed cannot loop for ever.
4. An exit code in ``never_on_exit_codes`` is never retried.
5. With ``on_exit_codes``, only those codes are (an unknown code is not one of them).
6. The last attempt is not retried.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from xmc.model.retry_policy import RetryPolicy

#: Disruption retries (which spend no attempt) one chain may take.
MAX_DISRUPTION_RETRIES: Final = 10
#: The cluster's cap on retries per minute, unless configured (XMC_RETRIES_PER_MINUTE).
DEFAULT_PER_MINUTE: Final = 60
MAX_PER_MINUTE: Final = 60_000


class Verdict(enum.StrEnum):
    RETRY = "retry"
    #: The exit code (or its absence) is not in ``on_exit_codes``.
    NOT_MATCHED = "not_matched"
    #: The exit code is in ``never_on_exit_codes``.
    NEVER = "never"
    #: The failed execution was the last attempt.
    EXHAUSTED = "exhausted"
    #: A disruption past :data:`MAX_DISRUPTION_RETRIES`.
    DISRUPTIONS = "disruptions"


@dataclass(frozen=True)
class Failure:
    """What the Reconciler knew of a run's failure (``internal.v1.RunFailure``)."""

    exit_code: int | None = None
    disrupted: bool = False
    cause: str = ""


@dataclass(frozen=True)
class Attempt:
    """Where an execution stands in its unit's chain of retries. A created or manually
    restarted execution starts a chain: a user's restart is a fresh budget."""

    number: int = 1
    #: Disruption retries taken so far in the chain.
    disruptions: int = 0


FIRST_ATTEMPT: Final = Attempt()


@dataclass(frozen=True)
class RetryDecision:
    verdict: Verdict
    #: One sentence, e.g. "exit code 137", "exit code 2 is never retried".
    reason: str
    #: For a retry, the new execution's place in the chain.
    next: Attempt | None = None
    #: For a retry, whether it spent an attempt (a disruption's does not).
    counted: bool = False

    @property
    def retry(self) -> bool:
        return self.verdict is Verdict.RETRY


def _cause(failure: Failure) -> str:
    if failure.disrupted:
        return "a disruption (preemption, eviction or a lost node)"
    if failure.exit_code is not None:
        return f"exit code {failure.exit_code}"
    return f"a failure with no exit code ({failure.cause or 'unknown cause'})"


def decide_retry(policy: RetryPolicy, attempt: Attempt, failure: Failure) -> RetryDecision:
    """The verdict on one failed execution (rules 3–6 of the module docstring; the caller
    applies 1 and 2: no policy or no facts, no decision at all)."""
    cause = _cause(failure)
    if failure.disrupted:
        if attempt.disruptions >= MAX_DISRUPTION_RETRIES:
            return RetryDecision(
                Verdict.DISRUPTIONS,
                f"{cause}, after {MAX_DISRUPTION_RETRIES} disruption retries already",
            )
        return RetryDecision(
            Verdict.RETRY, cause, Attempt(attempt.number, attempt.disruptions + 1), counted=False
        )
    code = failure.exit_code
    if code is not None and code in policy.never_on_exit_codes:
        return RetryDecision(Verdict.NEVER, f"exit code {code} is never retried")
    if policy.on_exit_codes is not None and (code is None or code not in policy.on_exit_codes):
        return RetryDecision(Verdict.NOT_MATCHED, f"{cause} is not in on_exit_codes")
    if attempt.number >= policy.max_attempts:
        return RetryDecision(Verdict.EXHAUSTED, f"{cause}; no attempts left")
    return RetryDecision(
        Verdict.RETRY, cause, Attempt(attempt.number + 1, attempt.disruptions), counted=True
    )


def take_slot(
    next_free: datetime | None, due: datetime, per_minute: int
) -> tuple[datetime, datetime]:
    """The start time of a retry wanted at ``due`` under a cap of ``per_minute`` retries
    per minute, and the next free slot after it: retries are spaced ``60 / per_minute``
    seconds apart, so a sweep failing all at once is retried at the cap's pace."""
    start = due if next_free is None or next_free <= due else next_free
    return start, start + timedelta(seconds=60 / per_minute)


def _clock(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%H:%M:%S UTC")


def retry_text(decision: RetryDecision, max_attempts: int, *, due: datetime, now: datetime) -> str:
    """The new execution's message: "attempt 2 of 3, retried after exit code 137"."""
    assert decision.next is not None
    text = f"attempt {decision.next.number} of {max_attempts}"
    if not decision.counted:
        text += " again"
    text += f", retried after {decision.reason}"
    if not decision.counted:
        text += " (a disruption spends no attempt)"
    if due > now:
        text += f"; starts at {_clock(due)}"
    return text


def final_text(decision: RetryDecision, attempt: Attempt, max_attempts: int) -> str:
    """Why a failed execution was not retried: "attempt 3 of 3: not retried (…)"."""
    return f"attempt {attempt.number} of {max_attempts}: not retried ({decision.reason})"
