"""The task outbox and its relay against a real ESS, Postgres and a private Redis that the
tests stop, kill and restart (SPEC §6 "No intent is lost").

The ESS runs on the fixed test clock, so every relay check comes due only when a test
advances it: nothing here waits on wall time for a re-drive.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import grpc
import pytest
import redis.asyncio as aioredis
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import GetOperationRequest

from ess import relay as relay_module
from ess.relay import OutboxRelay
from tests.integration.ess_harness import SIGNING_KEY, Ess, metadata
from tests.integration.redis_server import RedisServer
from tests.integration.support import fetch_all, minimal_work_unit
from tests.waiting import eventually
from xmc.model.outbox import RelaySettings
from xmc.model.states import Severity, WorkUnitState
from xmc.store.transactions import mark_published
from xmc.streams import ACTUATOR_GROUP
from xmc.tasks import verify_task
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1.tasks_pb2 import Task

S = WorkUnitState
ALICE = metadata("alice")
#: Quick checks, few publishes: every path is reached in a handful of clock steps.
RELAY = RelaySettings(
    first_check_seconds=1.0, max_check_seconds=8.0, max_publishes=3, redis_restart_check_seconds=0
)


async def _ess(ess_factory: Any, redis: RedisServer, **relay: Any) -> Ess:
    settings = dataclasses.replace(RELAY, **relay)
    started: Ess = await ess_factory(redis_url=redis.url, relay=settings)
    return started


async def _experiment(ess: Ess) -> str:
    created = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    return str(created.name)


async def _create(ess: Ess, parent: str) -> tuple[str, str]:
    """(work unit name, operation name)."""
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    return str(operation.name).split("/operations/")[0], str(operation.name)


async def _stream(ess: Ess, redis: RedisServer) -> list[tuple[str, Task]]:
    """The stream as a fresh client sees it: the ESS's pool may still hold connections
    from before a restart, and the test's eyes must not fail on those."""
    client: Any = aioredis.Redis.from_url(redis.url)
    try:
        entries = await client.xrange(ess.names.tasks)
    finally:
        await client.aclose()
    return [
        (entry_id.decode(), verify_task(fields, key=SIGNING_KEY, now=ess.clock.now))
        for entry_id, fields in entries
    ]


async def _rows(ess: Ess) -> list[dict[str, Any]]:
    rows = await fetch_all(
        ess.database_url,
        "SELECT task_id, kind, status, publish_count, outcome FROM task_outbox ORDER BY seq",
    )
    return [dict(r) for r in rows]


def _relay(ess: Ess) -> OutboxRelay:
    assert ess.server.relay is not None
    return ess.server.relay


async def _operation(ess: Ess, name: str) -> Any:
    stub = operations_grpc_pb2.OperationsStub(ess.channel)
    return await stub.GetOperation(GetOperationRequest(name=name), metadata=ALICE)


async def test_intents_made_while_redis_is_down_are_published_when_it_is_back(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    ess = await _ess(ess_factory, private_redis)
    parent = await _experiment(ess)
    await private_redis.stop()

    first, create_op = await _create(ess, parent)
    await ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=first), metadata=ALICE)
    await _create(ess, parent)
    await ess.api.BatchRestartWorkUnits(
        api_pb2.BatchRestartWorkUnitsRequest(parent=parent, filter="state = INITIALIZING"),
        metadata=ALICE,
    )

    # Every RPC answered; the intents are stored, their Operations open, no error message.
    work_unit = await ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=first), metadata=ALICE)
    assert S(work_unit.current_work_unit_execution.status.state) == S.STOPPING
    assert not work_unit.current_work_unit_execution.status.HasField("system_message")
    assert not (await _operation(ess, create_op)).done
    assert [r["status"] for r in await _rows(ess)] == ["pending"] * 4

    await private_redis.start()
    await eventually(ess.unpublished, 0, within=15)

    kinds = [task.kind for _id, task in await _stream(ess, private_redis)]
    assert kinds == [Task.CREATE, Task.DELETE, Task.CREATE, Task.RESTART], "in commit order"
    assert [r["publish_count"] for r in await _rows(ess)] == [1, 1, 1, 1]


async def test_a_redis_restart_without_persistence_re_drives_what_it_lost(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    ess = await _ess(ess_factory, private_redis)
    parent = await _experiment(ess)
    names = [(await _create(ess, parent))[0] for _ in range(3)]
    await ess.relayed()
    before = {task.task_id for _id, task in await _stream(ess, private_redis)}
    assert len(before) == 3

    await private_redis.restart()  # the stream and everything on it is gone
    assert await _stream(ess, private_redis) == []
    ess.clock.advance(RELAY.first_check_seconds)
    relay = _relay(ess)
    relay.wake()

    async def republished() -> set[str]:
        return {task.task_id for _id, task in await _stream(ess, private_redis)}

    await eventually(republished, before, within=15)
    assert [r["publish_count"] for r in await _rows(ess)] == [2, 2, 2]
    assert len(names) == 3


async def test_after_a_redis_restart_even_a_task_checked_long_from_now_is_re_driven(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    """A task waiting in a backlog is checked ever more rarely; a restart of Redis (a new
    run id) makes every published task due at once."""
    ess = await _ess(ess_factory, private_redis)
    await _create(ess, await _experiment(ess))
    await ess.relayed()
    ess.clock.advance(7)
    _relay(ess).wake()

    async def next_check_in_the_future() -> bool:
        (row,) = await fetch_all(ess.database_url, "SELECT next_attempt FROM task_outbox")
        return bool(row["next_attempt"] > ess.clock.now)

    await eventually(next_check_in_the_future, True)  # checked: 7 s from now

    await private_redis.restart()
    _relay(ess).wake()  # the test clock does not move

    async def entries() -> int:
        return len(await _stream(ess, private_redis))

    await eventually(entries, 1, within=15)
    (row,) = await _rows(ess)
    assert row["publish_count"] == 2


async def test_an_entry_refused_unfinished_is_re_driven_with_a_fresh_token(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    """Acked by the group but never finished (the Actuator refused it: an expired token,
    say): it can no longer arrive, so the relay publishes it again."""
    ess = await _ess(ess_factory, private_redis)
    await _create(ess, await _experiment(ess))
    await ess.relayed()
    client = ess.server.redis
    await client.xgroup_create(ess.names.tasks, ACTUATOR_GROUP, id="0", mkstream=True)
    reply = await client.xreadgroup(ACTUATOR_GROUP, "refuser", {ess.names.tasks: ">"}, count=10)
    ((_stream_name, ((entry_id, _fields),)),) = reply
    await client.xack(ess.names.tasks, ACTUATOR_GROUP, entry_id)

    ess.clock.advance(RELAY.first_check_seconds)
    _relay(ess).wake()

    async def entries() -> int:
        return len(await _stream(ess, private_redis))

    await eventually(entries, 2, within=15)

    async def publishes() -> tuple[str, int]:  # the XADD comes before its commit
        (row,) = await _rows(ess)
        return (row["status"], row["publish_count"])

    await eventually(publishes, ("published", 2), within=15)


async def test_a_backlog_and_a_task_in_flight_are_checked_again_not_re_driven(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    ess = await _ess(ess_factory, private_redis)
    parent = await _experiment(ess)
    await _create(ess, parent)
    await _create(ess, parent)
    await ess.relayed()
    client = ess.server.redis
    await client.xgroup_create(ess.names.tasks, ACTUATOR_GROUP, id="0", mkstream=True)
    # The first is delivered and held (in flight), the second not delivered (backlog).
    await client.xreadgroup(ACTUATOR_GROUP, "slow", {ess.names.tasks: ">"}, count=1)

    async def both_checked_again() -> bool:
        rows = await fetch_all(ess.database_url, "SELECT next_attempt FROM task_outbox")
        return all(r["next_attempt"] > ess.clock.now for r in rows)

    for _ in range(4):
        ess.clock.advance(RELAY.max_check_seconds)
        _relay(ess).wake()
        await eventually(both_checked_again, True)
    assert len(await _stream(ess, private_redis)) == 2
    assert [r["publish_count"] for r in await _rows(ess)] == [1, 1]


async def test_a_task_that_can_never_arrive_is_abandoned_and_fails_its_execution(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    ess = await _ess(ess_factory, private_redis)
    name, operation = await _create(ess, await _experiment(ess))
    await ess.relayed()

    async def lost_once_more(published: int) -> None:
        """The stream loses the task; the relay's next check re-drives or abandons it."""
        await ess.server.redis.delete(ess.names.tasks)
        ess.clock.advance(RELAY.max_check_seconds)
        _relay(ess).wake()

        async def acted() -> bool:
            (row,) = await _rows(ess)
            return bool(row["publish_count"] > published or row["status"] == "finished")

        await eventually(acted, True)

    for published in range(1, RELAY.max_publishes + 1):
        await lost_once_more(published)

    (row,) = await _rows(ess)
    assert (row["status"], row["outcome"]) == ("finished", "abandoned")
    closed = await _operation(ess, operation)
    assert closed.done
    assert closed.error.code == grpc.StatusCode.UNAVAILABLE.value[0]
    work_unit = await ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name), metadata=ALICE)
    status = work_unit.current_work_unit_execution.status
    assert S(status.state) == S.FAILED
    assert Severity(status.system_message.severity) == Severity.FATAL
    assert "could not deliver the create request" in status.system_message.user_facing_text


async def test_a_crash_between_xadd_and_commit_publishes_the_attempt_once(
    ess_factory: Any, private_redis: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    ess = await _ess(ess_factory, private_redis)
    real = mark_published
    calls = 0

    async def die_once(*args: Any, **kwargs: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionResetError("the ESS died right after XADD")
        await real(*args, **kwargs)

    monkeypatch.setattr(relay_module, "mark_published", die_once)
    await _create(ess, await _experiment(ess))
    await ess.relayed()

    assert calls >= 2, "the first pass rolled back and the next one published again"
    assert len(await _stream(ess, private_redis)) == 1, "Redis answered with the first entry"
    (row,) = await _rows(ess)
    assert (row["status"], row["publish_count"]) == ("published", 1)


async def test_two_relays_publish_every_task_once(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    """Two ESS replicas on one database: one relays at a time (the relay lock), each
    task reaches the stream once, in commit order."""
    first = await _ess(ess_factory, private_redis)
    second = await _ess(ess_factory, private_redis)
    parent = await _experiment(first)
    for i in range(20):
        await _create(first if i % 2 else second, parent)
    await first.relayed()

    tasks = [task for _id, task in await _stream(first, private_redis)]
    assert len(tasks) == len({t.task_id for t in tasks}) == 20
    assert [t.wid for t in tasks] == list(range(1, 21))


async def test_the_relay_trims_the_stream_of_entries_no_task_needs(
    ess_factory: Any, private_redis: RedisServer
) -> None:
    """Without trimming the stream keeps every task ever published, and Redis's memory
    grows with them. Entries of finished tasks go; the oldest task still on its way keeps
    its entry, and every newer one stays; once every task is finished only the last
    entry is left."""
    client: Any = aioredis.Redis.from_url(private_redis.url)
    try:
        await client.config_set("stream-node-max-entries", 1)  # approximate trims are exact
    finally:
        await client.aclose()
    ess = await _ess(ess_factory, private_redis, trim_seconds=0)
    parent = await _experiment(ess)
    for _ in range(4):
        await _create(ess, parent)
    await ess.relayed()
    entries = await _stream(ess, private_redis)
    ids = [entry_id for entry_id, _task in entries]
    assert len(ids) == 4

    async def finish(*indexes: int) -> None:
        """What the Actuator records when it is done with a task."""
        await fetch_all(
            ess.database_url,
            """UPDATE task_outbox SET status = 'finished', finished_time = now(),
                   next_attempt = NULL, outcome = 'done'
               WHERE task_id = ANY($1::text[]) RETURNING task_id""",
            [entries[i][1].task_id for i in indexes],
        )
        _relay(ess).wake()

    async def left() -> list[str]:
        return [entry_id for entry_id, _task in await _stream(ess, private_redis)]

    await finish(0, 1, 3)  # the third is still on its way
    await eventually(left, ids[2:])

    ess.clock.advance(RELAY.first_check_seconds)
    _relay(ess).wake()

    async def checked_again() -> bool:
        rows = await fetch_all(
            ess.database_url, "SELECT next_attempt FROM task_outbox WHERE status = 'published'"
        )
        return all(r["next_attempt"] > ess.clock.now for r in rows)

    await eventually(checked_again, True)
    assert [r["publish_count"] for r in await _rows(ess)] == [1, 1, 1, 1], "none re-driven"
    assert await left() == ids[2:]

    await finish(2)
    await eventually(left, ids[3:])
