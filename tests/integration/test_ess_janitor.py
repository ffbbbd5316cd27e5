"""TTL cleanup: operations after 90 days, processed parked tasks 7 days after processing."""

from __future__ import annotations

from datetime import timedelta

from ess.app import run_janitor_once
from tests.integration.support import T0, fetch_all
from xmc.model.audit import Actor
from xmc.store import operations, scheduling
from xmc.store.operations import ActionType, NewOperation
from xmc.store.repository import Store
from xmc.store.scheduling import Resolution


async def test_janitor_drops_only_what_expired(store: Store, database_url: str) -> None:
    async with store.transaction() as conn:
        old = await operations.insert_operation(
            conn, NewOperation(1, 1, ActionType.CREATE, Actor("a")), now=T0 - timedelta(days=91)
        )
        young = await operations.insert_operation(
            conn, NewOperation(1, 2, ActionType.CREATE, Actor("a")), now=T0 - timedelta(days=89)
        )
        for task_id in ("processed-long-ago", "processed-recently", "never-processed"):
            await scheduling.park_task(
                conn, task_id=task_id, xid=1, wid=1, eid=1, kind=1, task=b"", now=T0
            )
        ids = {
            r["task_id"]: r["id"] for r in await conn.fetch("SELECT id, task_id FROM paused_tasks")
        }
        await scheduling.mark_processed(
            conn,
            [(ids["processed-long-ago"], Resolution.RESUMED, "resume")],
            run_id="r1",
            now=T0 - timedelta(days=8),
        )
        await scheduling.mark_processed(
            conn,
            [(ids["processed-recently"], Resolution.SKIPPED, "superseded")],
            run_id="r2",
            now=T0 - timedelta(days=6),
        )

    assert await run_janitor_once(store, now=T0) == (1, 1, 0)

    names = {r["name"] for r in await fetch_all(database_url, "SELECT name FROM operations")}
    assert names == {young.name}
    assert old.name not in names
    left = {r["task_id"] for r in await fetch_all(database_url, "SELECT task_id FROM paused_tasks")}
    assert left == {"processed-recently", "never-processed"}


async def test_a_redelivered_task_is_counted_once(store: Store) -> None:
    async with store.transaction() as conn:
        batch = await operations.insert_operation(
            conn, NewOperation(1, None, ActionType.STOP, Actor("a"), pending_tasks=2), now=T0
        )
        once = await operations.finish_operation_task(conn, batch.name, now=T0, task_id="t1")
        again = await operations.finish_operation_task(conn, batch.name, now=T0, task_id="t1")
        assert not once.done
        assert not again.done, "a redelivery of t1 must not stand in for t2"
        done = await operations.finish_operation_task(conn, batch.name, now=T0, task_id="t2")
        assert done.done
