"""Simulated time, so a rule measured in minutes (SPEC §8.3's 2-minute startup check) can
be exercised in seconds: ``scale`` simulated seconds pass per real second.

The API server stamps objects (creationTimestamp, condition times) with ``now()``; the
controllers wait with ``sleep()``. Both read one clock, so timestamps and behaviour agree.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta


class SimClock:
    def __init__(self, scale: float = 1.0, start: datetime | None = None) -> None:
        if scale <= 0:
            raise ValueError("time scale must be > 0")
        self.scale = scale
        self._start = start or datetime.now(UTC)
        self._origin = time.monotonic()

    def now(self) -> datetime:
        return self._start + timedelta(seconds=(time.monotonic() - self._origin) * self.scale)

    def __call__(self) -> datetime:
        return self.now()

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of simulated time."""
        await asyncio.sleep(max(seconds, 0) / self.scale)
