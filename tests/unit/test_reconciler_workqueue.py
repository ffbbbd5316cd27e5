"""The Reconciler's work queue (``reconciler.workqueue``), client-go's rules one by one:
dedup while queued, a key re-added while it runs runs once more after, never two workers
on one key, distinct keys in FIFO order, failures retried with backoff then dropped
loudly, a slow key holding only its worker, a graceful and a bounded stop."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from structlog.testing import capture_logs

from reconciler import metrics
from reconciler.workqueue import WorkQueue
from tests.waiting import eventually, holds_for
from xmc.retry import Backoffs
from xmc.supervise import TaskEnded

_names = (f"test-{n}" for n in itertools.count())  # metrics are global: one label each


@asynccontextmanager
async def running(
    process: Callable[[str], Awaitable[None]], *, workers: int = 1, retries: Backoffs | None = None
) -> AsyncIterator[WorkQueue[str]]:
    queue: WorkQueue[str] = WorkQueue(
        next(_names), process, workers=workers, retries=retries or Backoffs((0.01,))
    )
    runner = asyncio.create_task(queue.run())
    try:
        yield queue
    finally:
        await queue.stop(within=1)
        await runner


async def settle(queue: WorkQueue[str]) -> None:
    await eventually(lambda: not len(queue) and not queue._processing and not queue._retrying)


async def test_a_key_added_while_queued_runs_once() -> None:
    runs: list[str] = []

    async def process(key: str) -> None:
        runs.append(key)

    queue: WorkQueue[str] = WorkQueue(next(_names), process)
    for _ in range(5):
        queue.add("a")
    assert len(queue) == 1
    runner = asyncio.create_task(queue.run())
    await eventually(lambda: runs == ["a"])
    await queue.stop(within=1)
    await runner
    assert runs == ["a"]


async def test_a_key_added_while_it_runs_runs_exactly_once_more_after() -> None:
    runs: list[str] = []
    release = asyncio.Event()

    async def process(key: str) -> None:
        runs.append(key)
        if len(runs) == 1:
            await release.wait()

    async with running(process, workers=4) as queue:
        queue.add("a")
        await eventually(lambda: runs == ["a"])
        for _ in range(3):
            queue.add("a")  # dirty, not queued: no other worker may take it
        await holds_for(lambda: runs, ["a"], during=0.05, what="no second run of a running key")
        release.set()
        await eventually(lambda: len(runs) == 2)
        await settle(queue)
        assert runs == ["a", "a"]


async def test_never_two_workers_on_one_key() -> None:
    running_now: dict[str, int] = {}
    most: dict[str, int] = {}
    runs = 0

    async def process(key: str) -> None:
        nonlocal runs
        runs += 1
        running_now[key] = running_now.get(key, 0) + 1
        most[key] = max(most.get(key, 0), running_now[key])
        await asyncio.sleep(0.002)
        running_now[key] -= 1

    async with running(process, workers=4) as queue:
        for n in range(200):
            queue.add(f"k{n % 3}")
            if n % 7 == 0:
                await asyncio.sleep(0.001)
        await settle(queue)
    assert most == {"k0": 1, "k1": 1, "k2": 1}
    assert 3 <= runs < 200, "coalesced, and every key ran"


async def test_distinct_keys_run_in_the_order_they_were_queued() -> None:
    runs: list[str] = []

    async def process(key: str) -> None:
        runs.append(key)

    queue: WorkQueue[str] = WorkQueue(next(_names), process, workers=1)
    for key in ["c", "a", "c", "b", "a", "d"]:
        queue.add(key)
    runner = asyncio.create_task(queue.run())
    await eventually(lambda: len(runs) == 4)
    await queue.stop(within=1)
    await runner
    assert runs == ["c", "a", "b", "d"]


async def test_a_failing_key_is_retried_with_backoff_then_dropped_loudly() -> None:
    attempts: list[float] = []

    async def process(key: str) -> None:
        attempts.append(time.monotonic())
        raise RuntimeError(f"cannot {key}")

    with capture_logs() as logs:
        async with running(process, retries=Backoffs((0.05, 0.1))) as queue:
            dropped = metrics.WORKQUEUE_DROPPED_TOTAL.labels(queue.name)
            retried = metrics.WORKQUEUE_RETRIES_TOTAL.labels(queue.name)
            queue.add("a")
            await eventually(lambda: dropped._value.get() == 1)
            await asyncio.sleep(0.2)
            assert len(attempts) == 3, "the first run and two retries, no more"
            assert retried._value.get() == 2

    gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
    assert gaps[0] >= 0.05
    assert gaps[1] >= 0.1
    failed = [e for e in logs if e["event"].endswith("processing failed")]
    assert [(e["failures"], e["retry_in"], e["exc_info"]) for e in failed] == [
        (1, 0.05, True),
        (2, 0.1, True),
        (3, None, True),
    ]
    assert any(e["log_level"] == "error" and "dropped after 3" in e["event"] for e in logs)


async def test_a_success_forgets_the_failures_and_the_worker_goes_on() -> None:
    outcomes = iter([RuntimeError("once"), None, RuntimeError("again"), None])
    runs: list[str] = []

    async def process(key: str) -> None:
        runs.append(key)
        if key == "a" and (error := next(outcomes)) is not None:
            raise error

    with capture_logs() as logs:
        async with running(process, workers=1, retries=Backoffs((0.01, 5.0))) as queue:
            queue.add("a")
            queue.add("b")  # the one worker goes on after a's failure
            await eventually(lambda: runs.count("a") == 2)
            queue.add("a")
            await eventually(lambda: runs.count("a") == 4, within=1)  # 0.01 s again, not 5
    assert runs[:2] == ["a", "b"]
    assert [e["failures"] for e in logs if e["event"].endswith("processing failed")] == [1, 1]


async def test_a_slow_key_holds_only_its_own_worker() -> None:
    stuck = asyncio.Event()
    done: list[str] = []

    async def process(key: str) -> None:
        if key == "slow":
            await stuck.wait()
        done.append(key)

    async with running(process, workers=2) as queue:
        queue.add("slow")
        for key in "abc":
            queue.add(key)
        await eventually(lambda: done == ["a", "b", "c"], within=0.5)
        stuck.set()


async def test_stop_drains_what_is_queued_and_refuses_new_keys() -> None:
    runs: list[str] = []

    async def process(key: str) -> None:
        await asyncio.sleep(0.01)
        runs.append(key)

    queue: WorkQueue[str] = WorkQueue(next(_names), process, workers=2)
    runner = asyncio.create_task(queue.run())
    for key in "abcdef":
        queue.add(key)
    await queue.stop(within=2)
    queue.add("late")
    await runner
    assert sorted(runs) == list("abcdef")


async def test_stop_abandons_what_outlasts_it_and_says_so() -> None:
    async def process(key: str) -> None:
        await asyncio.Event().wait()

    queue: WorkQueue[str] = WorkQueue(next(_names), process, workers=1)
    runner = asyncio.create_task(queue.run())
    for key in "abc":
        queue.add(key)
    await eventually(lambda: bool(queue._processing))
    with capture_logs() as logs:
        async with asyncio.timeout(1):
            await queue.stop(within=0.05)
            await runner
    [warning] = [e for e in logs if "work left undone" in e["event"]]
    assert warning["queued_or_running"] == 3


class Fatal(BaseException):
    """Not an ``Exception``: gets past the worker's handler, as a bug in the queue would."""


async def test_a_worker_that_dies_ends_run_loudly() -> None:
    async def process(key: str) -> None:
        raise Fatal

    queue: WorkQueue[str] = WorkQueue(next(_names), process, workers=2)
    queue.add("a")
    with pytest.raises(TaskEnded, match="worker"):
        async with asyncio.timeout(1):
            await queue.run()


def test_a_queue_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="at least one worker"):
        WorkQueue(next(_names), lambda key: asyncio.sleep(0), workers=0)
