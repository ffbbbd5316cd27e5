"""``update_work_unit_executions`` against the real Postgres (SPEC §5)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import asyncpg
import pytest

from tests.integration.support import (
    T0,
    FakeClock,
    fetch_all,
    message,
    message_update,
    snapshot,
    state_update,
    unit_history,
)
from xmc.errors import InvalidArgumentError
from xmc.model.guard import GuardReason
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import ActiveState, LaunchState, Severity, WorkUnitState
from xmc.store import executions
from xmc.store.executions import UpdateOutcome
from xmc.store.repository import Store
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState


def sec(n: float) -> Any:
    return T0 + timedelta(seconds=n)


@pytest.fixture
async def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
async def env(database_url: str, clock: FakeClock) -> AsyncIterator[tuple[Store, int]]:
    """A store with one experiment holding work units 1..3 (eid 1, INITIALIZING)."""
    store = await Store.connect(database_url, min_size=1, max_size=8, clock=clock)
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    for _ in range(3):
        await store.insert_work_unit(xid, WorkUnit(), writer="ess")
    yield store, xid
    await store.close()


def state_counts(experiment: Experiment) -> dict[WorkUnitState, int]:
    return {S(c.state): c.count for c in experiment.status.child_state_counts}


def severity_counts(experiment: Experiment) -> dict[Severity, int]:
    return {Severity(c.severity): c.count for c in experiment.status.message_severity_counts}


async def test_accepted_state_change_writes_row_history_and_rollups(
    env: tuple[Store, int], clock: FakeClock
) -> None:
    store, xid = env
    results = await store.update_work_unit_executions(
        [state_update(xid, 1, 1, S.SCHEDULING, sec(1))], writer="reconciler/jobset"
    )

    assert [(r.outcome, r.state_changed, r.state) for r in results] == [
        (UpdateOutcome.APPLIED, True, S.SCHEDULING)
    ]
    work_unit = await store.get_work_unit(xid, 1)
    status = work_unit.current_work_unit_execution.status
    assert S(status.state) == S.SCHEDULING
    assert status.state_update_time.ToDatetime().replace(tzinfo=T0.tzinfo) == sec(1)
    history = await unit_history(store, xid, 1)
    assert [(h.old_state, h.new_state, h.writer) for _eid, h in history][-1] == (
        S.INITIALIZING,
        S.SCHEDULING,
        "reconciler/jobset",
    )
    experiment = await store.get_experiment(xid)
    assert state_counts(experiment) == {S.INITIALIZING: 2, S.SCHEDULING: 1}
    last = experiment.status.last_child_status_update_time.ToDatetime()
    assert last.replace(tzinfo=T0.tzinfo) == clock.now


async def test_stale_eid_is_skipped_silently(env: tuple[Store, int], database_url: str) -> None:
    store, xid = env
    await store.restart_work_unit(xid, 1, writer="ess")  # current eid is now 2
    before = await snapshot(database_url)

    results = await store.update_work_unit_executions(
        [
            state_update(xid, 1, 1, S.STOPPED, sec(5)),
            message_update(xid, 1, 1, user=message(Severity.INFO, "old run says hi")),
        ],
        writer="reconciler/finalizer",
    )

    assert [r.outcome for r in results] == [UpdateOutcome.STALE_EXECUTION] * 2
    assert await snapshot(database_url) == before


async def test_missing_work_unit_is_reported_and_the_rest_applies(env: tuple[Store, int]) -> None:
    store, xid = env
    results = await store.update_work_unit_executions(
        [
            state_update(xid, 99, 1, S.SCHEDULING, sec(1)),
            state_update(xid, 2, 1, S.SCHEDULING, sec(1)),
        ],
        writer="r",
    )
    assert [r.outcome for r in results] == [UpdateOutcome.NOT_FOUND, UpdateOutcome.APPLIED]
    work_unit = await store.get_work_unit(xid, 2)
    assert S(work_unit.current_work_unit_execution.status.state) == S.SCHEDULING


async def test_nil_state_update_time_fails_the_whole_batch_and_writes_nothing(
    env: tuple[Store, int], database_url: str
) -> None:
    store, xid = env
    before = await snapshot(database_url)
    batch = [
        state_update(xid, 1, 1, S.SCHEDULING, sec(1)),
        state_update(xid, 2, 1, S.SCHEDULING, None),
    ]
    with pytest.raises(InvalidArgumentError, match=r"updates\[1\].*state_update_time"):
        await store.update_work_unit_executions(batch, writer="r")
    assert await snapshot(database_url) == before


@pytest.mark.parametrize(
    ("mask", "fragment"),
    [
        pytest.param(("status.state", "status.bogus"), "unknown path 'status.bogus'", id="unknown"),
        pytest.param(("status.state_update_time",), "not a path of its own", id="time alone"),
        pytest.param((), "must name at least one path", id="empty mask"),
    ],
)
async def test_bad_input_raises_and_writes_nothing(
    env: tuple[Store, int], database_url: str, mask: tuple[str, ...], fragment: str
) -> None:
    store, xid = env
    good = state_update(xid, 1, 1, S.SCHEDULING, sec(1))
    bad = ExecutionUpdate(xid, 2, 1, good.execution, mask)
    before = await snapshot(database_url)
    with pytest.raises(InvalidArgumentError, match=r"updates\[1\]\.update_mask") as info:
        await store.update_work_unit_executions([good, bad], writer="r")
    assert fragment in str(info.value)
    assert await snapshot(database_url) == before


async def test_bad_message_severity_is_rejected(env: tuple[Store, int], database_url: str) -> None:
    store, xid = env
    before = await snapshot(database_url)
    item = message_update(xid, 1, 1, system=message(Severity.INFO, "x"))
    item.execution.status.system_message.severity = 35  # type: ignore[assignment]
    with pytest.raises(InvalidArgumentError, match=r"system_message\.severity: 35"):
        await store.update_work_unit_executions([item], writer="r")
    assert await snapshot(database_url) == before


async def test_messages_are_mirrored_with_their_execution(
    env: tuple[Store, int], database_url: str
) -> None:
    store, xid = env
    await store.update_work_unit_executions(
        [message_update(xid, 1, 1, system=message(Severity.WARNING, "slow pull"))], writer="r"
    )
    await store.restart_work_unit(xid, 1, writer="ess")
    scheduling = WorkUnitExecution()
    scheduling.status.scheduling_information.CopyFrom(message(Severity.INFO, "queue position 3"))
    await store.update_work_unit_executions(
        [
            message_update(xid, 1, 2, user=message(Severity.INFO, "epoch 1")),
            ExecutionUpdate(xid, 1, 2, scheduling, ("status.scheduling_information",)),
            # Resending the same observation must not append a duplicate.
            message_update(xid, 1, 2, user=message(Severity.INFO, "epoch 1")),
        ],
        writer="r",
    )

    history, _ = await store.list_status_messages(xid, 1)
    assert [(m.execution_id, m.content.user_facing_text) for m in history] == [
        (1, "slow pull"),
        (2, "epoch 1"),
    ]
    assert history[0].name.startswith(f"experiments/{xid}/workUnits/1/statusMessages/")
    assert [m.content.user_facing_text for m in (await store.list_status_messages(xid))[0]] == [
        "slow pull",
        "epoch 1",
    ]
    rows = await fetch_all(database_url, "SELECT field FROM status_messages ORDER BY id")
    assert [r["field"] for r in rows] == ["system_message", "user_message"]


async def test_severity_counts_follow_each_work_units_best_message(env: tuple[Store, int]) -> None:
    store, xid = env
    await store.update_work_unit_executions(
        [
            message_update(xid, 1, 1, system=message(Severity.INFO, "i")),
            message_update(xid, 1, 1, user=message(Severity.ERROR, "e")),
            message_update(xid, 2, 1, system=message(Severity.WARNING, "w")),
        ],
        writer="r",
    )
    experiment = await store.get_experiment(xid)
    assert severity_counts(experiment) == {Severity.ERROR: 1, Severity.WARNING: 1}

    await store.update_work_unit_executions(
        [message_update(xid, 2, 1, system=message(Severity.FATAL, "f"))], writer="r"
    )
    experiment = await store.get_experiment(xid)
    assert severity_counts(experiment) == {Severity.ERROR: 1, Severity.FATAL: 1}


async def test_experiment_turns_inactive_with_complete_time(
    env: tuple[Store, int], clock: FakeClock
) -> None:
    store, xid = env
    await store.update_experiment_launch_state(xid, LaunchState.COMPLETED)
    await store.update_work_unit_executions(
        [state_update(xid, w, 1, S.RUNNING, sec(1)) for w in (1, 2, 3)], writer="r"
    )
    await store.update_work_unit_executions(
        [state_update(xid, w, 1, S.COMPLETED, sec(2)) for w in (1, 2)], writer="r"
    )
    experiment = await store.get_experiment(xid)
    assert ActiveState(experiment.status.active_state) == ActiveState.ACTIVE
    assert not experiment.HasField("complete_time")

    clock.advance(30)
    await store.update_work_unit_executions([state_update(xid, 3, 1, S.FAILED, sec(3))], writer="r")
    experiment = await store.get_experiment(xid)
    assert ActiveState(experiment.status.active_state) == ActiveState.INACTIVE
    assert experiment.complete_time.ToDatetime().replace(tzinfo=T0.tzinfo) == clock.now
    assert state_counts(experiment) == {S.COMPLETED: 2, S.FAILED: 1}
    work_unit = await store.get_work_unit(xid, 3)
    complete = work_unit.current_work_unit_execution.complete_time.ToDatetime()
    assert complete.replace(tzinfo=T0.tzinfo) == clock.now

    await store.restart_work_unit(xid, 3, writer="ess")
    experiment = await store.get_experiment(xid)
    assert ActiveState(experiment.status.active_state) == ActiveState.ACTIVE
    assert not experiment.HasField("complete_time"), "a reactivated experiment is not complete"


async def test_items_for_one_work_unit_apply_in_order(env: tuple[Store, int]) -> None:
    store, xid = env
    results = await store.update_work_unit_executions(
        [
            state_update(xid, 1, 1, S.SCHEDULING, sec(1)),
            state_update(xid, 1, 1, S.STARTING, sec(2)),
            state_update(xid, 1, 1, S.SCHEDULING, sec(1.5)),
        ],
        writer="r",
    )
    assert [(r.state_changed, r.state_rejection) for r in results] == [
        (True, None),
        (True, None),
        (False, GuardReason.STALE_TIME),
    ]
    history = await unit_history(store, xid, 1)
    assert [h.new_state for _eid, h in history] == [S.INITIALIZING, S.SCHEDULING, S.STARTING]
    assert state_counts(await store.get_experiment(xid)) == {S.INITIALIZING: 2, S.STARTING: 1}


async def test_terminal_execution_is_immutable(env: tuple[Store, int], database_url: str) -> None:
    store, xid = env
    await store.update_work_unit_executions(
        [state_update(xid, 1, 1, S.COMPLETED, sec(1))], writer="r"
    )
    before = await snapshot(database_url)
    results = await store.update_work_unit_executions(
        [state_update(xid, 1, 1, S.RUNNING, sec(9), system=message(Severity.INFO, "late"))],
        writer="r",
    )
    assert results[0].outcome == UpdateOutcome.UNCHANGED
    assert results[0].state_rejection == GuardReason.TERMINAL
    assert await snapshot(database_url) == before


async def test_failure_mid_batch_in_the_database_leaves_no_partial_rows(
    env: tuple[Store, int], database_url: str
) -> None:
    """A statement late in the batch (the message insert, after the work-unit rows and the
    history were written) fails: nothing of the batch may remain."""
    store, xid = env
    conn = await asyncpg.connect(database_url)
    await conn.execute(
        """CREATE FUNCTION fail_insert() RETURNS trigger LANGUAGE plpgsql AS
           $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
           CREATE TRIGGER fail_messages BEFORE INSERT ON status_messages
           FOR EACH STATEMENT EXECUTE FUNCTION fail_insert();"""
    )
    await conn.close()
    before = await snapshot(database_url)

    with pytest.raises(asyncpg.RaiseError, match="injected failure"):
        await store.update_work_unit_executions(
            [
                state_update(xid, 1, 1, S.SCHEDULING, sec(1)),
                state_update(xid, 2, 1, S.RUNNING, sec(1), system=message(Severity.INFO, "hi")),
            ],
            writer="r",
        )

    after = await snapshot(database_url)
    after["<sequences>"] = before["<sequences>"]  # identity values are not transactional
    assert after == before


async def test_failure_after_the_writes_in_python_leaves_no_partial_rows(
    env: tuple[Store, int], database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, xid = env

    async def explode(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("crash before the rollups")

    monkeypatch.setattr(executions, "apply_rollups", explode)
    before = await snapshot(database_url)
    with pytest.raises(RuntimeError, match="crash before the rollups"):
        await store.update_work_unit_executions(
            [state_update(xid, 1, 1, S.SCHEDULING, sec(1), system=message(Severity.INFO, "m"))],
            writer="r",
        )
    after = await snapshot(database_url)
    after["<sequences>"] = before["<sequences>"]
    assert after == before


async def test_concurrent_overlapping_batches_never_deadlock(
    database_url: str, clock: FakeClock
) -> None:
    """Eight writers hammer overlapping work units, each batch in a random item order. With
    the deterministic lock order none deadlocks, and the rollups stay exact."""
    store = await Store.connect(database_url, min_size=8, max_size=8, clock=clock)
    try:
        xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
        n = 60
        for _ in range(n):
            await store.insert_work_unit(xid, WorkUnit(), writer="ess")
        states = [S.SCHEDULING, S.STARTING, S.RUNNING, S.DESCHEDULING, S.PARTIALLY_FAILED]

        async def writer(seed: int) -> int:
            rng = random.Random(seed)
            applied = 0
            for round_ in range(15):
                wids = rng.sample(range(1, n + 1), 25)
                batch = [
                    state_update(xid, w, 1, rng.choice(states), sec(round_ * 10 + seed))
                    for w in wids
                ]
                results = await store.update_work_unit_executions(batch, writer=f"w{seed}")
                applied += sum(r.state_changed for r in results)
            return applied

        changed = await asyncio.gather(*(writer(seed) for seed in range(8)))
        assert sum(changed) > 0

        rows = await fetch_all(
            database_url,
            "SELECT state, count(*) AS n FROM work_units WHERE xid = $1 GROUP BY state",
            xid,
        )
        actual = {S(r["state"]): r["n"] for r in rows}
        assert state_counts(await store.get_experiment(xid)) == actual
        history = await fetch_all(
            database_url, "SELECT count(*) AS n FROM work_unit_status_history WHERE xid = $1", xid
        )
        assert history[0]["n"] == n + sum(changed)
    finally:
        await store.close()
