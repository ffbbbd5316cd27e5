"""``execution_runs`` on a real Postgres: written by ``insert_history`` with the history rows
as every writer inserts them (one row at a time, a batch through COPY with units that enter
and leave the run states within it), clocks that disagree, and migration 0012's backfill of
history written before it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from xmc.model.states import WorkUnitState as S
from xmc.store.migrate import apply_migrations, load_migrations
from xmc.store.work_units import HISTORY_COLUMNS, insert_history

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def t(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


#: (wid, eid, old, new, seconds): a preempted unit (1), a restart while running (2), an
#: end stamped before its start by another writer's clock (3), one still running (4).
HISTORY = [
    (1, 1, S.SCHEDULING, S.RUNNING, 10),
    (1, 1, S.RUNNING, S.PARTIALLY_FAILED, 20),  # still running: no new run
    (1, 1, S.PARTIALLY_FAILED, S.DESCHEDULING, 40),
    (1, 1, S.SCHEDULING, S.RUNNING, 70),
    (1, 1, S.RUNNING, S.COMPLETED, 100),
    (2, 1, S.STARTING, S.RUNNING, 20),
    (2, 2, S.RUNNING, S.RESTARTING, 200),  # execution 2's first row closes execution 1's run
    (3, 1, S.STARTING, S.RUNNING, 50),
    (3, 1, S.RUNNING, S.STOPPING, 45),
    (4, 1, S.STARTING, S.RUNNING, 60),
]
EXPECTED = [
    (1, 1, t(10), t(40)),
    (1, 1, t(70), t(100)),
    (2, 1, t(20), t(200)),
    (3, 1, t(50), t(50)),
    (4, 1, t(60), None),
]


def rows(copies: int = 1) -> list[tuple[Any, ...]]:
    return [
        (7, wid, eid, int(old), int(new), t(at), "test", t(at), "p", "r")
        for _ in range(copies)
        for wid, eid, old, new, at in HISTORY
    ]


async def runs(conn: asyncpg.Connection) -> list[tuple[object, ...]]:
    found = await conn.fetch(
        "SELECT wid, eid, start_time, end_time FROM execution_runs ORDER BY wid, start_time, id"
    )
    return [tuple(r) for r in found]


async def test_runs_are_kept_through_insert_and_copy(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        for row in rows():  # one statement per change, as the intents write them
            await insert_history(conn, [row])
        assert await runs(conn) == EXPECTED
        await conn.execute("DELETE FROM execution_runs")
        # Enough rows for the COPY path of the observation batch; each unit's rows in order.
        batch = [(7, wid + 10 * i, *rest) for i in range(7) for (_, wid, *rest) in rows()]
        await insert_history(conn, batch)
        assert len(await runs(conn)) == 7 * len(EXPECTED)
        open_runs = await conn.fetchval(
            "SELECT count(*) FROM execution_runs WHERE end_time IS NULL"
        )
        assert open_runs == 7
    finally:
        await conn.close()


async def test_history_before_the_migration_is_backfilled(empty_database_url: str) -> None:
    conn = await asyncpg.connect(empty_database_url)
    try:
        migrations = load_migrations()
        assert migrations[11].name == "usage"
        await apply_migrations(conn, migrations[:11])
        await conn.copy_records_to_table(  # the history's columns before migration 0013
            "work_unit_status_history",
            records=[row[:8] for row in rows()],
            columns=HISTORY_COLUMNS[:8],
        )
        await apply_migrations(conn, migrations)
        assert await runs(conn) == EXPECTED
        # Past runs are not counted into the ESS's counters again.
        assert await conn.fetchval("SELECT bool_and(metered) FROM execution_runs")
    finally:
        await conn.close()


async def test_a_batch_crossing_once_per_unit_is_kept_set_based(database_url: str) -> None:
    """The observation path's shape: one COPY per batch, each unit in it once."""
    conn = await asyncpg.connect(database_url)
    try:
        units = range(1, 71)
        await insert_history(
            conn,
            [(8, w, 1, int(S.STARTING), int(S.RUNNING), t(w), "r", t(w), "p", "") for w in units],
        )
        await insert_history(  # a restart's row closes the run of execution 1
            conn,
            [(8, w, 2 if w % 2 else 1, int(S.RUNNING), int(S.RESTARTING if w % 2 else S.FAILED),
              t(100), "r", t(100), "p", "") for w in units],
        )  # fmt: skip
        found = await conn.fetch(
            "SELECT wid, eid, start_time, end_time FROM execution_runs WHERE xid = 8 ORDER BY wid"
        )
        assert [tuple(r) for r in found] == [(w, 1, t(w), t(100)) for w in units]
    finally:
        await conn.close()
