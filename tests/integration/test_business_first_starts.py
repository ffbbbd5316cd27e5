"""The observation path's business facts against the real Postgres (docs/metrics.md): the
transitions the store hands back, and "first RUNNING" read from the history — a preempted
execution that runs again is not a second start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

from tests.integration.support import T0, FakeClock, state_update
from xmc.model.audit import Actor
from xmc.model.business import Transition, first_start_candidates, queue_wait_seconds
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import WorkUnitState as S
from xmc.store.business import fetch_first_running
from xmc.store.executions import update_work_unit_executions
from xmc.store.repository import Store
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit


@pytest.fixture
async def env(database_url: str) -> AsyncIterator[tuple[Store, int]]:
    store = await Store.connect(database_url, min_size=1, max_size=4, clock=FakeClock(T0))
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    for _ in range(2):
        await store.insert_work_unit(xid, WorkUnit(), writer="ess")
    yield store, xid
    await store.close()


async def apply(
    store: Store, items: list[ExecutionUpdate]
) -> tuple[list[Transition], set[tuple[int, int, int]]]:
    """One committed batch; then, as ``ess.business_metrics.FirstStarts`` decides it, its
    changes into RUNNING that are their execution's first (stamped with its first RUNNING
    history row's time)."""
    transitions: list[Transition] = []
    async with store.transaction() as conn:
        await update_work_unit_executions(
            conn, items, writer="reconciler", actor=Actor("reconciler@xmc.internal"),
            now=T0 + timedelta(minutes=5), transitions=transitions,
        )  # fmt: skip
    candidates = first_start_candidates(transitions)
    async with store.connection() as conn:
        firsts = await fetch_first_running(conn, [(t.xid, t.wid, t.eid) for t in candidates])
    first = {
        (t.xid, t.wid, t.eid)
        for t in candidates
        if firsts.get((t.xid, t.wid, t.eid)) == t.new_since
    }
    return transitions, first


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


async def test_a_start_after_a_preemption_is_a_second_wait_not_a_second_start(
    env: tuple[Store, int],
) -> None:
    store, xid = env
    await apply(store, [state_update(xid, 1, 1, S.SCHEDULING, at(1)),
                        state_update(xid, 2, 1, S.SCHEDULING, at(1))])  # fmt: skip
    # Both admitted in one batch: two first starts, two waits of 4 s.
    transitions, first = await apply(
        store,
        [state_update(xid, 1, 1, S.RUNNING, at(5)), state_update(xid, 2, 1, S.RUNNING, at(5))],
    )
    assert [(t.old, t.new) for t in transitions] == [(S.SCHEDULING, S.RUNNING)] * 2
    assert first == {(xid, 1, 1), (xid, 2, 1)}
    assert [queue_wait_seconds(t) for t in transitions] == [4.0, 4.0]

    # Unit 1 is preempted back into the queue, then admitted again.
    await apply(store, [state_update(xid, 1, 1, S.SCHEDULING, at(10))])
    transitions, first = await apply(store, [state_update(xid, 1, 1, S.RUNNING, at(20))])
    assert first == set()
    assert [queue_wait_seconds(t) for t in transitions] == [10.0]


async def test_no_state_change_hands_back_no_transition(env: tuple[Store, int]) -> None:
    store, xid = env
    await apply(store, [state_update(xid, 1, 1, S.SCHEDULING, at(1))])
    transitions, first = await apply(store, [state_update(xid, 1, 1, S.SCHEDULING, at(2))])
    assert transitions == []
    assert first == set()
