"""Full-row writes (SPEC §4): experiments, work-unit creation and restart."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.integration.support import (
    T0,
    FakeClock,
    fetch_all,
    message,
    message_update,
    snapshot,
    unit_history,
)
from xmc.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from xmc.model.states import ActiveState, LaunchState, Severity, WorkUnitState
from xmc.store.repository import Store
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.url_pb2 import Url
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState
ACTIVE = WorkUnitExecution.WorkUnitExecutionState.ACTIVE
INACTIVE = WorkUnitExecution.WorkUnitExecutionState.INACTIVE


@pytest.fixture
async def clocked(database_url: str) -> AsyncIterator[tuple[Store, FakeClock]]:
    clock = FakeClock()
    store = await Store.connect(database_url, min_size=1, max_size=4, clock=clock)
    yield store, clock
    await store.close()


def counts(experiment: Experiment) -> dict[WorkUnitState, int]:
    return {S(c.state): c.count for c in experiment.status.child_state_counts}


async def test_create_experiment_round_trips(store: Store) -> None:
    created = await store.create_experiment(
        Experiment(title="sweep", tags=["a", "b"], notes="n", urls=[Url(url="http://x")]),
        creator="ada@example.com",
    )
    fetched = await store.get_experiment(int(created.name.split("/")[1]))
    assert fetched == created
    assert fetched.creator == "ada@example.com"
    assert list(fetched.tags) == ["a", "b"]
    assert fetched.urls[0].url == "http://x"
    assert LaunchState(fetched.status.launch_state) == LaunchState.LAUNCHING
    assert ActiveState(fetched.status.active_state) == ActiveState.ACTIVE
    assert counts(fetched) == {}


async def test_unknown_experiment_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError, match="experiments/999"):
        await store.get_experiment(999)
    with pytest.raises(NotFoundError, match="parent: experiments/999"):
        await store.insert_work_unit(999, WorkUnit(), writer="test")


async def test_insert_work_unit_ids_and_first_execution(store: Store, database_url: str) -> None:
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    first = await store.insert_work_unit(xid, WorkUnit(tags=["t"]), writer="ess")
    second = await store.insert_work_unit(xid, WorkUnit(), writer="ess")
    chosen = await store.insert_work_unit(xid, WorkUnit(), wid=10, writer="ess")
    after = await store.insert_work_unit(xid, WorkUnit(), writer="ess")
    assert [first.name, second.name, chosen.name, after.name] == [
        f"experiments/{xid}/workUnits/{w}" for w in (1, 2, 10, 11)
    ]
    execution = first.current_work_unit_execution
    assert execution.name == f"experiments/{xid}/workUnits/1/executions/1"
    assert S(execution.status.state) == S.INITIALIZING
    assert execution.state == ACTIVE
    with pytest.raises(AlreadyExistsError, match="workUnits/10 already exists"):
        await store.insert_work_unit(xid, WorkUnit(), wid=10, writer="ess")

    experiment = await store.get_experiment(xid)
    assert counts(experiment) == {S.INITIALIZING: 4}
    history = await unit_history(store, xid, 1)
    assert [(eid, h.old_state, h.new_state, h.writer) for eid, h in history] == [
        (1, S.WORK_UNIT_STATE_UNSPECIFIED, S.INITIALIZING, "ess")
    ]


async def test_restart_archives_and_starts_a_new_execution(
    clocked: tuple[Store, FakeClock],
) -> None:
    store, clock = clocked
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    await store.insert_work_unit(xid, WorkUnit(), writer="ess")
    await store.update_work_unit_executions(
        [message_update(xid, 1, 1, system=message(Severity.ERROR, "boom"))], writer="r"
    )
    clock.advance(60)

    restarted = await store.restart_work_unit(xid, 1, writer="ess")

    current = restarted.current_work_unit_execution
    assert current.name.endswith("/executions/2")
    assert S(current.status.state) == S.RESTARTING
    assert not current.status.HasField("system_message"), "a new execution starts clean"
    assert current.create_time.ToDatetime().replace(tzinfo=clock.now.tzinfo) == clock.now
    executions = await store.list_work_unit_executions(xid, 1)
    assert [(e.name.rsplit("/", 1)[1], e.state, S(e.status.state)) for e in executions] == [
        ("1", INACTIVE, S.INITIALIZING),
        ("2", ACTIVE, S.RESTARTING),
    ]
    assert executions[0].status.system_message.user_facing_text == "boom", "archived as it was"
    experiment = await store.get_experiment(xid)
    assert counts(experiment) == {S.RESTARTING: 1}
    assert list(experiment.status.message_severity_counts) == [], "eid 2 has no message yet"
    eid, last = (await unit_history(store, xid, 1))[-1]
    assert (eid, last.old_state, last.new_state) == (
        2,
        S.INITIALIZING,
        S.RESTARTING,
    )

    again = await store.restart_work_unit(xid, 1, writer="ess")
    assert again.current_work_unit_execution.name.endswith("/executions/3")
    assert len(await store.list_work_unit_executions(xid, 1)) == 3


async def test_a_non_positive_work_unit_id_is_refused(store: Store, database_url: str) -> None:
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    before = await snapshot(database_url)
    with pytest.raises(InvalidArgumentError, match="work_unit_id: must be >= 1, got 0"):
        await store.insert_work_unit(xid, WorkUnit(), wid=0, writer="ess")
    assert await snapshot(database_url) == before


async def test_restart_of_a_missing_work_unit_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError, match="workUnits/5"):
        await store.restart_work_unit(1, 5, writer="ess")


async def test_launch_state_changes_only_end_a_launch(
    clocked: tuple[Store, FakeClock], database_url: str
) -> None:
    store, _clock = clocked
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    done = await store.update_experiment_launch_state(xid, LaunchState.COMPLETED)
    assert LaunchState(done.status.launch_state) == LaunchState.COMPLETED
    assert ActiveState(done.status.active_state) == ActiveState.INACTIVE, "no work unit is running"
    assert not done.HasField("complete_time"), "a launch-state change alone sets no complete_time"
    with pytest.raises(FailedPreconditionError, match="COMPLETED → FAILED"):
        await store.update_experiment_launch_state(xid, LaunchState.FAILED)
    rows = await fetch_all(database_url, "SELECT launch_state FROM experiments WHERE xid = $1", xid)
    assert rows[0]["launch_state"] == LaunchState.COMPLETED


async def test_time_is_the_injected_clock(clocked: tuple[Store, FakeClock]) -> None:
    store, _clock = clocked
    created = await store.create_experiment(Experiment(), creator="a")
    assert created.create_time.ToDatetime().replace(tzinfo=T0.tzinfo) == T0
