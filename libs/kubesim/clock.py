"""Simulated time, so a rule measured in minutes (SPEC §8.3's 2-minute startup check) can
be exercised in seconds: ``scale`` simulated seconds pass per real second.

The API server stamps objects (creationTimestamp, condition times) with ``now()``; the
controllers wait with ``sleep()``. Both read one clock, so timestamps and behaviour agree.

``offset`` skews the cluster's clock against the host's (``--clock-offset -5s``): a real
API server's clock is not XMC's, and every flow that compares an XMC time with a cluster
time must be tested with the two apart, both ways.
"""

from __future__ import annotations

import asyncio
import re
import time
from datetime import UTC, datetime, timedelta

_OFFSET = re.compile(r"^([+-]?\d+(?:\.\d+)?)(ms|s|m|h)?$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_offset(text: str) -> timedelta:
    """``-5s``, ``+2.5s``, ``1m``, ``250ms`` or a plain number of seconds."""
    match = _OFFSET.match(text.strip())
    if match is None:
        raise ValueError(f"clock offset {text!r}: want a signed duration such as -5s or 1m")
    return timedelta(seconds=float(match[1]) * _UNIT_SECONDS[match[2] or "s"])


class SimClock:
    def __init__(
        self, scale: float = 1.0, start: datetime | None = None, offset: timedelta = timedelta()
    ) -> None:
        if scale <= 0:
            raise ValueError("time scale must be > 0")
        self.scale = scale
        self.offset = offset
        self._start = (start or datetime.now(UTC)) + offset
        self._origin = time.monotonic()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._origin) * self.scale)

    def __call__(self) -> datetime:
        return self.now()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time."""
        await asyncio.sleep(max(seconds, 0) / self.scale)


def utc_now() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
