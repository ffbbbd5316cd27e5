"""The Actuator's task consumer against real Redis and Postgres (SPEC §6, §7.3, §9).

Tasks come from a real ESS (CreateWorkUnit signs and enqueues a CREATE) or are signed with
the same key by ``TaskPublisher``; the handler is a fake that records its calls and answers
from a script, so every path of the consumer (ack, DLQ, retry, reclaim, pause) is driven
deliberately. Waits are conditions with a deadline (``eventually``), never bare sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import grpc
import pytest
from prometheus_client import REGISTRY
from redis.exceptions import ResponseError

from actuator.consumer import ConsumerSettings, TaskConsumer
from actuator.outcome import Outcome, TaskResult
from actuator.pause import WRITER, PauseAction, PauseFlag, TaskPauseHandler, decide_pause
from actuator.settlement import (
    REASON_MAX_DELIVERIES,
    REASON_PERMANENT,
    Settlement,
    decide_settlement,
)
from tests.integration.ess_harness import SIGNING_KEY, Ess, EssFactory, metadata
from tests.integration.redis_cluster import LocalRedisCluster
from tests.integration.support import fetch_all
from tests.integration.test_ess_internal import experiment_with_work_units, stream_tasks
from tests.waiting import eventually, finishes
from xmc.model.states import WorkUnitState
from xmc.retry import RetryPolicy
from xmc.store.repository import Store
from xmc.streams import ACTUATOR_GROUP, TaskPublisher
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1 import scheduling_pb2
from xmc_api.internal.v1.tasks_pb2 import Task

ALICE, SERVICE = metadata("alice"), metadata("reconciler")
DONE = TaskResult(Outcome.DONE, "done")
RETRY = TaskResult(Outcome.RETRY, "apiserver 503", code="UNAVAILABLE")

#: Fast timings for tests: short blocking reads, no self-reclaim unless a test asks for it.
SETTINGS = ConsumerSettings(
    concurrency=8,
    claim_idle=30.0,
    max_deliveries=3,
    block=0.05,
    stop_timeout=5.0,
    retry=RetryPolicy(max_attempts=3, base=0.5, cap=30.0),
    redis_backoff=0.05,
)

Script = Callable[[Task, int], Awaitable[TaskResult]]


class FakeHandler:
    """Records every call and answers from ``script(task, call_number)`` (default DONE)."""

    def __init__(self, script: Script | None = None) -> None:
        self.calls: list[Task] = []
        self._script = script

    async def handle(self, task: Task) -> TaskResult:
        self.calls.append(task)
        if self._script is None:
            return DONE
        return await self._script(task, len(self.calls))


async def no_sleep(_seconds: float) -> None:
    await asyncio.sleep(0)


@dataclass
class Harness:
    ess: Ess
    store: Store
    running: list[tuple[TaskConsumer, asyncio.Task[None]]] = field(default_factory=list)

    def start(
        self,
        handler: FakeHandler,
        *,
        pause: TaskPauseHandler | None = None,
        sleep: Callable[[float], Awaitable[None]] = no_sleep,
        **settings: Any,
    ) -> TaskConsumer:
        consumer = TaskConsumer(
            self.ess.redis,
            self.ess.names,
            self.store,
            handler,
            signing_key=SIGNING_KEY,
            clock=self.ess.clock,
            settings=dataclasses.replace(SETTINGS, **settings),
            pause=pause,
            sleep=sleep,
            jitter=lambda: 0.5,
        )
        self.running.append((consumer, asyncio.create_task(consumer.run())))
        return consumer

    def publisher(self, clock: Callable[[], datetime] | None = None) -> TaskPublisher:
        return TaskPublisher(
            self.ess.redis, self.ess.names, signing_key=SIGNING_KEY, clock=clock or self.ess.clock
        )

    async def settled(self) -> tuple[int, int]:
        """(lag, pending) of the group: (0, 0) once every entry was read and acked;
        (-1, -1) before the consumer created the group."""
        try:
            groups = await self.ess.redis.xinfo_groups(self.ess.names.tasks)
        except ResponseError:  # no stream yet
            return -1, -1
        for group in groups:
            if group["name"] == ACTUATOR_GROUP.encode():
                return group["lag"], group["pending"]
        return -1, -1

    async def pending_ids(self) -> list[bytes]:
        rows = await self.ess.redis.xpending_range(
            self.ess.names.tasks, ACTUATOR_GROUP, min="-", max="+", count=100
        )
        return [row["message_id"] for row in rows]

    async def dlq(self) -> list[dict[bytes, bytes]]:
        return [fields for _id, fields in await self.ess.stream(self.ess.names.dlq)]

    async def dlq_size(self) -> int:
        return len(await self.dlq())

    async def operation(self, name: str) -> tuple[bool, int | None, str | None]:
        (row,) = await fetch_all(
            self.ess.database_url,
            "SELECT done, error_code, error_message FROM operations WHERE name = $1",
            name,
        )
        return row["done"], row["error_code"], row["error_message"]

    async def outbox_status(self, task_id: str) -> str | None:
        rows = await fetch_all(
            self.ess.database_url, "SELECT status FROM task_outbox WHERE task_id = $1", task_id
        )
        return rows[0]["status"] if rows else None


@pytest.fixture
async def harness(ess: Ess) -> AsyncIterator[Harness]:
    async with _harness(ess) as started:
        yield started


@pytest.fixture
async def cluster_harness(
    redis_cluster: LocalRedisCluster, ess_factory: EssFactory
) -> AsyncIterator[Harness]:
    """The harness with the ESS and the consumers on a 3-master Redis Cluster."""
    async with _harness(await ess_factory(redis_cluster_nodes=redis_cluster.nodes)) as started:
        yield started


@contextlib.asynccontextmanager
async def _harness(ess: Ess) -> AsyncIterator[Harness]:
    store = await Store.connect(ess.database_url, min_size=1, max_size=4)
    started = Harness(ess, store)
    yield started
    for consumer, runner in started.running:
        await finishes(consumer.stop(), within=10, what=f"consumer {consumer.name}'s stop")
        await runner
    await store.close()


async def fresh_tasks(ess: Ess, work_units: int) -> list[Task]:
    """Real CREATE tasks (and their Operations) from ESS, taken off the stream so the test
    decides what the consumer sees."""
    await experiment_with_work_units(ess, work_units)
    tasks = await stream_tasks(ess)
    await ess.redis.delete(ess.names.tasks)
    return tasks


def variant(task: Task, task_id: str, kind: Task.Kind.ValueType | None = None) -> Task:
    copy = Task()
    copy.CopyFrom(task)
    copy.task_id = task_id
    if kind is not None:
        copy.kind = kind
    return copy


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


# --- the decisions, as tables --------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "deliveries", "interrupted", "want"),
    [
        pytest.param(Outcome.DONE, 1, False, Settlement.ACK, id="done acks"),
        pytest.param(Outcome.SKIPPED, 9, False, Settlement.ACK, id="skipped acks"),
        pytest.param(Outcome.PARKED, 1, False, Settlement.ACK, id="parked acks"),
        pytest.param(Outcome.PERMANENT, 1, False, Settlement.DEAD_LETTER, id="permanent"),
        pytest.param(Outcome.RETRY, 1, False, Settlement.LEAVE_PENDING, id="deliveries left"),
        pytest.param(Outcome.RETRY, 3, False, Settlement.DEAD_LETTER_AND_CLOSE, id="last delivery"),
        pytest.param(Outcome.RETRY, 3, True, Settlement.LEAVE_PENDING, id="stop cut retries short"),
    ],
)
def test_decide_settlement(
    outcome: Outcome, deliveries: int, interrupted: bool, want: Settlement
) -> None:
    got = decide_settlement(
        outcome, deliveries=deliveries, max_deliveries=3, interrupted=interrupted
    )
    assert got == want


@pytest.mark.parametrize(
    ("kind", "paused", "want"),
    [
        pytest.param(Task.CREATE, False, PauseAction.PROCEED, id="running: create proceeds"),
        pytest.param(Task.CREATE, True, PauseAction.PARK_AND_MARK, id="paused create"),
        pytest.param(Task.RESTART, True, PauseAction.PARK_AND_MARK, id="paused restart"),
        pytest.param(Task.UPDATE, True, PauseAction.PARK, id="paused update: park only"),
        pytest.param(Task.DELETE, True, PauseAction.PROCEED, id="paused delete proceeds"),
        pytest.param(Task.KIND_UNSPECIFIED, True, PauseAction.PROCEED, id="unknown kind"),
    ],
)
def test_decide_pause(kind: int, paused: bool, want: PauseAction) -> None:
    assert decide_pause(kind, paused=paused) == want


# --- ack, DLQ, rejection -------------------------------------------------------------


async def test_handled_task_is_acked(harness: Harness) -> None:
    await experiment_with_work_units(harness.ess, 1)
    handler = FakeHandler()
    harness.start(handler)
    await eventually(harness.settled, (0, 0))
    assert [(t.kind, t.wid) for t in handler.calls] == [(Task.CREATE, 1)]
    assert await harness.dlq() == []


async def test_permanent_failure_is_dead_lettered_and_acked(harness: Harness) -> None:
    (task,) = await fresh_tasks(harness.ess, 1)
    entry_id = await harness.publisher().publish(task)

    async def invalid(_task: Task, _n: int) -> TaskResult:
        return TaskResult(
            Outcome.PERMANENT, "hostNetwork needs exclusive topology", "INVALID_ARGUMENT"
        )

    consumer = harness.start(FakeHandler(invalid))
    await eventually(harness.dlq_size, 1)
    await eventually(harness.settled, (0, 0))
    (dead,) = await harness.dlq()
    assert dead[b"reason"] == REASON_PERMANENT.encode()
    assert dead[b"code"] == b"INVALID_ARGUMENT"
    assert dead[b"detail"] == b"hostNetwork needs exclusive topology"
    assert dead[b"consumer"] == consumer.name.encode()
    assert dead[b"source_id"] == entry_id
    assert datetime.fromisoformat(dead[b"failed_at"].decode()) == harness.ess.clock.now
    assert Task.FromString(dead[b"task"]) == task, "the original fields travel with it"
    assert b"token" in dead
    # Closing the Operation is the handler's job for PERMANENT; the consumer leaves it be.
    assert await harness.operation(task.operation) == (False, None, None)


async def test_the_dlq_keeps_its_newest_entries_only(harness: Harness) -> None:
    """A misconfiguration that refuses every task must not fill Redis: past
    ``dlq_max_entries`` the oldest dead letters go, and the counter still counts each."""
    tasks = await fresh_tasks(harness.ess, 3)
    entry_ids = await harness.publisher().publish_many(tasks)
    before = counter("xmc_actuator_dlq_total", reason=REASON_PERMANENT)

    async def invalid(_task: Task, _n: int) -> TaskResult:
        return TaskResult(Outcome.PERMANENT, "refused", "INVALID_ARGUMENT")

    harness.start(FakeHandler(invalid), dlq_max_entries=2)

    async def dead_lettered() -> float:
        return counter("xmc_actuator_dlq_total", reason=REASON_PERMANENT) - before

    await eventually(dead_lettered, 3.0)
    await eventually(harness.settled, (0, 0))
    kept = [dead[b"source_id"] for dead in await harness.dlq()]
    assert len(kept) == 2
    assert set(kept) < set(entry_ids)


def _tampered(task: Task, fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    forged = variant(task, task.task_id)
    forged.wid += 1
    return {b"task": forged.SerializeToString(), b"token": fields[b"token"]}


def _unsigned(task: Task, _fields: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {b"task": task.SerializeToString()}


@pytest.mark.parametrize(
    ("forge", "reason", "code"),
    [
        pytest.param(_tampered, "digest_mismatch", grpc.StatusCode.INVALID_ARGUMENT, id="tampered"),
        pytest.param(_unsigned, "missing_field", grpc.StatusCode.PERMISSION_DENIED, id="unsigned"),
    ],
)
async def test_untrusted_entry_is_dead_lettered_and_touches_nothing(
    harness: Harness,
    forge: Callable[[Task, dict[bytes, bytes]], dict[bytes, bytes]],
    reason: str,
    code: grpc.StatusCode,
) -> None:
    await experiment_with_work_units(harness.ess, 1)
    ((_id, fields),) = await harness.ess.stream(harness.ess.names.tasks)
    (task,) = await stream_tasks(harness.ess)
    await harness.ess.redis.delete(harness.ess.names.tasks)
    await harness.ess.redis.xadd(harness.ess.names.tasks, forge(task, fields))
    before = counter("xmc_actuator_dlq_total", reason=reason)
    handler = FakeHandler()
    harness.start(handler)

    await eventually(harness.dlq_size, 1)
    await eventually(harness.settled, (0, 0))
    (dead,) = await harness.dlq()
    assert dead[b"reason"] == reason.encode()
    assert handler.calls == [], "an untrusted task is never handled"
    assert dead[b"code"] == code.name.encode()
    done, error_code, _message = await harness.operation(task.operation)
    assert (done, error_code) == (False, None), "a forged entry never closes an Operation"
    assert await harness.outbox_status(task.task_id) == "published", "nor settles the task"
    assert counter("xmc_actuator_dlq_total", reason=reason) == before + 1


async def test_expired_task_is_dead_lettered(harness: Harness) -> None:
    (task,) = await fresh_tasks(harness.ess, 1)
    two_days_ago = harness.ess.clock.now - timedelta(days=2)
    await harness.publisher(lambda: two_days_ago).publish(task)
    handler = FakeHandler()
    harness.start(handler)
    await eventually(harness.dlq_size, 1)
    (dead,) = await harness.dlq()
    assert dead[b"reason"] == b"expired"
    assert dead[b"code"] == b"FAILED_PRECONDITION"
    assert handler.calls == []
    done, _error_code, _ = await harness.operation(task.operation)
    assert not done, "left open: the relay re-drives the task with a fresh token"


# --- retries, reclaim, max deliveries ------------------------------------------------


async def test_transient_failures_are_retried_with_growing_backoff(harness: Harness) -> None:
    await experiment_with_work_units(harness.ess, 1)
    delays: list[float] = []

    async def record(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(0)

    async def flaky(_task: Task, n: int) -> TaskResult:
        return RETRY if n <= 2 else DONE

    handler = FakeHandler(flaky)
    harness.start(handler, sleep=record)
    await eventually(harness.settled, (0, 0))
    assert len(handler.calls) == 3
    # Equal jitter at 0.5: half of 0.5 s plus a quarter, then the same for 1 s.
    assert delays == [0.375, 0.75]
    assert await harness.dlq() == []


async def test_exhausted_retries_wait_for_a_reclaim_then_go_to_the_dlq(harness: Harness) -> None:
    await experiment_with_work_units(harness.ess, 1)
    (task,) = await stream_tasks(harness.ess)

    async def down(_task: Task, _n: int) -> TaskResult:
        return RETRY

    first = FakeHandler(down)
    consumer = harness.start(first, max_deliveries=2, retry=RetryPolicy(max_attempts=2))
    await eventually(lambda: _calls_then_idle(first, consumer), (2, 0))
    # Out of in-process attempts but not of deliveries: left pending, nothing closed.
    assert len(await harness.pending_ids()) == 1
    assert await harness.dlq() == []
    assert await harness.operation(task.operation) == (False, None, None)
    await consumer.stop()

    reclaimed = counter("xmc_actuator_reclaimed_total")
    second = FakeHandler(down)
    rescuer = harness.start(
        second, max_deliveries=2, retry=RetryPolicy(max_attempts=2), claim_idle=0.2
    )
    await eventually(harness.dlq_size, 1, within=5)
    await eventually(harness.settled, (0, 0))
    assert len(second.calls) == 2
    (dead,) = await harness.dlq()
    assert dead[b"reason"] == REASON_MAX_DELIVERIES.encode()
    assert dead[b"code"] == b"UNAVAILABLE"
    assert dead[b"consumer"] == rescuer.name.encode()
    done, error_code, _ = await harness.operation(task.operation)
    assert (done, error_code) == (True, grpc.StatusCode.UNAVAILABLE.value[0])
    assert counter("xmc_actuator_reclaimed_total") == reclaimed + 1


async def _calls_then_idle(handler: FakeHandler, consumer: TaskConsumer) -> tuple[int, int]:
    return len(handler.calls), consumer.in_flight


async def test_entry_whose_consumers_keep_dying_goes_to_the_dlq_unhandled(
    harness: Harness,
) -> None:
    await experiment_with_work_units(harness.ess, 1)
    (task,) = await stream_tasks(harness.ess)
    redis, stream = harness.ess.redis, harness.ess.names.tasks
    # A consumer reads the entry and dies before acking it: delivery 1 of 1 is spent.
    await redis.xgroup_create(stream, ACTUATOR_GROUP, id="0")
    await redis.xreadgroup(ACTUATOR_GROUP, "dead-consumer", {stream: ">"})
    handler = FakeHandler()
    harness.start(handler, max_deliveries=1, claim_idle=0.2)

    await eventually(harness.dlq_size, 1, within=5)
    await eventually(harness.settled, (0, 0))
    assert handler.calls == []
    (dead,) = await harness.dlq()
    assert dead[b"reason"] == REASON_MAX_DELIVERIES.encode()
    done, error_code, _ = await harness.operation(task.operation)
    assert (done, error_code) == (True, grpc.StatusCode.UNAVAILABLE.value[0])


async def test_on_a_redis_cluster_tasks_are_acked_and_a_dead_consumers_entry_reclaimed(
    cluster_harness: Harness,
) -> None:
    """Every Redis command of the relay and the consumer (the publish script, XREADGROUP,
    XACK, XAUTOCLAIM, XPENDING in a pipeline, the dead-letter script) on a cluster."""
    harness = cluster_harness
    await experiment_with_work_units(harness.ess, 3)
    redis, stream = harness.ess.redis, harness.ess.names.tasks
    # A consumer reads the first entry and dies before acking it: delivery 1 of 1 is spent.
    await redis.xgroup_create(stream, ACTUATOR_GROUP, id="0")
    await redis.xreadgroup(ACTUATOR_GROUP, "dead-consumer", {stream: ">"}, count=1)
    handler = FakeHandler()
    harness.start(handler, max_deliveries=1, claim_idle=0.2)

    await eventually(harness.dlq_size, 1, within=10)
    await eventually(harness.settled, (0, 0))
    assert len(handler.calls) == 2, "the two unread tasks were handled and acked"
    (dead,) = await harness.dlq()
    assert dead[b"reason"] == REASON_MAX_DELIVERIES.encode()


# --- per-work-unit serialization ------------------------------------------------------


async def test_tasks_of_one_work_unit_never_overlap_while_work_units_run_in_parallel(
    harness: Harness,
) -> None:
    creates = await fresh_tasks(harness.ess, 3)
    published: dict[int, list[str]] = {1: [], 2: [], 3: []}
    tasks = []
    for i in range(5):
        for create in creates:
            tasks.append(variant(create, f"wu{create.wid}-{i}"))
            published[create.wid].append(f"wu{create.wid}-{i}")
    await harness.publisher().publish_many(tasks)

    active: set[int] = set()
    overlaps: list[str] = []
    started: dict[int, list[str]] = {1: [], 2: [], 3: []}
    # Task i of every work unit stays in flight until task i of the other two has started:
    # this passes only if work units run in parallel, and while a task waits here the
    # consumer already holds (concurrency 8) the next task of its work unit, which would
    # start at once, overlapping, if the lanes did not serialize.
    rounds = [asyncio.Barrier(3) for _ in range(5)]

    async def work(task: Task, _n: int) -> TaskResult:
        if task.wid in active:
            overlaps.append(task.task_id)
        active.add(task.wid)
        started[task.wid].append(task.task_id)
        try:
            await asyncio.wait_for(rounds[int(task.task_id.rsplit("-", 1)[1])].wait(), 5)
        finally:
            active.discard(task.wid)
        return DONE

    harness.start(FakeHandler(work), concurrency=8)
    await eventually(harness.settled, (0, 0))
    assert overlaps == []
    assert started == published, "each work unit's tasks run in stream order"


# --- graceful stop --------------------------------------------------------------------


async def test_stop_lets_the_task_in_flight_finish_and_acks_it(harness: Harness) -> None:
    await experiment_with_work_units(harness.ess, 1)
    release = asyncio.Event()
    finished: list[str] = []

    async def slow(task: Task, _n: int) -> TaskResult:
        await release.wait()
        finished.append(task.task_id)
        return DONE

    handler = FakeHandler(slow)
    consumer = harness.start(handler)
    await eventually(lambda: _count(handler), 1)
    stopping = asyncio.create_task(consumer.stop())
    done, _ = await asyncio.wait({stopping}, timeout=0.1)
    assert not done, "stop waits for the task in flight"
    release.set()
    await asyncio.wait_for(stopping, 5)
    assert len(finished) == 1
    assert await harness.settled() == (0, 0)


async def test_stop_timeout_leaves_the_unfinished_task_pending(harness: Harness) -> None:
    await experiment_with_work_units(harness.ess, 1)
    cancelled: list[str] = []

    async def stuck(task: Task, _n: int) -> TaskResult:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(task.task_id)
            raise
        return DONE

    handler = FakeHandler(stuck)
    consumer = harness.start(handler, stop_timeout=0.1)
    await eventually(lambda: _count(handler), 1)
    await finishes(consumer.stop(), within=5, what="the stop")
    assert len(cancelled) == 1
    assert len(await harness.pending_ids()) == 1, "unacked: another consumer reclaims it"
    assert await harness.dlq() == []


async def _count(handler: FakeHandler) -> int:
    return len(handler.calls)


# --- scheduling pause ------------------------------------------------------------------


async def _pause(ess: Ess) -> None:
    await ess.scheduling.PauseScheduling(
        scheduling_pb2.PauseSchedulingRequest(reason="cluster upgrade"), metadata=SERVICE
    )


def _pause_handler(harness: Harness) -> TaskPauseHandler:
    flag = PauseFlag(harness.store)
    return TaskPauseHandler(harness.store, flag, clock=harness.ess.clock)


async def test_paused_scheduling_parks_creates_and_updates_and_lets_deletes_through(
    harness: Harness,
) -> None:
    ess = harness.ess
    await _pause(ess)
    create, other, third = await fresh_tasks(ess, 3)
    update = variant(other, "update-2", Task.UPDATE)
    delete = variant(third, "delete-3", Task.DELETE)
    await harness.publisher().publish_many([create, update, delete])
    handler = FakeHandler()
    harness.start(handler, pause=_pause_handler(harness))
    await eventually(harness.settled, (0, 0))

    assert [t.task_id for t in handler.calls] == ["delete-3"]
    parked = await fetch_all(
        ess.database_url,
        # Tasks of different work units are handled concurrently: park order among them is free.
        "SELECT task_id, wid, eid, kind, task FROM paused_tasks ORDER BY wid",
    )
    assert [(r["task_id"], r["wid"], r["eid"], r["kind"]) for r in parked] == [
        (create.task_id, 1, 1, Task.CREATE),
        ("update-2", 2, 1, Task.UPDATE),
    ]
    assert Task.FromString(parked[0]["task"]) == create
    states = await fetch_all(ess.database_url, "SELECT wid, state FROM work_units ORDER BY wid")
    assert [(r["wid"], r["state"]) for r in states] == [
        (1, WorkUnitState.SCHEDULING_PAUSED),
        (2, WorkUnitState.INITIALIZING),
        (3, WorkUnitState.INITIALIZING),
    ]
    (execution,) = await fetch_all(
        ess.database_url,
        "SELECT eid, state, state_update_time, system_message FROM work_units WHERE wid = 1",
    )
    assert (execution["eid"], execution["state"]) == (1, WorkUnitState.SCHEDULING_PAUSED)
    assert execution["state_update_time"] == ess.clock.now
    message = StructuredMessage.FromString(execution["system_message"])
    assert message.severity == StructuredMessage.INFO
    assert message.source == StructuredMessage.XMANAGER_BACKEND
    assert "cluster upgrade" in message.user_facing_text
    (history,) = await fetch_all(
        ess.database_url,
        "SELECT old_state, new_state, writer FROM work_unit_status_history WHERE writer = $1",
        WRITER,
    )
    assert (history["old_state"], history["new_state"]) == (
        WorkUnitState.INITIALIZING,
        WorkUnitState.SCHEDULING_PAUSED,
    )
    assert await harness.operation(create.operation) == (False, None, None)


async def test_a_paused_restart_parks_by_target_and_marks_the_new_execution(
    harness: Harness,
) -> None:
    ess = harness.ess
    await _pause(ess)
    parent = await experiment_with_work_units(ess, 1)
    await ess.api.RestartWorkUnit(
        api_pb2.RestartWorkUnitRequest(name=f"{parent}/workUnits/1"), metadata=ALICE
    )
    restart = [t for t in await stream_tasks(ess) if t.kind == Task.RESTART]
    assert [(t.target_eid, t.payload.eid) for t in restart] == [(1, 2)]
    harness.start(FakeHandler(), pause=_pause_handler(harness))
    await eventually(harness.settled, (0, 0))

    parked = await fetch_all(ess.database_url, "SELECT kind, eid FROM paused_tasks ORDER BY id")
    # The resume worker judges a parked task by its target eid (ShouldSkipTask).
    assert [(r["kind"], r["eid"]) for r in parked] == [(Task.CREATE, 1), (Task.RESTART, 1)]
    (row,) = await fetch_all(ess.database_url, "SELECT eid, state FROM work_units")
    assert (row["eid"], row["state"]) == (2, WorkUnitState.SCHEDULING_PAUSED)


async def test_a_redelivered_create_is_parked_once(harness: Harness) -> None:
    ess = harness.ess
    await _pause(ess)
    (create,) = await fresh_tasks(ess, 1)
    # The same signed task twice: as after a crash between parking and acking.
    await harness.publisher().publish_many([create, create])
    harness.start(FakeHandler(), pause=_pause_handler(harness))
    await eventually(harness.settled, (0, 0))

    parked = await fetch_all(ess.database_url, "SELECT task_id FROM paused_tasks")
    assert [r["task_id"] for r in parked] == [create.task_id]
    history = await fetch_all(
        ess.database_url, "SELECT id FROM work_unit_status_history WHERE writer = $1", WRITER
    )
    assert len(history) == 1
    messages = await fetch_all(
        ess.database_url,
        "SELECT id FROM status_messages WHERE wid = 1 AND field = 'system_message'",
    )
    assert len(messages) == 1


async def test_pause_flag_change_is_seen_within_a_second(harness: Harness) -> None:
    flag = PauseFlag(harness.store)
    assert not await flag.is_paused()
    await _pause(harness.ess)
    await eventually(flag.is_paused, True, within=1.0)


async def test_pause_flag_rereads_postgres_only_after_the_refresh_interval(
    harness: Harness,
) -> None:
    now = [0.0]
    flag = PauseFlag(harness.store, refresh_seconds=0.5, clock=lambda: now[0])
    assert not await flag.is_paused()
    await _pause(harness.ess)
    now[0] = 0.49
    assert not await flag.is_paused(), "cached"
    now[0] = 0.5
    assert await flag.is_paused()
    assert flag.reason == "cluster upgrade"
