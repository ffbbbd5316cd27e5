"""XMC's one home for time values: its clock, naive → UTC, and fast
``google.protobuf.Timestamp`` ↔ ``datetime`` conversion.

Every XMC datetime is UTC-aware: :func:`utc_now` is the default clock of every service
(tests inject their own), and :func:`as_utc` is the one reading of a naive datetime (UTC,
as Kubernetes and protobuf speak it; never host-local time).

protobuf's ``ToDatetime``/``FromDatetime`` go through ``calendar.timegm`` and cost about
4 µs each; the masked write path converts a dozen timestamps per item, so plain
arithmetic against the epoch halves the per-item CPU of a batch. Precision is the
microsecond, the resolution of Postgres ``timestamptz``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from google.protobuf.timestamp_pb2 import Timestamp

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_SECOND = timedelta(seconds=1)
_ONE_MICROSECOND = timedelta(microseconds=1)


def utc_now() -> datetime:
    """XMC's wall clock (the default ``clock`` of every service; tests inject their own)."""
    return datetime.now(UTC)


def to_datetime(ts: Timestamp) -> datetime:
    return EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def set_timestamp(ts: Timestamp, value: datetime | None) -> None:
    """Write ``value`` into ``ts``; None leaves the field untouched (unset)."""
    if value is None:
        return
    ts.seconds, ts.nanos = timestamp_fields(value)


def timestamp_fields(value: datetime) -> tuple[int, int]:
    """``value`` as a Timestamp's (seconds, nanos), at the microsecond."""
    delta = as_utc(value) - EPOCH
    return delta.days * 86400 + delta.seconds, delta.microseconds * 1000


def stamp_after(stored: datetime | None, now: datetime) -> datetime:
    """The time for a state XMC decides over a stored one: ``now``, but never earlier than
    the stored state's time + 1 µs, so a host whose clock is behind the one that stamped
    the stored state cannot lose to the time order (docs/decisions/0007, 0011)."""
    return now if stored is None else max(now, stored + _ONE_MICROSECOND)


def as_utc(value: datetime) -> datetime:
    """Naive datetimes are UTC (Kubernetes and protobuf both speak UTC); aware ones are
    converted, so the two never mix in a comparison."""
    if value.tzinfo is UTC:  # what the store and ``to_datetime`` hand over: spared a copy
        return value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def parse_rfc3339(value: Any) -> datetime | None:
    """An RFC 3339 time as the API server writes it (``...Z``, fractions or not) → aware
    UTC; None for absent or malformed: one bad field must not stop an observation."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return as_utc(datetime.fromisoformat(value))
    except ValueError:
        return None
