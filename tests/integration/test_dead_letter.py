"""An entry is dead-lettered once (decision 0027): the DLQ is written before the ack, by a
script that adds an entry only if its source is not there yet, so a crash between the two,
a redelivery, or two consumers settling one entry leave one DLQ entry, and
``xmc_actuator_dlq_total`` counts it once. Real Redis and Postgres; the crash is an XACK
that never reaches Redis, as when the process is killed right after the DLQ script.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import REGISTRY
from redis.exceptions import ConnectionError as RedisConnectionError

from actuator.claiming import Delivery
from actuator.settlement import EntrySettler
from tests.integration.ess_harness import Ess
from tests.integration.test_actuator_consumer import FakeHandler, Harness, _harness, counter
from tests.waiting import eventually
from xmc.streams import ACTUATOR_GROUP, text

#: The DLQ reason of an entry without a token, as the consumer's verification files it.
REASON = "missing_field"


def dlq_total() -> float:
    """``xmc_actuator_dlq_total`` over every reason."""
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "xmc_actuator_dlq"
        for sample in metric.samples
        if sample.name == "xmc_actuator_dlq_total"
    )


class KilledBeforeAck:
    """The Redis client of a process killed right after the DLQ script: its XACK never
    reaches Redis (everything else goes through)."""

    def __init__(self, redis: Any) -> None:
        self._redis = redis

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)

    async def xack(self, *_args: Any) -> int:
        raise RedisConnectionError("killed between the DLQ and the ack")


class AckTogether:
    """Two consumers' Redis client whose XACKs wait for each other: each has checked the
    entry is pending and run the DLQ script before either acks (the closest race)."""

    def __init__(self, redis: Any, barrier: asyncio.Barrier) -> None:
        self._redis, self._barrier = redis, barrier

    def __getattr__(self, name: str) -> Any:
        return getattr(self._redis, name)

    async def xack(self, *args: Any) -> int:
        await self._barrier.wait()
        acked: int = await self._redis.xack(*args)
        return acked


@pytest.fixture
async def harness(ess: Ess) -> AsyncIterator[Harness]:
    async with _harness(ess) as started:
        yield started


def settler(harness: Harness, consumer: str, *, redis: Any = None, cap: int = 100) -> EntrySettler:
    return EntrySettler(
        redis=redis or harness.ess.redis,
        names=harness.ess.names,
        store=harness.store,
        consumer=consumer,
        max_deliveries=3,
        dlq_max_entries=cap,
        clock=harness.ess.clock,
    )


async def read(harness: Harness, consumer: str, count: int = 1) -> list[Delivery]:
    """``count`` entries delivered to ``consumer``, as the reader hands them on."""
    redis, stream = harness.ess.redis, harness.ess.names.tasks
    reply = await redis.xreadgroup(ACTUATOR_GROUP, consumer, {stream: ">"}, count=count)
    return [Delivery(text(entry_id), fields, 1, 0.0) for entry_id, fields in reply[0][1]]


async def untrusted_entries(harness: Harness, n: int) -> list[str]:
    """``n`` entries without a token (the consumer dead-letters them as ``missing_field``),
    and the group, created before any is read."""
    redis, stream = harness.ess.redis, harness.ess.names.tasks
    ids = [text(await redis.xadd(stream, {"task": f"garbage-{i}"})) for i in range(n)]
    await redis.xgroup_create(stream, ACTUATOR_GROUP, id="0")
    return ids


async def test_a_crash_between_the_dlq_and_the_ack_leaves_one_dead_letter(
    harness: Harness,
) -> None:
    (source,) = await untrusted_entries(harness, 1)
    (delivery,) = await read(harness, "killed")
    before, repeats = dlq_total(), counter("xmc_actuator_dlq_repeats_total")

    killed = settler(harness, "killed", redis=KilledBeforeAck(harness.ess.redis))
    with pytest.raises(RedisConnectionError):
        await killed.dead_letter(delivery, REASON, "PERMISSION_DENIED", "no token")
    assert await harness.dlq_size() == 1
    assert [text(i) for i in await harness.pending_ids()] == [source], "not acked"
    assert dlq_total() == before + 1

    # A live consumer reclaims the entry, rejects it again, finds it dead-lettered, acks.
    handler = FakeHandler()
    harness.start(handler, claim_idle=0.2)
    await eventually(harness.settled, (0, 0), within=10)
    (dead,) = await harness.dlq()
    assert text(dead[b"source_id"]) == source
    assert dead[b"consumer"] == b"killed"
    assert dead[b"reason"] == REASON.encode()
    assert handler.calls == []
    assert dlq_total() == before + 1, "counted once"
    assert counter("xmc_actuator_dlq_repeats_total") == repeats + 1


async def test_two_consumers_settling_one_entry_dead_letter_it_once(harness: Harness) -> None:
    (source,) = await untrusted_entries(harness, 1)
    (delivery,) = await read(harness, "a")
    before = dlq_total()

    racing = AckTogether(harness.ess.redis, asyncio.Barrier(2))
    added = await asyncio.gather(
        *(
            settler(harness, name, redis=racing).dead_letter(delivery, REASON, "X", "raced")
            for name in "ab"
        )
    )
    assert sorted(added) == [False, True]
    ((_id, dead),) = await harness.ess.redis.xrange(harness.ess.names.dlq)
    assert text(dead[b"source_id"]) == source
    assert dlq_total() == before + 1
    assert await harness.settled() == (0, 0)


async def test_an_entry_another_consumer_acked_is_not_dead_lettered(harness: Harness) -> None:
    """It finished the task: a dead letter would say the opposite."""
    (source,) = await untrusted_entries(harness, 1)
    (delivery,) = await read(harness, "slow")
    await harness.ess.redis.xack(harness.ess.names.tasks, ACTUATOR_GROUP, source)
    assert not await settler(harness, "slow").dead_letter(delivery, REASON, "X", "late")
    assert await harness.dlq() == []


async def test_the_dead_lettered_set_holds_the_sources_the_capped_dlq_holds(
    harness: Harness,
) -> None:
    """A storm of refusals fills neither the DLQ nor the set past the cap."""
    await untrusted_entries(harness, 5)
    dead_letters = settler(harness, "a", cap=2)
    for delivery in await read(harness, "a", count=5):
        assert await dead_letters.dead_letter(delivery, REASON, "X", "refused")
    kept = {text(fields[b"source_id"]) for fields in await harness.dlq()}
    remembered = await harness.ess.redis.zrange(harness.ess.names.dead_lettered_key, 0, -1)
    assert len(kept) == 2
    assert {text(member) for member in remembered} == kept
