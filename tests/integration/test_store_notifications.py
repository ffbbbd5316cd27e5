"""The delivery queue in Postgres (migration 0010): a delivery exists iff the state change
that raised it committed; a claim is exclusive (SKIP LOCKED) and leased; a lost claim
does not overwrite its new holder's; finished deliveries expire."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.support import minimal_work_unit, state_update
from xmc.model.audit import Actor
from xmc.model.notifications import ALL_EVENTS, Threshold
from xmc.model.states import LaunchState, WorkUnitState
from xmc.model.webhooks import AttemptOutcome, Decision, Verdict
from xmc.store.repository import Store
from xmc.store.transactions import (
    claim_due_deliveries,
    delete_expired_deliveries,
    insert_webhook,
    record_attempt,
    update_work_unit_executions,
)
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

#: Ahead of the store's clock (the real one), so each observation is newer than a create.
NOW = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
LEASE = timedelta(seconds=30)


class Rollback(Exception):
    pass


async def experiment_with_webhook(store: Store, units: int = 1) -> int:
    xid = int((await store.create_experiment(Experiment(), creator="a@x")).name.split("/")[1])
    for _ in range(units):
        await store.insert_work_unit(xid, minimal_work_unit(), writer="test")
    async with store.transaction() as conn:
        await insert_webhook(
            conn, xid=xid, owner=None, url="http://127.0.0.1:1/x", secret="s" * 16,
            events=ALL_EVENTS, threshold=Threshold(), creator="a@x", now=NOW,
        )  # fmt: skip
    return xid


async def fail(store: Store, xid: int, wid: int, *, seconds: float = 1) -> None:
    update = state_update(xid, wid, 1, WorkUnitState.FAILED, NOW + timedelta(seconds=seconds))
    async with store.transaction() as conn:
        await update_work_unit_executions(
            conn, [update], writer="test", actor=Actor("test"), now=NOW
        )


async def count(store: Store) -> int:
    async with store.connection() as conn:
        found: int = await conn.fetchval("SELECT count(*) FROM webhook_deliveries")
    return found


async def test_a_delivery_exists_iff_its_state_change_committed(store: Store) -> None:
    xid = await experiment_with_webhook(store)
    update = state_update(xid, 1, 1, WorkUnitState.FAILED, NOW + timedelta(seconds=1))

    async def change_then_roll_back() -> None:
        async with store.transaction() as conn:
            await update_work_unit_executions(
                conn, [update], writer="test", actor=Actor("test"), now=NOW
            )
            assert await conn.fetchval("SELECT count(*) FROM webhook_deliveries") == 1
            raise Rollback

    with pytest.raises(Rollback):
        await change_then_roll_back()
    assert await count(store) == 0
    await fail(store, xid, 1)
    assert await count(store) == 1


async def test_an_update_without_a_failure_or_a_finish_queues_nothing(store: Store) -> None:
    xid = await experiment_with_webhook(store)
    update = state_update(xid, 1, 1, WorkUnitState.RUNNING, NOW + timedelta(seconds=1))
    async with store.transaction() as conn:
        await update_work_unit_executions(
            conn, [update], writer="test", actor=Actor("test"), now=NOW
        )
    assert await count(store) == 0


async def test_claims_are_exclusive_and_leased(store: Store) -> None:
    xid = await experiment_with_webhook(store, units=4)
    for wid in range(1, 5):
        await fail(store, xid, wid)
    assert await count(store) == 4

    async def claim(now: datetime) -> list[int]:
        async with store.transaction() as conn:
            claimed = await claim_due_deliveries(conn, now=now, limit=3, lease=LEASE)
            await asyncio.sleep(0.05)  # hold the locks while the other claims
        return [d.id for d in claimed]

    first, second = await asyncio.gather(claim(NOW), claim(NOW))
    assert sorted(first + second) == sorted(set(first + second))
    assert len(first + second) == 4
    assert await claim(NOW + LEASE - timedelta(seconds=1)) == [], "leased"
    again = await claim(NOW + LEASE)
    assert len(again) == 3, "the lease ran out: due again"


async def test_a_lost_claim_leaves_the_row_to_its_new_holder(store: Store) -> None:
    xid = await experiment_with_webhook(store)
    await fail(store, xid, 1)
    async with store.transaction() as conn:
        (old,) = await claim_due_deliveries(conn, now=NOW, limit=1, lease=LEASE)
    async with store.transaction() as conn:
        (new,) = await claim_due_deliveries(conn, now=NOW + LEASE, limit=1, lease=LEASE)
    assert (old.attempt, new.attempt) == (1, 2)
    delivered = Decision(Verdict.DELIVERED)
    async with store.transaction() as conn:
        kept = await record_attempt(conn, old, AttemptOutcome(200), delivered,
                                    start=NOW, latency_ms=5, response="ok", now=NOW)  # fmt: skip
        assert not kept
        status = await conn.fetchval("SELECT status FROM webhook_deliveries")
        assert status == "pending"
        kept = await record_attempt(conn, new, AttemptOutcome(200), delivered,
                                    start=NOW, latency_ms=5, response="ok", now=NOW)  # fmt: skip
        assert kept
        assert await conn.fetchval("SELECT count(*) FROM webhook_attempts") == 2


async def test_finished_deliveries_expire_pending_ones_stay(store: Store) -> None:
    xid = await experiment_with_webhook(store, units=2)
    await fail(store, xid, 1)
    await fail(store, xid, 2)
    async with store.transaction() as conn:
        (done, _) = await claim_due_deliveries(conn, now=NOW, limit=2, lease=LEASE)
        await record_attempt(conn, done, AttemptOutcome(410), Decision(Verdict.FAILED),
                             start=NOW, latency_ms=1, response="", now=NOW)  # fmt: skip
    async with store.transaction() as conn:
        assert await delete_expired_deliveries(conn, now=NOW + timedelta(days=29)) == 0
        assert await delete_expired_deliveries(conn, now=NOW + timedelta(days=31)) == 1
    assert await count(store) == 1


async def events(store: Store) -> list[str]:
    async with store.connection() as conn:
        rows = await conn.fetch("SELECT event FROM webhook_deliveries ORDER BY id")
    return [row["event"] for row in rows]


async def test_a_launch_that_ends_after_its_units_finishes_the_experiment(store: Store) -> None:
    xid = await experiment_with_webhook(store)
    done = state_update(xid, 1, 1, WorkUnitState.COMPLETED, NOW + timedelta(seconds=1))
    async with store.transaction() as conn:
        await update_work_unit_executions(conn, [done], writer="test", actor=Actor("test"), now=NOW)
    assert await events(store) == [], "still LAUNCHING: more units may come"
    await store.update_experiment_launch_state(xid, LaunchState.COMPLETED)
    assert await events(store) == ["experiment.finished"]
    await store.update_experiment_launch_state(xid, LaunchState.COMPLETED)  # a repeat
    assert await events(store) == ["experiment.finished"]
