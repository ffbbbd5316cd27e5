"""Reading and claiming task entries (steps 1 and the claim of ``actuator.consumer``).

``StreamReader`` wraps the two ways an entry reaches this consumer: ``XREADGROUP`` of new
entries, and ``XAUTOCLAIM`` of entries idle longer than ``claim_idle`` (their consumer
died, or retries were exhausted and the entry was left pending). Before claiming, the
reader refreshes the idle time of the entries it holds (``XCLAIM … JUSTID``, which does
not count as a delivery), so a slow handler is never mistaken for a dead consumer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from redis.exceptions import ResponseError

from actuator.metrics import RECLAIMED_TOTAL
from xmc.streams import ACTUATOR_GROUP, REDIS_UNAVAILABLE, StreamNames, ensure_group, text

log = structlog.get_logger()


@dataclass(frozen=True)
class Delivery:
    """One entry as this consumer received it."""

    entry_id: str
    fields: Mapping[Any, Any]
    #: Delivery count of the entry in the group, this delivery included.
    deliveries: int
    #: Monotonic time it was received, for the latency histogram.
    received: float


@dataclass(kw_only=True)
class StreamReader:
    """This consumer's reads and claims on the task stream; ``held`` is the consumer's
    map of the entries it holds (read, never written, here)."""

    redis: Any
    names: StreamNames
    #: This consumer's name in the group.
    consumer: str
    held: Mapping[str, Delivery]
    #: Most entries held at once: a claim takes only the free slots.
    concurrency: int
    #: Seconds an entry may sit unacked before it is claimed.
    claim_idle: float
    monotonic: Callable[[], float]
    _claim_cursor: str = field(default="0-0", init=False)

    async def ensure_group(self) -> None:
        await ensure_group(self.redis, self.names.tasks, ACTUATOR_GROUP)

    async def read_new(self, count: int, *, block: float) -> list[Delivery]:
        """Up to ``count`` entries never delivered, waiting up to ``block`` seconds."""
        reply = await self.redis.xreadgroup(
            ACTUATOR_GROUP,
            self.consumer,
            {self.names.tasks: ">"},
            count=count,
            block=max(1, int(block * 1000)),
        )
        now = self.monotonic()
        return [
            Delivery(text(entry_id), fields, 1, now)
            for _stream, entries in reply or []
            for entry_id, fields in entries
        ]

    async def claim_forever(
        self, admit: Callable[[Delivery], None], *, stopping: asyncio.Event
    ) -> None:
        """Every ``claim_idle / 4`` seconds: heartbeat, then claim (not once stopping)."""
        interval = self.claim_idle / 4
        while True:
            await asyncio.sleep(interval)
            try:
                await self._heartbeat()
                if not stopping.is_set():
                    for delivery in await self._autoclaim():
                        admit(delivery)
            except (*REDIS_UNAVAILABLE, ResponseError) as exc:
                log.warning("could not claim task entries", error=str(exc))
            except Exception:
                # Claiming is what rescues stranded tasks: keep the loop alive, loudly.
                log.exception("claim loop failed; trying again next interval")

    async def _heartbeat(self) -> None:
        """Reset the idle time of held entries so no one claims them from a live consumer."""
        if self.held:
            await self.redis.xclaim(
                self.names.tasks,
                ACTUATOR_GROUP,
                self.consumer,
                min_idle_time=0,
                message_ids=list(self.held),
                justid=True,
            )

    async def _autoclaim(self) -> list[Delivery]:
        free = self.concurrency - len(self.held)
        if free <= 0:
            return []
        reply = await self.redis.xautoclaim(
            self.names.tasks,
            ACTUATOR_GROUP,
            self.consumer,
            min_idle_time=int(self.claim_idle * 1000),
            start_id=self._claim_cursor,
            count=free,
        )
        self._claim_cursor = text(reply[0])
        claimed = [
            (text(entry_id), fields)
            for entry_id, fields in reply[1]
            if fields is not None and text(entry_id) not in self.held
        ]
        if not claimed:
            return []
        counts = await self._delivery_counts([entry_id for entry_id, _ in claimed])
        now = self.monotonic()
        deliveries = []
        for entry_id, fields in claimed:
            if entry_id in counts:  # else acked by someone in the meantime
                RECLAIMED_TOTAL.inc()
                log.info("reclaimed idle entry", entry_id=entry_id, deliveries=counts[entry_id])
                deliveries.append(Delivery(entry_id, fields, counts[entry_id], now))
        return deliveries

    async def _delivery_counts(self, entry_ids: list[str]) -> dict[str, int]:
        """Delivery count of each entry still pending for this consumer."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for entry_id in entry_ids:
                pipe.xpending_range(
                    self.names.tasks,
                    ACTUATOR_GROUP,
                    min=entry_id,
                    max=entry_id,
                    count=1,
                    consumername=self.consumer,
                )
            replies: list[list[dict[str, Any]]] = await pipe.execute()
        return {
            text(row["message_id"]): int(row["times_delivered"]) for rows in replies for row in rows
        }
