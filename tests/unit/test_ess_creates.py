"""The CreateWorkUnit group's decisions about callers that gave up (issue 24)."""

from __future__ import annotations

import asyncio
from collections import deque

import pytest
from google.longrunning.operations_proto_pb2 import Operation

from ess.auth import Identity
from ess.creates import QueuedCreate, answer, creates_for_the_gone, take_live
from xmc.errors import NotFoundError
from xmc.model.audit import Actor
from xmc.store.creation import Created, CreateOutcome
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

NEW = Created(Operation(name="op-new"), WorkUnit(name="experiments/1/workUnits/1"))
REPEAT = Created(Operation(name="op-first"), None)  # a client-chosen id seen before
REFUSED = NotFoundError("parent: experiments/9 does not exist")


@pytest.mark.parametrize(
    ("gave_up", "outcomes", "rolls_back"),
    [
        ([], [], False),
        ([False], [NEW], False),
        ([True], [NEW], True),
        ([True], [REPEAT], False),
        ([True], [REFUSED], False),
        ([False, True], [NEW, REFUSED], False),
        ([False, True], [NEW, NEW], True),
        ([True, False], [NEW, NEW], True),
    ],
)
def test_a_group_rolls_back_only_when_it_creates_a_unit_for_a_caller_that_gave_up(
    gave_up: list[bool], outcomes: list[CreateOutcome], rolls_back: bool
) -> None:
    assert creates_for_the_gone(gave_up, outcomes) is rolls_back


def _queued(loop: asyncio.AbstractEventLoop, *, gave_up: bool = False) -> QueuedCreate:
    future: asyncio.Future[Operation] = loop.create_future()
    if gave_up:
        future.cancel()
    return QueuedCreate(
        Identity("alice@example.com"), 1, None, WorkUnit(), Actor("alice@example.com"), future
    )


async def test_take_live_drops_callers_that_gave_up_and_leaves_the_rest_queued() -> None:
    loop = asyncio.get_running_loop()
    live = [_queued(loop) for _ in range(3)]
    gone = [_queued(loop, gave_up=True) for _ in range(2)]
    queue = deque([gone[0], live[0], gone[1], live[1], live[2]])

    assert take_live(queue, 2) == live[:2]
    assert list(queue) == [live[2]]
    assert take_live(deque(gone), 2) == []


async def test_answer_skips_a_caller_that_gave_up_and_tells_the_others() -> None:
    loop = asyncio.get_running_loop()
    gone, ok, refused = _queued(loop, gave_up=True), _queued(loop), _queued(loop)

    assert answer(gone, NEW) is False
    assert answer(gone, RuntimeError("postgres went away")) is False
    assert answer(ok, NEW) is True
    assert ok.future.result() is NEW.operation
    assert answer(refused, REFUSED) is True
    assert refused.future.exception() is REFUSED
