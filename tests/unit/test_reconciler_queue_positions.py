"""One visibility request per queue per tick serves every waiting Workload's event."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from reconciler.observe import QueuePosition
from reconciler.queue_positions import (
    Outages,
    PositionReader,
    QueuePositions,
    index_summary,
    position_in,
    waiting_queue,
)
from xmc.kube import KubeError


def summary(*names: str) -> dict[str, Any]:
    return {
        "items": [
            {"metadata": {"name": n}, "positionInClusterQueue": i} for i, n in enumerate(names)
        ]
    }


@pytest.mark.parametrize(
    ("body", "name", "want"),
    [
        (summary("a", "b", "c"), "b", QueuePosition(1, 3)),
        (summary("a"), "missing", QueuePosition(None, 1)),
        ({}, "a", QueuePosition(None, 0)),
        ({"items": [{"metadata": {"name": "a"}}, "junk"]}, "a", QueuePosition(None, 1)),
    ],
)
def test_position_in_a_summary(body: Mapping[str, Any], name: str, want: QueuePosition) -> None:
    assert position_in(index_summary(body, 0.0), name) == want


class Fake:
    """A visibility API whose answers the test releases, counting requests."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.body = summary("a", "b")
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: Exception | None = None

    async def __call__(self, queue: str) -> Mapping[str, Any]:
        self.calls.append(queue)
        await self.gate.wait()
        if self.fail is not None:
            raise self.fail
        return self.body


async def test_events_within_the_age_share_one_request_per_queue() -> None:
    fake, now = Fake(), [100.0]
    positions = QueuePositions(fake, max_age=1.0, clock=lambda: now[0])
    assert await positions.position("q", "b") == QueuePosition(1, 2)
    assert await positions.position("q", "a") == QueuePosition(0, 2)
    assert await positions.position("other", "a") == QueuePosition(0, 2)
    assert fake.calls == ["q", "other"]
    now[0] += 1.0
    fake.body = summary("b")
    assert await positions.position("q", "b") == QueuePosition(0, 1)
    assert fake.calls == ["q", "other", "q"]


async def test_callers_during_a_request_wait_for_it_and_a_cancelled_one_does_not_cancel_it() -> (
    None
):
    fake = Fake()
    fake.gate.clear()
    positions = QueuePositions(fake, max_age=1.0)
    first = asyncio.ensure_future(positions.position("q", "a"))
    second = asyncio.ensure_future(positions.position("q", "b"))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    fake.gate.set()
    assert await second == QueuePosition(1, 2)
    assert fake.calls == ["q"]
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_failed_request_is_raised_to_its_callers_and_not_cached() -> None:
    fake = Fake()
    fake.fail = RuntimeError("visibility down")
    positions = QueuePositions(fake, max_age=60.0)
    with pytest.raises(RuntimeError):
        await positions.position("q", "a")
    fake.fail = None
    assert await positions.position("q", "a") == QueuePosition(0, 2)
    assert fake.calls == ["q", "q"]


def test_an_outage_is_announced_once_per_queue_until_a_read_succeeds() -> None:
    outages = Outages()
    assert [outages.failed("q"), outages.failed("q"), outages.failed("other")] == [
        True,
        False,
        True,
    ]
    outages.answered("q")
    outages.answered("never-failed")
    assert [outages.failed("q"), outages.failed("other")] == [True, False]


def workload(name: str, *, queue: str | None = "q", waiting: bool = True) -> dict[str, Any]:
    status = "False" if waiting else "True"
    return {
        "metadata": {"name": name},
        "spec": {"queueName": queue} if queue else {},
        "status": {"conditions": [{"type": "QuotaReserved", "status": status}]},
    }


@pytest.mark.parametrize(
    ("obj", "want"),
    [
        (workload("a"), "q"),
        (workload("a", waiting=False), None),
        (workload("a", queue=None), None),
        ({"metadata": {"name": "a"}, "spec": {"queueName": "q"}}, None),
        ({"spec": None, "status": {"conditions": ["junk"]}}, None),
    ],
)
def test_waiting_queue(obj: dict[str, Any], want: str | None) -> None:
    assert waiting_queue(obj) == want


async def test_stale_names_the_waiting_workloads_whose_position_moved() -> None:
    """What the periodic look re-observes: a waiting Workload never reported, or whose
    position moved while nothing happened to it (one ahead admitted, one behind added);
    not one whose position still holds, nor one no longer waiting."""
    fake = Fake()
    fake.body = summary("a", "b")
    reader = PositionReader(fake, max_age=0.0)
    a, b, c = workload("a"), workload("b"), workload("c")
    assert await reader.stale([a, b]) == [a, b]
    for w in (a, b):
        reader.reported(w, await reader.of(w))
    assert await reader.stale([a, b]) == []

    fake.body = summary("b", "c")  # a admitted; c arrives behind b
    assert await reader.stale([workload("a", waiting=False), b, c]) == [b, c]
    assert await reader.of(b) == QueuePosition(0, 2)


async def test_an_unreadable_queue_reports_unknown_once_and_warns_once() -> None:
    fake = Fake()
    fake.fail = KubeError(404, "NotFound", "the server could not find the requested resource")
    reader = PositionReader(fake, max_age=0.0)
    a = workload("a")
    assert await reader.of(a) == QueuePosition(None, None)
    reader.reported(a, QueuePosition(None, None))
    assert await reader.stale([a]) == [], "still unknown: nothing to re-observe"
    fake.fail = None
    assert await reader.stale([a]) == [a], "readable again: the position is back"
    assert await reader.of(workload("z", waiting=False)) is None
