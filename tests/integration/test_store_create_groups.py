"""A create group writes each unit's history row and requested resources in the insert
of the units (below the COPY threshold) or beside it (at or above): either way exactly
one of each per unit created, none for an item refused or for a key another transaction
took, and the experiment's rollup read under the group's own lock."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from tests.integration.support import forever_work_unit
from xmc.errors import AlreadyExistsError, NotFoundError
from xmc.model.audit import Actor
from xmc.model.states import WorkUnitState
from xmc.store.repository import Store
from xmc.store.transactions import Created, NewWorkUnit, create_work_units
from xmc.store.work_units import HISTORY_COPY_THRESHOLD
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

S = WorkUnitState


async def _experiment(store: Store) -> int:
    return int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])


@pytest.mark.parametrize("size", [3, HISTORY_COPY_THRESHOLD + 6], ids=["insert", "copy"])
async def test_every_unit_created_has_one_history_and_one_resources_row(
    store: Store, database_url: str, size: int
) -> None:
    first, second = await _experiment(store), await _experiment(store)
    items = [
        NewWorkUnit(
            (first, second)[i % 2], None, forever_work_unit(250 + i), Actor(f"u{i}@x", f"r{i}")
        )
        for i in range(size)
    ]
    items += [
        NewWorkUnit(999_999, None, forever_work_unit(), Actor("ghost@x")),
        NewWorkUnit(first, 500, forever_work_unit(), Actor("twice@x")),
        NewWorkUnit(first, 500, forever_work_unit(), Actor("twice@x")),
    ]
    outcomes = await store.create_work_units(items, writer="ess")

    assert isinstance(outcomes[size], NotFoundError)
    created = [o.work_unit.name for o in outcomes if isinstance(o, Created) and o.work_unit]
    assert len(created) == size + 1, "the repeat of a client id creates nothing more"
    conn = await asyncpg.connect(database_url)
    try:
        history = await conn.fetch(
            "SELECT xid, wid, eid, old_state, new_state, writer, principal, request_id "
            "FROM work_unit_status_history ORDER BY xid, wid"
        )
        resources = await conn.fetch(
            "SELECT xid, wid, queue, cpu_millicores FROM work_unit_resources ORDER BY xid, wid"
        )
        experiments = await conn.fetch(
            "SELECT xid, next_wid, child_state_counts FROM experiments ORDER BY xid"
        )
    finally:
        await conn.close()
    keys = sorted((int(n.split("/")[1]), int(n.split("/")[3])) for n in created)
    assert [(r["xid"], r["wid"]) for r in history] == keys
    assert [(r["xid"], r["wid"]) for r in resources] == keys
    assert {(r["eid"], r["old_state"], r["new_state"], r["writer"]) for r in history} == {
        (1, 0, int(S.INITIALIZING), "ess")
    }
    by_principal = {r["principal"]: r["request_id"] for r in history}
    assert by_principal["u0@x"] == "r0"
    assert by_principal["twice@x"] == ""
    assert {r["queue"] for r in resources} == {"cpu-queue"}
    assert {250 + i for i in range(size)} <= {r["cpu_millicores"] for r in resources}
    per_experiment = {xid: sum(1 for x, _ in keys if x == xid) for xid in (first, second)}
    for row in experiments:
        initializing = row["child_state_counts"][int(S.INITIALIZING)]
        assert initializing == per_experiment[row["xid"]], row
        assert row["next_wid"] > max(w for x, w in keys if x == row["xid"]), row


async def test_a_key_already_taken_gets_no_second_history_or_resources_row(
    store: Store, database_url: str
) -> None:
    """The experiment's next id points at a unit that exists (as when another writer
    inserted it): the insert skips it (ON CONFLICT), and so must its history and
    resources, which are joined to what was inserted."""
    xid = await _experiment(store)
    await store.insert_work_unit(xid, forever_work_unit(), writer="ess")
    conn = await asyncpg.connect(database_url)
    try:
        await conn.execute("UPDATE experiments SET next_wid = 1 WHERE xid = $1", xid)
        with pytest.raises(AlreadyExistsError, match="workUnits/1 already exists"):
            await store.insert_work_unit(xid, forever_work_unit(500), writer="other")
        history = await conn.fetch("SELECT writer FROM work_unit_status_history")
        resources = await conn.fetch("SELECT cpu_millicores FROM work_unit_resources")
        counts = await conn.fetchval("SELECT child_state_counts FROM experiments")
    finally:
        await conn.close()
    assert [r["writer"] for r in history] == ["ess"]
    assert len(resources) == 1
    assert resources[0]["cpu_millicores"] != 500
    assert counts[int(S.INITIALIZING)] == 1


async def test_a_lone_create_is_four_statements_in_its_transaction(
    store: Store, database_url: str
) -> None:
    """Lock the experiment, insert the unit (with its history and resources), its
    Operation, the rollup: over a slow database path each statement costs the path's
    delay, so a lone create must not take more (with BEGIN, the ESS's outbox insert and
    COMMIT: seven round trips)."""
    xid = await _experiment(store)
    statements: list[str] = []

    async def create(conn: asyncpg.Connection) -> None:
        async with conn.transaction():
            (outcome,) = await create_work_units(
                conn,
                [NewWorkUnit(xid, None, forever_work_unit(), Actor("a@x"))],
                writer="ess",
                now=store.clock(),
            )
        assert isinstance(outcome, Created)

    conn = await asyncpg.connect(database_url)
    try:
        await create(conn)  # the first also introspects the types it sends (once per connection)
        conn.add_query_logger(lambda record: statements.append(" ".join(record.query.split())))
        await create(conn)
        await asyncio.sleep(0)  # asyncpg hands each record to the logger with call_soon
    finally:
        await conn.close()
    assert statements[0] == "BEGIN;"
    assert statements[-1] == "COMMIT;"
    assert len(statements[1:-1]) == 4, statements
