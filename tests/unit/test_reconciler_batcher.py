"""UpdateBatcher (SPEC §8.5) with a fake send and injected time: flushes are driven
explicitly (``flush_now``, ``FakeTime.advance``), and waits are conditions with deadlines."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from prometheus_client import REGISTRY

from reconciler.batcher import BatcherOptions, FlushResult, UpdateBatcher, split_batches
from reconciler.observation import Observation, Source
from tests.waiting import eventually, holds_for
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution


def obs(xid: int, wid: int, source: Source = Source.JOBSET, tag: str = "") -> Observation:
    """An observation whose system message text (``tag``) identifies it in assertions."""
    execution = WorkUnitExecution()
    execution.status.state = int(WorkUnitState.RUNNING)  # type: ignore[assignment]
    execution.status.system_message.user_facing_text = tag
    return Observation(xid, wid, 1, source, execution, ("status.state", "status.system_message"))


def tags(batch: Sequence[Observation]) -> list[str]:
    return [o.execution.status.system_message.user_facing_text for o in batch]


class FakeTime:
    """Injected clock and sleep: sleepers wake only when the test advances time."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        future = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, future))
        await future

    @property
    def sleeping(self) -> int:
        return sum(1 for _, f in self._sleepers if not f.done())

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for due, future in self._sleepers:
            if due <= self.now and not future.done():
                future.set_result(None)
        self._sleepers = [(d, f) for d, f in self._sleepers if not f.done()]


class FakeEss:
    """Records each batch; ``gate`` holds sends open; the calls numbered in ``fail_calls``
    (1-based) raise."""

    def __init__(self) -> None:
        self.batches: list[list[Observation]] = []
        self.gate: asyncio.Event | None = None
        self.fail_calls: set[int] = set()
        self.calls = 0
        self.active = 0
        self.max_active = 0

    async def __call__(self, batch: Sequence[Observation]) -> None:
        self.calls += 1
        call = self.calls
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            if self.gate is not None:
                await self.gate.wait()
            if call in self.fail_calls:
                raise ConnectionError("ESS is down")
            self.batches.append(list(batch))
        finally:
            self.active -= 1

    @property
    def sent(self) -> list[str]:
        return [t for batch in self.batches for t in tags(batch)]


def make(ess: FakeEss, time: FakeTime | None = None, **options: float) -> UpdateBatcher:
    time = time or FakeTime()
    return UpdateBatcher(
        ess,
        options=BatcherOptions(**options),  # type: ignore[arg-type]
        clock=time,
        sleep=time.sleep,
    )


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_rapid_updates_of_one_slot_send_only_the_last() -> None:
    ess = FakeEss()
    batcher = make(ess)
    coalesced = sample("xmc_reconciler_coalesced_total", source="jobset")
    for i in range(100):
        batcher.add(obs(1, 1, tag=f"v{i}"))
    assert batcher.pending == 1
    assert await batcher.flush_now() == FlushResult(sent=1, batches=1)
    assert ess.sent == ["v99"]
    assert sample("xmc_reconciler_coalesced_total", source="jobset") - coalesced == 99
    assert batcher.pending == 0


async def test_sources_of_one_work_unit_are_separate_slots_sent_in_arrival_order() -> None:
    ess = FakeEss()
    batcher = make(ess)
    batcher.add(obs(1, 1, Source.POD, "pod-1"))
    batcher.add(obs(1, 1, Source.JOBSET, "jobset-1"))
    batcher.add(obs(1, 1, Source.WORKLOAD, "workload-1"))
    batcher.add(obs(1, 1, Source.POD, "pod-2"))
    assert batcher.pending == 3
    await batcher.flush_now()
    assert [tags(b) for b in ess.batches] == [["jobset-1", "workload-1", "pod-2"]]


@pytest.mark.parametrize(
    ("sizes", "max_batch", "expected"),
    [
        pytest.param([], 3, [], id="nothing pending"),
        pytest.param([1, 1, 1], 3, [3], id="fits in one batch"),
        pytest.param([2, 2, 2], 3, [2, 2, 2], id="groups never split"),
        pytest.param([3, 1, 2, 1], 4, [4, 3], id="packed in order"),
        pytest.param([1] * 7, 3, [3, 3, 1], id="single items"),
    ],
)
def test_split_batches(sizes: list[int], max_batch: int, expected: list[int]) -> None:
    groups = [[f"{g}.{i}" for i in range(n)] for g, n in enumerate(sizes)]
    batches = split_batches(groups, max_batch)
    assert [len(b) for b in batches] == expected
    assert [x for b in batches for x in b] == [x for g in groups for x in g]


async def test_flush_splits_into_bounded_batches_keeping_work_units_whole() -> None:
    ess = FakeEss()
    batcher = make(ess, max_batch=4)
    for wid in (5, 3, 1, 4, 2):
        for source in list(Source)[: 1 + wid % 3]:
            batcher.add(obs(7, wid, source, f"{wid}/{source.value}"))
    result = await batcher.flush_now()
    assert result == FlushResult(sent=11, batches=4)
    assert [tags(b) for b in ess.batches] == [
        ["1/jobset", "1/workload"],
        ["2/jobset", "2/workload", "2/pod", "3/jobset"],
        ["4/jobset", "4/workload"],
        ["5/jobset", "5/workload", "5/pod"],
    ]


async def test_size_threshold_starts_a_flush_without_the_interval() -> None:
    ess, time = FakeEss(), FakeTime()
    batcher = make(ess, time, flush_size=3)
    loop = asyncio.create_task(batcher.run())
    await eventually(lambda: time.sleeping == 1, every=0)
    batcher.add(obs(1, 1, tag="a"))
    batcher.add(obs(1, 2, tag="b"))
    # The fake clock stands still: only a flush below the size threshold could send.
    await holds_for(lambda: ess.calls, 0, during=0.05, what="no flush below flush_size")
    batcher.add(obs(1, 3, tag="c"))
    await eventually(lambda: ess.sent == ["a", "b", "c"], every=0)
    assert time.now == 0.0
    await batcher.stop()
    await loop


async def test_interval_flush_follows_the_injected_clock() -> None:
    ess, time = FakeEss(), FakeTime()
    batcher = make(ess, time, flush_interval=0.2)
    loop = asyncio.create_task(batcher.run())
    await eventually(lambda: time.sleeping == 1, every=0)
    batcher.add(obs(1, 1, tag="a"))
    time.advance(0.1)
    await holds_for(lambda: ess.calls, 0, during=0.05, what="no flush before the interval")
    time.advance(0.1)
    await eventually(lambda: ess.sent == ["a"], every=0)
    await batcher.stop()
    await loop


async def test_at_most_max_in_flight_flushes_run_at_once() -> None:
    ess = FakeEss()
    ess.gate = asyncio.Event()
    batcher = make(ess, max_in_flight=2)
    batcher.add(obs(1, 1, tag="w1"))
    flushes = [asyncio.create_task(batcher.flush_now())]
    await eventually(lambda: ess.active == 1, every=0)
    batcher.add(obs(1, 2, tag="w2"))
    flushes.append(asyncio.create_task(batcher.flush_now()))
    await eventually(lambda: ess.active == 2, every=0)
    batcher.add(obs(1, 3, tag="w3"))
    flushes.append(asyncio.create_task(batcher.flush_now()))
    await holds_for(lambda: ess.active, 2, during=0.05, what="the third flush waiting for a slot")
    assert batcher.pending == 1  # the third waits for a slot, still coalescing
    batcher.add(obs(1, 3, tag="w3-newer"))
    ess.gate.set()
    await asyncio.gather(*flushes)
    assert ess.max_active == 2
    assert ess.sent == ["w1", "w2", "w3-newer"]


async def test_work_unit_in_flight_is_left_for_a_later_flush() -> None:
    ess = FakeEss()
    ess.gate = asyncio.Event()
    batcher = make(ess, max_in_flight=2)
    batcher.add(obs(1, 1, tag="old"))
    first = asyncio.create_task(batcher.flush_now())
    await eventually(lambda: ess.active == 1, every=0)
    batcher.add(obs(1, 1, tag="new"))
    batcher.add(obs(1, 2, tag="other"))
    ess.gate.set()
    second = await batcher.flush_now()
    await first
    assert second == FlushResult(sent=1, batches=1)
    assert sorted(ess.sent) == ["old", "other"]
    assert batcher.pending == 1
    await batcher.flush_now()
    assert ess.sent[2:] == ["new"]  # only after "old" was written


async def test_failed_flush_is_put_back_and_retried_by_the_next_flush() -> None:
    ess = FakeEss()
    batcher = make(ess)
    failures = sample("xmc_reconciler_flush_failures_total")
    batcher.add(obs(1, 1, Source.JOBSET, "a"))
    batcher.add(obs(1, 1, Source.POD, "b"))
    ess.fail_calls = {1}
    assert await batcher.flush_now() == FlushResult(put_back=2, batches=1, failed=True)
    assert batcher.pending == 2
    assert sample("xmc_reconciler_flush_failures_total") - failures == 1
    assert await batcher.flush_now() == FlushResult(sent=2, batches=1)
    assert ess.sent == ["a", "b"]


async def test_failure_in_a_later_batch_puts_back_only_the_unsent_batches() -> None:
    ess = FakeEss()
    batcher = make(ess, max_batch=3)
    for wid in range(1, 8):
        batcher.add(obs(1, wid, tag=f"w{wid}"))
    ess.fail_calls = {2}
    assert await batcher.flush_now() == FlushResult(sent=3, put_back=4, batches=3, failed=True)
    assert batcher.pending == 4
    await batcher.flush_now()
    assert ess.sent == ["w1", "w2", "w3", "w4", "w5", "w6", "w7"]


async def test_failed_flush_does_not_overwrite_a_newer_observation() -> None:
    ess = FakeEss()
    ess.gate = asyncio.Event()
    ess.fail_calls = {1}
    batcher = make(ess)
    batcher.add(obs(1, 1, Source.JOBSET, "jobset-old"))
    batcher.add(obs(1, 1, Source.POD, "pod-old"))
    flush = asyncio.create_task(batcher.flush_now())
    await eventually(lambda: ess.active == 1, every=0)
    batcher.add(obs(1, 1, Source.JOBSET, "jobset-new"))
    ess.gate.set()
    assert await flush == FlushResult(put_back=1, batches=1, failed=True)
    await batcher.flush_now()
    assert [tags(b) for b in ess.batches] == [["pod-old", "jobset-new"]]


async def test_stop_flushes_what_is_pending() -> None:
    ess, time = FakeEss(), FakeTime()
    batcher = make(ess, time)
    loop = asyncio.create_task(batcher.run())
    await eventually(lambda: time.sleeping == 1, every=0)
    batcher.add(obs(1, 1, tag="a"))
    batcher.add(obs(2, 1, tag="b"))
    await batcher.stop()
    await loop
    assert ess.sent == ["a", "b"]
    assert batcher.pending == 0


async def test_stop_gives_up_after_its_timeout_keeping_the_items() -> None:
    ess = FakeEss()
    ess.gate = asyncio.Event()
    batcher = make(ess)
    batcher.add(obs(1, 1, tag="a"))
    await batcher.stop(grace=0.05)
    assert ess.sent == []
    assert batcher.pending == 1  # put back when the send was cancelled


async def test_a_replica_that_stopped_leading_drops_what_it_held_unsent() -> None:
    """A deposed leader's held observations would overwrite the new leader's fresher
    writes in fields the ESS does not order by time; they are dropped, and counted."""
    ess = FakeEss()
    leading = True
    batcher = UpdateBatcher(ess, may_send=lambda: leading)
    dropped = sample("xmc_reconciler_updates_dropped_not_leading_total")
    batcher.add(obs(1, 1, Source.JOBSET, "a"))
    batcher.add(obs(1, 1, Source.POD, "b"))
    batcher.add(obs(2, 1, tag="c"))
    leading = False
    assert await batcher.flush_now() == FlushResult(batches=1, dropped=3)
    assert ess.sent == []
    assert batcher.pending == 0
    assert sample("xmc_reconciler_updates_dropped_not_leading_total") - dropped == 3


async def test_leadership_lost_between_batches_keeps_what_was_sent_and_drops_the_rest() -> None:
    ess = FakeEss()
    batches_allowed = iter([True, False])
    batcher = UpdateBatcher(
        ess, options=BatcherOptions(max_batch=3), may_send=lambda: next(batches_allowed)
    )
    for wid in range(1, 6):
        batcher.add(obs(1, wid, tag=f"w{wid}"))
    assert await batcher.flush_now() == FlushResult(sent=3, batches=2, dropped=2)
    assert ess.sent == ["w1", "w2", "w3"]
    assert batcher.pending == 0


def test_drop_pending_forgets_everything_and_says_how_much() -> None:
    batcher = UpdateBatcher(FakeEss())
    batcher.add(obs(1, 1, Source.JOBSET))
    batcher.add(obs(1, 1, Source.JOBSET))  # coalesced: one slot
    batcher.add(obs(3, 2, Source.WORKLOAD))
    assert batcher.drop_pending("stopped leading") == 2
    assert batcher.pending == 0
    assert batcher.drop_pending("again") == 0
