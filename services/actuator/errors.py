"""Kubernetes API errors, classified once at the Actuator's boundary (SPEC §6).

The shared client classifies every failed call once (``xmc.kube.KubeFailure``); here
:func:`classify_kubernetes_error` maps that value to what the Actuator does about it, and
:func:`decide_retry` decides when, so "permanent → DLQ" and "transient → retry with
backoff" are decided in exactly one place. The gRPC code names match what the Actuator
writes into the Operation's ``error``.

Permanent: INVALID (400/422) and any other 4xx ``INVALID_ARGUMENT`` (the request itself
is wrong), UNAUTHORIZED ``UNAUTHENTICATED``, FORBIDDEN ``PERMISSION_DENIED``, NOT_FOUND,
CONFLICT ``FAILED_PRECONDITION`` (a UID or resourceVersion precondition), ALREADY_EXISTS
(the Create handler verifies the duplicate). Transient: NO_RESPONSE (connection loss,
timeout) and THROTTLED and SERVER ``UNAVAILABLE``, TIMEOUT (408) ``DEADLINE_EXCEEDED``,
EXPIRED (410) ``ABORTED`` (re-read), and anything unexpected ``UNKNOWN``, which bounded
retries end anyway.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from xmc.kube import KubeError, KubeFailure


@dataclass(frozen=True)
class ErrorClass:
    """``code`` is a gRPC status code name; ``retry_after`` (seconds) only when transient."""

    code: str
    permanent: bool
    retry_after: float | None = None


_F = KubeFailure
#: (gRPC code, permanent) per failure; a test checks every failure has a row.
ERROR_CLASSES: Final[Mapping[KubeFailure, tuple[str, bool]]] = {
    _F.NO_RESPONSE: ("UNAVAILABLE", False),
    _F.NOT_FOUND: ("NOT_FOUND", True),
    _F.CONFLICT: ("FAILED_PRECONDITION", True),
    _F.ALREADY_EXISTS: ("ALREADY_EXISTS", True),
    _F.EXPIRED: ("ABORTED", False),
    _F.INVALID: ("INVALID_ARGUMENT", True),
    _F.UNAUTHORIZED: ("UNAUTHENTICATED", True),
    _F.FORBIDDEN: ("PERMISSION_DENIED", True),
    _F.TIMEOUT: ("DEADLINE_EXCEEDED", False),
    _F.THROTTLED: ("UNAVAILABLE", False),
    _F.SERVER: ("UNAVAILABLE", False),
    _F.CLIENT: ("INVALID_ARGUMENT", True),
    _F.UNEXPECTED: ("UNKNOWN", False),
}


def classify_kubernetes_error(
    failure: KubeFailure, *, retry_after: float | None = None
) -> ErrorClass:
    """What a failed call means to the Actuator; ``retry_after`` (the server's, seconds)
    is kept only for a transient failure."""
    code, permanent = ERROR_CLASSES[failure]
    return ErrorClass(code, permanent, None if permanent else retry_after)


def classify(error: KubeError) -> ErrorClass:
    return classify_kubernetes_error(error.failure, retry_after=error.retry_after)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter for transient Kubernetes errors."""

    max_attempts: int = 8
    """Attempts in total, the first included; past it the task goes to the DLQ."""
    base: float = 0.5
    """Seconds before the first retry (before jitter)."""
    cap: float = 30.0
    """Upper bound of the exponential delay, seconds."""
    max_retry_after: float = 300.0
    """A server's ``Retry-After`` is honoured up to this many seconds."""

    def backoff(self, attempt: int, jitter: Callable[[], float]) -> float:
        """Delay after failed attempt ``attempt`` (1-based): "equal jitter", half fixed and
        half random, so concurrent consumers spread out yet never retry at once.

        ``jitter`` returns a float in [0, 1); tests inject a constant.
        """
        exponential = min(self.cap, self.base * 2.0 ** min(attempt - 1, 63))
        return exponential / 2 + exponential / 2 * jitter()


class RetryAction(enum.StrEnum):
    """Low-cardinality outcome of a failed call, fit for a metric label."""

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
