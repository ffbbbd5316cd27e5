"""The stored wire parts (``xmc.store.wire``) stay equal to the WorkUnit the columns make,
through every writer of ``work_units``; pages framed from them are the pages built from
the columns; rows without them are built from the columns and backfilled."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.integration.support import T0, message, state_update
from xmc.model.audit import Actor
from xmc.model.merge import ExecutionUpdate
from xmc.model.states import Priority, Severity, WorkUnitState
from xmc.store.backfill import backfill_wire
from xmc.store.executions import update_work_unit_executions, write_decided_state
from xmc.store.listing import ListRequest
from xmc.store.repository import Store
from xmc.store.wire import work_unit_wire
from xmc.store.work_units import (
    WORK_UNIT_COLUMNS,
    list_work_units,
    restart_work_unit,
    update_work_unit,
    work_unit_from_row,
)
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import Condition
from xmc_api.cloud.xmanager.v1.url_pb2 import Url
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState
WRITER = "test"


async def stored_rows(conn: Any, xid: int) -> list[Any]:
    return list(
        await conn.fetch(
            f"SELECT {WORK_UNIT_COLUMNS}, head, exec_wire FROM work_units WHERE xid = $1"
            " ORDER BY wid",
            xid,
        )
    )


async def assert_wire_matches_columns(conn: Any, xid: int) -> int:
    """Every row holds both parts, and they parse to the WorkUnit of its columns."""
    rows = await stored_rows(conn, xid)
    for row in rows:
        assert row["head"] is not None, row["wid"]
        assert row["exec_wire"] is not None, row["wid"]
        framed = WorkUnit.FromString(work_unit_wire(row["head"], row["exec_wire"]))
        assert framed == work_unit_from_row(row), row["wid"]
    return len(rows)


async def listed(conn: Any, xid: int, **request: Any) -> api_pb2.ListWorkUnitsResponse:
    data = await list_work_units(conn, xid, ListRequest(**request))
    return api_pb2.ListWorkUnitsResponse.FromString(data)


def rich_work_unit(i: int) -> WorkUnit:
    unit = WorkUnit(
        work_unit_type=WorkUnit.WorkUnitType.AUXILIARY if i % 2 else WorkUnit.WorkUnitType.STANDARD,
        priority=int(Priority.HIGH) if i % 3 else 0,  # type: ignore[arg-type]
        tags=[f"t{i}", "ünïcode"][: i % 3],
        notes=("n" * 200 + "é") if i == 1 else "",  # lengths past one varint byte
        urls=[Url(url=f"http://x/{i}")] if i % 2 else [],
    )
    if i != 2:
        job = unit.executable.jobset.jobs.add(name="main", replicas=1)
        job.spec.docker_image = "python:3.11"
        job.spec.args["lr"] = "0." + "1" * (20_000 if i == 3 else 2)  # a 3-byte length
    return unit


def observation(xid: int, wid: int, state: WorkUnitState, seconds: int) -> ExecutionUpdate:
    execution = WorkUnitExecution()
    status = execution.status
    status.state = int(state)  # type: ignore[assignment]
    status.state_update_time.FromDatetime(T0 + timedelta(seconds=seconds, microseconds=7))
    status.detailed_status.jobset_status.conditions.append(
        Condition(type="Suspended", status="False", reason="Resumed")
    )
    status.system_message.CopyFrom(message(Severity.WARNING, "slow"))
    status.user_message.CopyFrom(message(Severity.INFO, "hello"))
    status.scheduling_information.CopyFrom(message(Severity.INFO, "admitted"))
    execution.metadata.resource_name = f"xmc-{xid}-{wid}"
    execution.metadata.node_selectors["pool"] = "a"
    mask = (
        "status.state",
        "status.detailed_status",
        "status.system_message",
        "status.user_message",
        "status.scheduling_information",
        "metadata",
    )
    return ExecutionUpdate(xid, wid, 1, execution, mask)


async def test_every_writer_keeps_the_wire_parts_equal_to_the_columns(store: Store) -> None:
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    created = [
        await store.insert_work_unit(xid, rich_work_unit(i), writer=WRITER) for i in range(4)
    ]
    async with store.connection() as conn:
        assert await assert_wire_matches_columns(conn, xid) == 4
        page = await listed(conn, xid)
        assert list(page.work_units) == created  # the create's answer is what is stored

    async with store.transaction() as conn:
        source = WorkUnit(tags=["new"], notes="edited", priority=int(Priority.LOW))  # type: ignore[arg-type]
        source.urls.add(url="http://y")
        await update_work_unit(
            conn, xid, 1, source, ("tags", "notes", "priority", "urls"), now=T0 + timedelta(1)
        )
    async with store.transaction() as conn:
        running = [observation(xid, w, S.RUNNING, 10) for w in (1, 2, 3)]
        await update_work_unit_executions(conn, running, writer=WRITER, actor=Actor(WRITER), now=T0)
    async with store.transaction() as conn:
        done = [state_update(xid, 2, 1, S.COMPLETED, T0 + timedelta(seconds=20))]
        await update_work_unit_executions(
            conn, done, writer=WRITER, actor=Actor(WRITER), now=T0
        )  # complete_time
    async with store.transaction() as conn:
        await restart_work_unit(
            conn, xid, 3, writer=WRITER, actor=Actor(WRITER), now=T0 + timedelta(seconds=30)
        )
    async with store.transaction() as conn:
        await write_decided_state(
            conn,
            xid,
            4,
            1,
            S.FAILED,
            message=message(Severity.ERROR, "no"),
            writer=WRITER,
            actor=Actor(WRITER),
            now=T0,
        )

    async with store.connection() as conn:
        rows = await stored_rows(conn, xid)
        assert [S(r["state"]) for r in rows] == [S.RUNNING, S.COMPLETED, S.RESTARTING, S.FAILED]
        assert await assert_wire_matches_columns(conn, xid) == 4
        page = await listed(conn, xid)
        assert list(page.work_units) == [work_unit_from_row(r) for r in rows]
        units = {u.name.rsplit("/", 1)[1]: u for u in page.work_units}
        assert list(units["1"].tags) == ["new"]
        assert units["1"].notes == "edited"
        assert units["2"].current_work_unit_execution.HasField("complete_time")
        assert units["3"].current_work_unit_execution.name.endswith("/executions/2")
        assert S(units["4"].current_work_unit_execution.status.state) == S.FAILED


async def test_pages_framed_from_bytes_keep_their_tokens_and_filters(store: Store) -> None:
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    for i in range(5):
        await store.insert_work_unit(xid, rich_work_unit(i), writer=WRITER)
    async with store.connection() as conn:
        first = await listed(conn, xid, page_size=2)
        second = await listed(conn, xid, page_size=2, page_token=first.next_page_token)
        last = await listed(conn, xid, page_size=2, page_token=second.next_page_token)
        names = [u.name for p in (first, second, last) for u in p.work_units]
        assert names == [f"experiments/{xid}/workUnits/{w}" for w in range(1, 6)]
        assert last.next_page_token == ""
        filtered = await listed(conn, xid, filter="wid > 3", order_by="wid desc")
        assert [u.name.rsplit("/", 1)[1] for u in filtered.work_units] == ["5", "4"]


async def test_rows_without_wire_parts_are_built_from_columns_then_backfilled(
    store: Store,
) -> None:
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    for i in range(4):
        await store.insert_work_unit(xid, rich_work_unit(i), writer=WRITER)
    async with store.connection() as conn:
        expected = await listed(conn, xid)
        # As rows written before migration 0003 are.
        await conn.execute("UPDATE work_units SET head = NULL WHERE xid = $1 AND wid = 2", xid)
        await conn.execute("UPDATE work_units SET exec_wire = NULL WHERE xid = $1 AND wid > 2", xid)
        assert await listed(conn, xid) == expected
        assert await backfill_wire(conn, batch=2) == 3
        assert await backfill_wire(conn) == 0
        assert await assert_wire_matches_columns(conn, xid) == 4
        assert await listed(conn, xid) == expected


async def test_a_write_that_skips_a_part_drops_it_instead_of_leaving_it_stale(
    store: Store,
) -> None:
    """Migration 0004's guard: an UPDATE of the columns without the part they make (an
    ESS of an older version, a hand-written fix) sets that part to NULL, so pages serve
    the columns; XMC's own writers keep their parts (the test above)."""
    xid = int((await store.create_experiment(Experiment(), creator="a")).name.split("/")[1])
    for i in range(3):
        await store.insert_work_unit(xid, rich_work_unit(i), writer=WRITER)
    async with store.connection() as conn:
        await conn.execute(
            "UPDATE work_units SET state = $2, state_update_time = $3 WHERE xid = $1 AND wid = 1",
            xid,
            int(S.RUNNING),
            T0,
        )
        await conn.execute(
            "UPDATE work_units SET notes = 'by hand' WHERE xid = $1 AND wid = 2", xid
        )
        rows = await stored_rows(conn, xid)
        assert [(r["head"] is None, r["exec_wire"] is None) for r in rows] == [
            (False, True),
            (True, False),
            (False, False),
        ]
        page = await listed(conn, xid)
        assert list(page.work_units) == [work_unit_from_row(r) for r in rows]
        assert S(page.work_units[0].current_work_unit_execution.status.state) == S.RUNNING
        assert page.work_units[1].notes == "by hand"
