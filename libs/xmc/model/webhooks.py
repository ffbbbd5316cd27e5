"""Delivering a webhook (pure): its signature, what an attempt's answer means, when the
next attempt is, and which URLs are accepted (docs/notifications.md, decision 0044)."""

from __future__ import annotations

import enum
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from xmc.errors import InvalidArgumentError

SIGNATURE_HEADER = "X-XMC-Signature"
TIMESTAMP_HEADER = "X-XMC-Timestamp"
DELIVERY_HEADER = "X-XMC-Delivery"
EVENT_HEADER = "X-XMC-Event"
MAX_URL_LENGTH = 2048
MIN_SECRET_LENGTH = 16
MAX_SECRET_LENGTH = 256
#: How much of a receiver's answer the delivery log keeps.
RESPONSE_SNIPPET_BYTES = 512


@dataclass(frozen=True)
class WebhookSettings:
    """The delivery worker's numbers; tests shorten them."""

    poll_seconds: float = 1.0
    """Seconds between looks for due deliveries (other replicas' rows, retries due)."""
    timeout_seconds: float = 10.0
    """One attempt's limit, connect to last byte: a receiver that never answers is cut off."""
    concurrency: int = 16
    """Attempts in flight at once, so a slow receiver holds one slot, not the worker."""
    base_seconds: float = 10.0
    """Delay before the first retry (before jitter); doubles each attempt."""
    cap_seconds: float = 7200.0
    """Longest delay between two attempts."""
    max_attempts: int = 20
    """Attempts in all (with the defaults the last comes 15 to 21 h after the first)."""
    max_age: timedelta = timedelta(hours=24)
    """No attempt starts later than this after the event: the delivery is given up."""

    lease_seconds: float | None = None
    """How far a claim pushes a row's next attempt (None: ``2 × timeout + 5``). Longer than
    an attempt can last, so no other worker starts it while this one may still be
    sending; a worker that dies mid-attempt leaves it due again after this."""

    def __post_init__(self) -> None:
        if self.timeout_seconds <= 0 or self.concurrency < 1 or self.max_attempts < 1:
            raise ValueError("need timeout_seconds > 0, concurrency >= 1, max_attempts >= 1")
        if self.lease_seconds is not None and self.lease_seconds <= self.timeout_seconds:
            raise ValueError("lease_seconds must be longer than timeout_seconds")

    @property
    def lease(self) -> timedelta:
        seconds = self.lease_seconds
        return timedelta(seconds=2 * self.timeout_seconds + 5 if seconds is None else seconds)


def signature(secret: str, timestamp: int, body: bytes) -> str:
    """``X-XMC-Signature``: ``sha256=`` + hex HMAC-SHA256 of ``"{timestamp}." + body``
    with the webhook's secret; the timestamp is signed so an old delivery cannot be
    replayed as new."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def verify(secret: str, timestamp: str, body: bytes, header: str) -> bool:
    """What a receiver does (the snippet in docs/notifications.md, tested here)."""
    if not timestamp.isdigit():
        return False
    return hmac.compare_digest(signature(secret, int(timestamp), body), header)


class Verdict(enum.StrEnum):
    DELIVERED = "delivered"
    RETRY = "retry"
    FAILED = "failed"


@dataclass(frozen=True)
class AttemptOutcome:
    """One attempt as the worker saw it: an HTTP status, or an error (timeout, refused)."""

    http_status: int | None
    error: str = ""
    retry_after: float | None = None


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    next_attempt: datetime | None = None
    reason: str = ""


def backoff(attempt: int, settings: WebhookSettings, jitter: float) -> float:
    """Seconds after failed attempt ``attempt`` (1-based): exponential with "equal
    jitter" (half fixed, half random, ``jitter`` in [0, 1)), capped."""
    exponential = min(settings.cap_seconds, settings.base_seconds * 2.0 ** min(attempt - 1, 63))
    return exponential / 2 + exponential / 2 * jitter


def decide(
    outcome: AttemptOutcome,
    *,
    attempt: int,
    created: datetime,
    now: datetime,
    settings: WebhookSettings,
    jitter: Callable[[], float],
) -> Decision:
    """After attempt ``attempt``: delivered (any 2xx), failed for good (410 Gone: the
    receiver is no more; the attempts or the age are used up), or retried later (any other
    answer, a timeout, a refused connection; a ``Retry-After`` is honoured up to the cap)."""
    status = outcome.http_status
    if status is not None and 200 <= status < 300:
        return Decision(Verdict.DELIVERED)
    if status == 410:
        return Decision(Verdict.FAILED, reason="the receiver answered 410 Gone")
    if attempt >= settings.max_attempts:
        return Decision(Verdict.FAILED, reason=f"{attempt} attempts failed")
    delay = backoff(attempt, settings, jitter())
    if outcome.retry_after is not None:
        delay = max(delay, min(outcome.retry_after, settings.cap_seconds))
    at = now + timedelta(seconds=delay)
    if at > created + settings.max_age:
        return Decision(Verdict.FAILED, reason=f"given up after {settings.max_age}")
    return Decision(Verdict.RETRY, next_attempt=at)


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (the HTTP-date form is ignored)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


def validate_url(url: str, field: str = "url") -> str:
    """An absolute http(s) URL with a host, at most 2,048 characters; INVALID_ARGUMENT
    naming ``field`` otherwise."""
    if not url:
        raise InvalidArgumentError(f"{field}: required")
    if len(url) > MAX_URL_LENGTH:
        raise InvalidArgumentError(f"{field}: at most {MAX_URL_LENGTH} characters")
    if any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise InvalidArgumentError(f"{field}: no spaces or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError as exc:
        raise InvalidArgumentError(f"{field}: not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidArgumentError(f"{field}: must be http:// or https://, got {url[:16]!r}")
    if not parts.hostname:
        raise InvalidArgumentError(f"{field}: has no host")
    if parts.username or parts.password:
        raise InvalidArgumentError(f"{field}: credentials in the URL are not accepted")
    return url


def masked_url(url: str) -> str:
    """The URL as read APIs show it: scheme, host and port, the path's first segment; the
    rest (a Slack webhook's path is its credential) and the query are masked."""
    parts = urlsplit(url)
    host = parts.netloc
    segments = [s for s in parts.path.split("/") if s]
    shown = f"/{segments[0]}" if segments else ""
    hidden = "/…" if len(segments) > 1 or parts.query else ""
    return f"{parts.scheme}://{host}{shown}{hidden}"
