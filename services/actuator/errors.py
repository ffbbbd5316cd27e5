"""Kubernetes API errors, classified once at the Actuator's boundary (SPEC §6).

Every handler asks :func:`classify_kubernetes_error` what a failed call means, and
:func:`decide_retry` what to do about it, so "permanent → DLQ" and "transient → retry with
backoff" are decided in exactly one place. The gRPC code names match what the Actuator
writes into the Operation's ``error``.

Permanent: 400/422 ``INVALID_ARGUMENT``, 401 ``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``,
404 ``NOT_FOUND``, 409 ``FAILED_PRECONDITION`` (a UID or resourceVersion precondition) or
``ALREADY_EXISTS`` (the Create handler verifies the duplicate), any other 4xx
``INVALID_ARGUMENT`` (the request itself is wrong). Transient: no response at all
(connection loss, timeout), 408 ``DEADLINE_EXCEEDED``, 410 ``ABORTED`` (expired
resourceVersion: re-read), 429 and 5xx ``UNAVAILABLE``, and anything unexpected
(``UNKNOWN``), which bounded retries end anyway.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

#: The Kubernetes ``Status.reason`` that tells a name clash from a failed precondition.
REASON_ALREADY_EXISTS: Final = "AlreadyExists"


@dataclass(frozen=True)
class ErrorClass:
    """``code`` is a gRPC status code name; ``retry_after`` (seconds) only when transient."""

    code: str
    permanent: bool
    retry_after: float | None = None


_PERMANENT_BY_STATUS: Final = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "FAILED_PRECONDITION",
    422: "INVALID_ARGUMENT",
}
_TRANSIENT_BY_STATUS: Final = {
    408: "DEADLINE_EXCEEDED",
    410: "ABORTED",
    429: "UNAVAILABLE",
}


def classify_kubernetes_error(
    status: int | None, reason: str | None = None, *, retry_after: float | None = None
) -> ErrorClass:
    """Classify a failed Kubernetes call; ``status`` None (or 0) means no HTTP response.

    ``reason`` is the ``Status.reason`` of the response body; ``retry_after`` the parsed
    ``Retry-After`` header (see :func:`parse_retry_after`).
    """
    if status == 409 and reason == REASON_ALREADY_EXISTS:
        return ErrorClass("ALREADY_EXISTS", permanent=True)
    if status in _PERMANENT_BY_STATUS:
        return ErrorClass(_PERMANENT_BY_STATUS[status], permanent=True)
    if not status:
        return ErrorClass("UNAVAILABLE", permanent=False, retry_after=retry_after)
    if status in _TRANSIENT_BY_STATUS:
        return ErrorClass(_TRANSIENT_BY_STATUS[status], permanent=False, retry_after=retry_after)
    if 500 <= status < 600:
        return ErrorClass("UNAVAILABLE", permanent=False, retry_after=retry_after)
    if 400 <= status < 500:
        return ErrorClass("INVALID_ARGUMENT", permanent=True)
    return ErrorClass("UNKNOWN", permanent=False, retry_after=retry_after)


def parse_retry_after(header: str | None) -> float | None:
    """The ``Retry-After`` header in seconds; the API server only ever sends seconds, so
    an HTTP date (or garbage) is ignored rather than guessed at."""
    if header is None:
        return None
    try:
        seconds = float(header.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


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
