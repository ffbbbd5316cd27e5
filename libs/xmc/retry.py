"""Backoff: the one mechanism every retrying loop of XMC uses (STYLE §7).

Each loop keeps a policy of its own (its numbers are part of its contract), but they are
all one of two shapes, decided in pure code and waited out the same way:

* :class:`Backoffs`, a fixed schedule whose last delay repeats (watches, the finalizer,
  the relay, the Reconciler's send retry);
* :class:`RetryPolicy`, bounded exponential backoff with "equal jitter" and a server's
  ``Retry-After`` honoured up to a cap, for work whose attempts are counted
  (:func:`decide_retry`, the Actuator's tasks).

:func:`sleep_or_stop` waits a delay out but wakes the moment the loop is told to stop,
so no shutdown waits for a backoff to end.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True)
class Backoffs:
    """Seconds to wait after 1, 2, … consecutive failures."""

    delays: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.delays or any(delay < 0 for delay in self.delays):
            raise ValueError("a backoff schedule needs at least one delay, none negative")

    def after(self, failures: int) -> float:
        """The delay after the ``failures``-th consecutive failure (1-based), for a loop
        that retries forever: past the end the last delay repeats."""
        return self.delays[min(max(failures, 1), len(self.delays)) - 1]

    def within(self, failures: int) -> float | None:
        """The same for bounded retries: None past the end (give up)."""
        return None if failures > len(self.delays) else self.after(failures)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter for transient failures."""

    max_attempts: int = 8
    """Attempts in total, the first included; past it the work is given up."""
    base: float = 0.5
    """Seconds before the first retry (before jitter)."""
    cap: float = 30.0
    """Upper bound of the exponential delay, seconds."""
    max_retry_after: float = 300.0
    """A server's ``Retry-After`` is honoured up to this many seconds."""

    def backoff(self, attempt: int, jitter: Callable[[], float]) -> float:
        """Delay after failed attempt ``attempt`` (1-based): "equal jitter", half fixed and
        half random, so concurrent workers spread out yet never retry at once.

        ``jitter`` returns a float in [0, 1); tests inject a constant.
        """
        exponential = min(self.cap, self.base * 2.0 ** min(attempt - 1, 63))
        return exponential / 2 + exponential / 2 * jitter()


@dataclass(frozen=True)
class ErrorClass:
    """What :func:`decide_retry` needs of a failed attempt: its gRPC status code name,
    whether it can never succeed, and ``retry_after`` (the server's, seconds) when
    transient."""

    code: str
    permanent: bool
    retry_after: float | None = None


class RetryAction(enum.StrEnum):
    """Low-cardinality outcome of a failed attempt, fit for a metric label."""

    RETRY = "retry"
    GIVE_UP_PERMANENT = "give_up_permanent"
    GIVE_UP_EXHAUSTED = "give_up_exhausted"


@dataclass(frozen=True)
class RetryDecision:
    action: RetryAction
    delay: float
    reason: str


def decide_retry(
    error: ErrorClass, attempt: int, *, policy: RetryPolicy, jitter: Callable[[], float]
) -> RetryDecision:
    """Whether (and after how long) to retry after failed attempt ``attempt`` (1-based)."""
    if error.permanent:
        return RetryDecision(RetryAction.GIVE_UP_PERMANENT, 0.0, f"{error.code} is permanent")
    if attempt >= policy.max_attempts:
        return RetryDecision(
            RetryAction.GIVE_UP_EXHAUSTED,
            0.0,
            f"{error.code}: attempt #{attempt}/{policy.max_attempts} failed; giving up",
        )
    delay = policy.backoff(attempt, jitter)
    if error.retry_after is not None:
        delay = max(delay, min(error.retry_after, policy.max_retry_after))
    return RetryDecision(
        RetryAction.RETRY,
        delay,
        f"{error.code}: attempt #{attempt}/{policy.max_attempts} failed; will retry",
    )


async def sleep_or_stop(
    stop: asyncio.Event,
    seconds: float,
    *,
    wake: asyncio.Event | None = None,
    sleep: Sleep | None = None,
) -> bool:
    """Wait ``seconds``, or less if ``stop`` (or ``wake``) is set meanwhile; True when
    ``stop`` is set, so a loop reads ``if await sleep_or_stop(...): return``.

    ``sleep`` is the timer (tests inject one that records the delays); by default
    ``asyncio.sleep``, looked up at call time so a test may patch it.
    """
    if stop.is_set():
        return True
    timer = asyncio.ensure_future((sleep or asyncio.sleep)(seconds))
    waiters = [asyncio.ensure_future(stop.wait())]
    if wake is not None:
        waiters.append(asyncio.ensure_future(wake.wait()))
    try:
        await asyncio.wait([timer, *waiters], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in (timer, *waiters):
            waiter.cancel()
        await asyncio.gather(timer, *waiters, return_exceptions=True)
    return stop.is_set()
