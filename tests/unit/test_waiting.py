"""``finishes``: a hung await fails naming where every task waits."""

from __future__ import annotations

import asyncio

import pytest

from tests.waiting import finishes


async def _parked(gate: asyncio.Event) -> None:
    await gate.wait()


async def _hold(gate: asyncio.Event) -> None:
    await _parked(gate)


async def test_a_finished_awaitable_gives_its_result() -> None:
    assert await finishes(asyncio.sleep(0, result=7), within=1, what="a sleep") == 7


async def test_a_hung_awaitable_fails_with_the_waiting_frames() -> None:
    gate = asyncio.Event()
    holder = asyncio.create_task(_hold(gate), name="holder")
    try:
        with pytest.raises(AssertionError) as failure:
            await finishes(gate.wait(), within=0.05, what="the gate")
    finally:
        gate.set()
        await holder
    message = str(failure.value)
    assert message.startswith("the gate did not finish within 0.05 s")
    assert "holder:" in message
    assert message.index(" _hold") < message.index(" _parked"), "outermost first"
