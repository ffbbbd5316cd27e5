"""WatchService over real gRPC against a real ESS and Postgres (docs/watch.md, decision
0043): changes arrive in commit order; a reconnect with a cursor misses nothing and sees
nothing twice, also when transactions commit out of id order; a slow watcher falls back
to the database without losing anything; scopes and refusals."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import asyncpg
import grpc
import pytest

from ess.app import run_janitor_once
from ess.watch_hub import WatchSettings
from tests.integration.ess_harness import Ess, EssFactory, metadata
from tests.integration.support import minimal_work_unit
from tests.integration.test_cli import xmc
from tests.integration.test_ess_api import expect_error
from tests.integration.watching import Watcher, observe
from tests.servers import ADMIN_DSN
from tests.waiting import eventually, holds_for
from xmc.model.states import ActiveState, LaunchState, WorkUnitState
from xmc.model.watch import EXPERIMENT_EVENT_RETENTION
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.xmc.v1 import watch_pb2, watch_pb2_grpc
from xmc_cli.client import Client

S = WorkUnitState
ALICE, BOB = metadata("alice"), metadata("bob")


async def new_experiment(ess: Ess, who: tuple[tuple[str, str], ...] = ALICE) -> str:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=who
    )
    return experiment.name


async def new_unit(ess: Ess, experiment: str, who: tuple[tuple[str, str], ...] = ALICE) -> str:
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=experiment, work_unit=minimal_work_unit()),
        metadata=who,
    )
    name: str = operation.name.split("/operations/")[0]
    return name


def created(unit: str) -> tuple[object, ...]:
    return ("state", unit, 1, "WORK_UNIT_STATE_UNSPECIFIED", "INITIALIZING", True)


def moved(unit: str, old: str, new: str, eid: int = 1) -> tuple[object, ...]:
    return ("state", unit, eid, old, new, False)


async def test_changes_arrive_in_commit_order(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    watcher = await Watcher(ess, experiment=experiment).started()
    unit = await new_unit(ess, experiment)
    await observe(ess, unit, S.RUNNING, 10, text="warming up")
    await observe(ess, unit, S.COMPLETED, 20)
    await ess.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=experiment,
            launch_state=int(LaunchState.COMPLETED),  # type: ignore[arg-type]
        ),
        metadata=ALICE,
    )
    await ess.api.RestartWorkUnit(api_pb2.RestartWorkUnitRequest(name=unit), metadata=ALICE)
    changes = await watcher.until(7)
    messages = [e.message.name for e in watcher.change_events() if e.HasField("message")]
    assert changes == [
        created(unit),
        moved(unit, "INITIALIZING", "RUNNING"),
        ("message", messages[0], "warming up"),
        moved(unit, "RUNNING", "COMPLETED"),
        ("experiment", experiment, False, int(ActiveState.INACTIVE)),
        ("state", unit, 2, "COMPLETED", "RESTARTING", True),
        ("experiment", experiment, False, int(ActiveState.ACTIVE)),
    ]
    cursors = [e.cursor for e in watcher.events]
    assert len(set(cursors)) == len(cursors), "every event has its own cursor"
    await watcher.close()


async def test_reconnect_with_a_cursor_misses_nothing_and_nothing_twice(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    whole = await Watcher(ess, experiment=experiment).started()
    first = await Watcher(ess, experiment=experiment).started()
    units = [await new_unit(ess, experiment) for _ in range(3)]
    await first.until(3)
    await first.close()
    resume_from = first.change_events()[-1].cursor

    # Changes while the first watcher is away, then more once it is back.
    for i, unit in enumerate(units):
        await observe(ess, unit, S.RUNNING, 10 + i, text=f"unit {i}")
    again = await Watcher(ess, experiment=experiment, cursor=resume_from).started()
    for i, unit in enumerate(units):
        await observe(ess, unit, S.COMPLETED, 20 + i)
    everything = await whole.until(12)
    resumed = await again.until(9)
    assert first.changes() + resumed == everything
    assert again.events[0].cursor == resume_from, "a resumed stream opens at its cursor"
    await holds_for(lambda: len(again.changes()), 9, during=0.5)
    await asyncio.gather(whole.close(), again.close())


async def test_transactions_committing_out_of_id_order(ess: Ess) -> None:
    """A transaction holding a smaller message id commits after one holding a larger id:
    a watcher sees neither until both are final, then both, in commit order; a cursor
    taken between them resumes without losing the first."""
    experiment = await new_experiment(ess)
    watcher = await Watcher(ess, experiment=experiment).started()
    unit = await new_unit(ess, experiment)
    xid, wid = (int(part) for part in unit.split("/")[1::2])
    await watcher.until(1)  # the create

    held = await asyncpg.connect(ess.database_url)
    try:
        transaction = held.transaction()
        await transaction.start()
        content = StructuredMessage(user_facing_text="held").SerializeToString()
        held_id = await held.fetchval(
            """INSERT INTO status_messages (xid, wid, eid, field, severity, content, create_time)
               VALUES ($1, $2, 1, 'user_message', 20, $3, now()) RETURNING id""",
            xid,
            wid,
            content,
        )
        await observe(ess, unit, S.RUNNING, 10, text="committed first")
        # Committed, but behind a transaction still open: not final yet.
        await holds_for(lambda: len(watcher.changes()), 1, during=1.0)
        await transaction.commit()
    finally:
        await held.close()
    changes = await watcher.until(4)
    later_id = int(watcher.change_events()[3].message.name.rsplit("/", 1)[1])
    assert held_id < later_id
    assert changes[1:] == [
        ("message", f"{unit}/statusMessages/{held_id}", "held"),
        moved(unit, "INITIALIZING", "RUNNING"),
        ("message", f"{unit}/statusMessages/{later_id}", "committed first"),
    ], "the held transaction committed last but has the smaller txid: it ends first"
    # A cursor right after the held message still gets the rest, once each.
    after_held = watcher.change_events()[1].cursor
    resumed = await Watcher(ess, experiment=experiment, cursor=after_held).started()
    assert await resumed.until(2) == changes[2:]
    await holds_for(lambda: len(resumed.changes()), 2, during=0.5)
    await asyncio.gather(watcher.close(), resumed.close())


async def test_a_slow_watcher_falls_back_to_the_database(ess_factory: EssFactory) -> None:
    """A watcher whose buffer overflows drops what it held and reads its way back from its
    last position, in pages: complete, in order, nothing twice."""
    ess = await ess_factory(watch=WatchSettings(buffer_events=2, catch_up_page=3))
    experiment = await new_experiment(ess)
    units = [await new_unit(ess, experiment) for _ in range(4)]
    whole = await Watcher(ess, experiment=experiment).started()
    watcher = await Watcher(ess, experiment=experiment).started()
    request = api_pb2.BatchStopWorkUnitsRequest(parent=experiment)
    await ess.api.BatchStopWorkUnits(request, metadata=ALICE)  # one window of 4 events
    for unit in units:
        await observe(ess, unit, S.STOPPED, 30)
    expected = [moved(u, "INITIALIZING", "STOPPING") for u in units] + [
        moved(u, "STOPPING", "STOPPED") for u in units
    ]
    assert await whole.until(8) == expected
    assert await watcher.until(8) == expected
    await holds_for(lambda: len(watcher.changes()), 8, during=0.5)
    await asyncio.gather(whole.close(), watcher.close())


async def test_scopes(ess: Ess) -> None:
    """Without an experiment: the caller's own experiments; all_experiments: every one."""
    mine = await Watcher(ess).started()
    everyone = await Watcher(ess, who="bob", all_experiments=True).started()
    alices = await new_experiment(ess)
    bobs = await new_experiment(ess, BOB)
    await new_unit(ess, bobs, BOB)
    alices_unit = await new_unit(ess, alices)
    created_alices = ("experiment", alices, True, int(ActiveState.ACTIVE))
    created_bobs = ("experiment", bobs, True, int(ActiveState.ACTIVE))
    assert await mine.until(2) == [created_alices, created(alices_unit)]
    assert (await everyone.until(4))[:2] == [created_alices, created_bobs]
    await holds_for(lambda: len(mine.changes()), 2, during=0.5)
    await asyncio.gather(mine.close(), everyone.close())


async def test_refusals(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    stub = watch_pb2_grpc.WatchServiceStub(ess.channel)

    async def first(request: watch_pb2.WatchRequest, **kwargs: object) -> None:
        call = stub.WatchExperiments(request, **kwargs)
        await call.read()

    plain = watch_pb2.WatchRequest(experiment=experiment)
    await expect_error(first(plain), grpc.StatusCode.UNAUTHENTICATED, "")
    await expect_error(
        first(plain, metadata=(("authorization", "Bearer nope"),)),
        grpc.StatusCode.UNAUTHENTICATED,
        "",
    )
    await expect_error(
        first(watch_pb2.WatchRequest(experiment="experiments/999"), metadata=ALICE),
        grpc.StatusCode.NOT_FOUND,
        "experiments/999",
    )
    await expect_error(
        first(watch_pb2.WatchRequest(experiment="projects/1"), metadata=ALICE),
        grpc.StatusCode.INVALID_ARGUMENT,
        "experiment",
    )
    await expect_error(
        first(watch_pb2.WatchRequest(experiment=experiment, all_experiments=True), metadata=ALICE),
        grpc.StatusCode.INVALID_ARGUMENT,
        "all_experiments",
    )
    for bad in ("not a cursor", "bm9wZQ", "MTphOmI6Yzpk", "x" * 500):
        await expect_error(
            first(watch_pb2.WatchRequest(experiment=experiment, cursor=bad), metadata=ALICE),
            grpc.StatusCode.INVALID_ARGUMENT,
            "cursor",
        )
    watcher = await Watcher(ess, experiment=experiment).started()
    cursor = watcher.events[0].cursor
    await watcher.close()
    ess.clock.advance(timedelta(days=7, seconds=1).total_seconds())
    await expect_error(
        first(watch_pb2.WatchRequest(experiment=experiment, cursor=cursor), metadata=ALICE),
        grpc.StatusCode.OUT_OF_RANGE,
        "cursor",
    )


async def test_one_shared_poll_for_every_watcher(ess: Ess) -> None:
    """The hub's query count does not grow with the number of watchers: 20 watchers of
    5 commits cost a handful of polls (commits of other databases on the same Postgres
    move the horizon too, hence no exact count), not one per watcher per change."""
    watchers = 20
    hub = ess.server.watch_hub
    assert hub is not None
    experiment = await new_experiment(ess)
    streams = [await Watcher(ess, experiment=experiment).started() for _ in range(watchers)]
    units = [await new_unit(ess, experiment) for _ in range(5)]
    polls_before = hub.polls
    for unit in units:
        await observe(ess, unit, S.RUNNING, 10)
    for stream in streams:
        await stream.until(10)
    assert hub.polls - polls_before < watchers
    await asyncio.gather(*(stream.close() for stream in streams))


async def test_xmc_watch_follows_the_stream(ess: Ess) -> None:
    """``xmc watch`` holds one stream open and re-reads the experiment when it pushes a
    change: the transcript shows each state and the watch ends once INACTIVE."""
    hub = ess.server.watch_hub
    assert hub is not None
    experiment = await new_experiment(ess)
    unit = await new_unit(ess, experiment)
    argv = (experiment, "--until-inactive", "--interval", "0.05")
    watching = asyncio.create_task(xmc(ess, "watch", *argv))
    await eventually(lambda: hub.watchers, 1, within=10, what="the CLI's stream")
    await observe(ess, unit, S.RUNNING, 10)
    await observe(ess, unit, S.COMPLETED, 20)
    await ess.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=experiment,
            launch_state=int(LaunchState.COMPLETED),  # type: ignore[arg-type]
        ),
        metadata=ALICE,
    )
    result = await asyncio.wait_for(watching, timeout=30)
    assert result.exit_code == 0, result.output
    lines = [line.split("  ", 1)[1] for line in result.stdout.splitlines() if "  " in line]
    # The first snapshot is read after the stream registers, so RUNNING may already be in
    # it on a loaded machine: what must hold is the unit in it, then the pushed change.
    assert lines[1] in ("wu 1  INITIALIZING", "wu 1  RUNNING"), lines
    assert any(line.startswith("wu 1  ") and line.endswith("→ COMPLETED") for line in lines)
    assert result.stdout.rstrip().endswith(
        f"{experiment} is INACTIVE (launch COMPLETED): 1 COMPLETED"
    )
    await eventually(lambda: hub.watchers, 0, within=10, what="the stream closed")


async def test_xmc_watch_polls_without_the_push_api(
    ess: Ess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ESS without the push API (UNIMPLEMENTED) leaves the watch polling, not failing."""
    experiment = await new_experiment(ess)
    await ess.api.UpdateExperimentLaunchState(
        api_pb2.UpdateExperimentLaunchStateRequest(
            name=experiment,
            launch_state=int(LaunchState.FAILED),  # type: ignore[arg-type]
        ),
        metadata=ALICE,
    )

    class Refusing:
        """A stub whose stream the ESS does not know: UNIMPLEMENTED, as from an older ESS."""

        def __init__(self, channel: grpc.Channel) -> None:
            self.WatchExperiments = channel.unary_stream(
                "/xmc.v1.WatchService/NoSuchMethod",
                request_serializer=watch_pb2.WatchRequest.SerializeToString,
                response_deserializer=watch_pb2.WatchEvent.FromString,
            )

    monkeypatch.setattr(Client, "watches", property(lambda self: Refusing(self.channel())))
    result = await xmc(ess, "watch", experiment, "--until-inactive", "--interval", "0.05")
    assert result.exit_code == 0, result.output
    assert result.stdout.rstrip().endswith(
        f"{experiment} is INACTIVE (launch FAILED): no work units"
    )


async def test_a_transaction_of_another_database_does_not_hold_the_watch(ess: Ess) -> None:
    """xids are cluster-wide: a transaction left open in another database of the same
    Postgres must not hold this database's events back (the horizon is this database's)."""
    experiment = await new_experiment(ess)
    watcher = await Watcher(ess, experiment=experiment).started()
    elsewhere = await asyncpg.connect(ADMIN_DSN)
    try:
        transaction = elsewhere.transaction()
        await transaction.start()
        await elsewhere.fetchval("SELECT pg_current_xact_id()")  # holds an xid from here
        unit = await new_unit(ess, experiment)
        assert await watcher.until(1, within=10) == [created(unit)]
        await transaction.rollback()
    finally:
        await elsewhere.close()
    await watcher.close()


async def test_the_janitor_drops_old_experiment_events_only(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    await new_unit(ess, experiment)
    store = ess.server.store
    assert store is not None

    async def counts() -> tuple[int, int]:
        async with store.connection() as conn:
            events = await conn.fetchval("SELECT count(*) FROM experiment_events")
            history = await conn.fetchval("SELECT count(*) FROM work_unit_status_history")
        return events, history

    assert await counts() == (1, 1)
    await run_janitor_once(store, now=ess.clock() + EXPERIMENT_EVENT_RETENTION)
    assert await counts() == (1, 1), "kept for the whole retention"
    await run_janitor_once(store, now=ess.clock() + EXPERIMENT_EVENT_RETENTION + timedelta(1))
    assert await counts() == (0, 1), "history is never dropped"


async def test_once_reads_what_changed_since_a_cursor_and_ends(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    stub = watch_pb2_grpc.WatchServiceStub(ess.channel)

    async def once(cursor: str = "") -> list[watch_pb2.WatchEvent]:
        request = watch_pb2.WatchRequest(experiment=experiment, cursor=cursor, once=True)
        call = stub.WatchExperiments(request, metadata=ALICE)
        return [event async for batch in call for event in batch.events]

    (start, end) = await once()
    assert (start.WhichOneof("kind"), end.WhichOneof("kind")) == ("sync", "sync")
    unit = await new_unit(ess, experiment)
    await observe(ess, unit, S.RUNNING, 10)

    async def since_start() -> list[watch_pb2.WatchEvent]:
        return (await once(end.cursor))[1:-1]

    changes = await eventually(since_start, lambda found: len(found) == 2, what="both")
    assert [S(e.state_change.to_state) for e in changes] == [S.INITIALIZING, S.RUNNING]
    assert (await once(changes[-1].cursor))[1:-1] == [], "nothing twice"


async def test_a_change_committed_by_another_replica_arrives(ess_factory: EssFactory) -> None:
    """Two ESS replicas on one database: a watcher of one sees what the other commits
    (no wake crosses processes: the hub's period finds it)."""
    first, second = await ess_factory(), await ess_factory()
    experiment = await new_experiment(first)
    watcher = await Watcher(first, experiment=experiment).started()
    unit = await new_unit(second, experiment)
    await observe(second, unit, S.RUNNING, 10)
    assert await watcher.until(2) == [created(unit), moved(unit, "INITIALIZING", "RUNNING")]
    await watcher.close()


async def test_a_stopping_ess_ends_its_streams_at_once(ess_factory: EssFactory) -> None:
    """UNAVAILABLE (reconnect with the last cursor), without waiting out the grace period."""
    ess = await ess_factory()
    experiment = await new_experiment(ess)
    watcher = await Watcher(ess, experiment=experiment).started()
    loop = asyncio.get_running_loop()
    began = loop.time()
    await ess.server.stop(grace=10)
    assert loop.time() - began < 5
    await eventually(lambda: watcher.error, what="the stream's end")
    assert watcher.error is not None
    assert watcher.error.code() == grpc.StatusCode.UNAVAILABLE
    assert "cursor" in (watcher.error.details() or "")
