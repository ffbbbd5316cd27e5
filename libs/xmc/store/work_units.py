"""Work-unit rows: the full-row writes of SPEC §4 (create, restart) and the readers.

Both writes lock the work unit (or create it) before touching its experiment, the lock
order every writer of this package follows.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from xmc.errors import InvalidArgumentError, NotFoundError
from xmc.masks import apply_update_mask
from xmc.model.audit import Actor
from xmc.model.states import Priority, WorkUnitState
from xmc.model.stored import StoredExecution
from xmc.names import execution_name, work_unit_name
from xmc.query import FieldKind, FieldSpec, OrderKey, compile_filter
from xmc.query.fields import AS_OF
from xmc.store.codec import (
    EXECUTION_COLUMNS,
    execution_from_row,
    stored_from_row,
    write_execution_from_row,
)
from xmc.store.connection import Connection, fetch_one
from xmc.store.experiments import require_experiment
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc.store.rollups import RollupDelta, apply_rollups
from xmc.store.runs import write_runs
from xmc.store.wire import (
    execution_wire,
    execution_wire_from_values,
    list_response_from_parts,
)
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

_EXEC_SELECT = ", ".join(EXECUTION_COLUMNS)
WORK_UNIT_COLUMNS = (
    "xid, wid, work_unit_type, priority, tags, notes, doc, create_time, update_time, eid, "
    + _EXEC_SELECT
)
HISTORY_COLUMNS = (
    "xid",
    "wid",
    "eid",
    "old_state",
    "new_state",
    "state_update_time",
    "writer",
    "record_time",
    "principal",
    "request_id",
)
#: History rows from which :func:`insert_history` uses COPY (fewer: one INSERT).
HISTORY_COPY_THRESHOLD = 64
ACTIVE = WorkUnitExecution.WorkUnitExecutionState.ACTIVE
INACTIVE = WorkUnitExecution.WorkUnitExecutionState.INACTIVE


def work_unit_doc(work_unit: WorkUnit) -> bytes:
    doc = WorkUnit()
    doc.urls.extend(work_unit.urls)
    if work_unit.HasField("executable"):
        doc.executable.CopyFrom(work_unit.executable)
    return doc.SerializeToString()


def work_unit_from_row(row: Mapping[str, Any]) -> WorkUnit:
    work_unit = WorkUnit()
    write_work_unit_from_row(work_unit, row)
    return work_unit


def write_work_unit_from_row(target: WorkUnit, row: Mapping[str, Any]) -> None:
    """Fill an empty ``target`` in place from the columns."""
    write_work_unit_head(target, row)
    execution = target.current_work_unit_execution
    write_execution_from_row(execution, row, execution_name(row["xid"], row["wid"], row["eid"]))
    execution.state = ACTIVE


def write_work_unit_head(target: WorkUnit, row: Mapping[str, Any]) -> None:
    """Everything but the current execution: what the ``head`` column holds."""
    if row["doc"]:
        target.MergeFromString(row["doc"])
    target.name = work_unit_name(row["xid"], row["wid"])
    target.work_unit_type = row["work_unit_type"]
    target.priority = row["priority"]
    if row["tags"]:
        target.tags.extend(row["tags"])
    target.notes = row["notes"]
    set_timestamp(target.create_time, row["create_time"])
    set_timestamp(target.update_time, row["update_time"])


def head_wire(row: Mapping[str, Any]) -> bytes:
    head = WorkUnit()
    write_work_unit_head(head, row)
    return head.SerializeToString()


def wire_parts(row: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """(``head``, ``exec_wire``) of a row, built from its columns."""
    name = execution_name(row["xid"], row["wid"], row["eid"])
    return head_wire(row), execution_wire_from_values(name, [row[c] for c in EXECUTION_COLUMNS])


async def insert_history(conn: Connection, rows: list[tuple[Any, ...]]) -> None:
    """Rows of (xid, wid, eid, old, new, state_update_time, writer, record_time,
    principal, request_id), and the runs they open and close (``xmc.store.runs``)."""
    if not rows:
        return
    await write_runs(conn, rows)
    if len(rows) >= HISTORY_COPY_THRESHOLD:
        # Binary COPY: about twice as fast as INSERT … unnest(…) for a full batch, but
        # its extra round trips cost more than they save for a handful of rows.
        await conn.copy_records_to_table(
            "work_unit_status_history", records=rows, columns=HISTORY_COLUMNS
        )
        return
    await conn.execute(
        """INSERT INTO work_unit_status_history
               (xid, wid, eid, old_state, new_state, state_update_time, writer, record_time,
                principal, request_id)
           SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::smallint[],
               $5::smallint[], $6::timestamptz[], $7::text[], $8::timestamptz[], $9::text[],
               $10::text[])""",
        *zip(*rows, strict=True),
    )


async def restart_work_unit(
    conn: Connection, xid: int, wid: int, *, writer: str, actor: Actor, now: datetime
) -> WorkUnit:
    """Archive execution N (``SaveWorkUnitExecution``) and make N+1 current in RESTARTING
    (``UpdateCurrentWorkUnitExecution``). Allowed from any state (SPEC §3.1)."""
    current = await conn.fetchrow(
        f"SELECT {WORK_UNIT_COLUMNS} FROM work_units WHERE xid = $1 AND wid = $2 FOR UPDATE",
        xid,
        wid,
    )
    if current is None:
        raise NotFoundError(f"name: {work_unit_name(xid, wid)} does not exist")
    await conn.execute(
        f"""INSERT INTO work_unit_executions (xid, wid, eid, {_EXEC_SELECT})
            SELECT xid, wid, eid, {_EXEC_SELECT} FROM work_units WHERE xid = $1 AND wid = $2""",
        xid,
        wid,
    )
    old_state = WorkUnitState(current["state"])
    new_state = WorkUnitState.RESTARTING
    new_eid = current["eid"] + 1
    fresh = StoredExecution(now, now, None, new_state, now, now)
    row = await fetch_one(
        conn,
        f"""UPDATE work_units SET eid = $3, exec_create_time = $4, exec_update_time = $4,
                exec_complete_time = NULL, state = $5, state_update_time = $4,
                status_update_time = $4, system_message = NULL, user_message = NULL,
                scheduling_information = NULL, detailed_status = NULL, metadata = NULL,
                exec_wire = $6, exit_code = NULL
            WHERE xid = $1 AND wid = $2 RETURNING {WORK_UNIT_COLUMNS}""",
        xid,
        wid,
        new_eid,
        now,
        int(new_state),
        execution_wire(xid, wid, new_eid, fresh),
    )
    await insert_history(
        conn,
        [
            (xid, wid, new_eid, int(old_state), int(new_state), now, writer, now,
             actor.principal, actor.request_id)
        ],
    )  # fmt: skip
    old_best = stored_from_row(current).best_severity()
    delta = RollupDelta(state_changes=[(old_state, new_state)])
    if old_best is not None:
        delta.severity_changes.append((old_best, None))
    await apply_rollups(conn, {xid: delta}, now=now, execution_update=False)
    return work_unit_from_row(row)


async def fetch_work_unit(conn: Connection, xid: int, wid: int) -> WorkUnit:
    row = await conn.fetchrow(
        f"SELECT {WORK_UNIT_COLUMNS} FROM work_units WHERE xid = $1 AND wid = $2", xid, wid
    )
    if row is None:
        raise NotFoundError(f"name: {work_unit_name(xid, wid)} does not exist")
    return work_unit_from_row(row)


async def fetch_work_unit_executions(
    conn: Connection, xid: int, wid: int
) -> list[WorkUnitExecution]:
    """Every execution, oldest first, the current one last and ACTIVE (SPEC §2.1)."""
    current = await fetch_work_unit(conn, xid, wid)
    rows = await conn.fetch(
        f"""SELECT eid, {_EXEC_SELECT} FROM work_unit_executions
            WHERE xid = $1 AND wid = $2 ORDER BY eid""",
        xid,
        wid,
    )
    executions = []
    for row in rows:
        execution = execution_from_row(row, xid=xid, wid=wid, eid=row["eid"])
        execution.state = INACTIVE
        executions.append(execution)
    executions.append(current.current_work_unit_execution)
    return executions


def _runtime_ms(a: str) -> str:
    elapsed = f"coalesce({a}.exec_complete_time, {AS_OF}) - {a}.exec_create_time"
    return f"(extract(epoch FROM {elapsed}) * 1000)::bigint"


def _work_unit_listing(alias: str, columns: str) -> ListResource:
    a = alias
    state = FieldSpec(f"{a}.state", FieldKind.ENUM, enum=WorkUnitState)
    return ListResource(
        source=f"work_units {a}",
        columns=", ".join(f"{a}.{c.strip()}" for c in columns.split(",")),
        fields={
            "wid": FieldSpec(f"{a}.wid", FieldKind.INT),
            "state": state,
            "status.state": state,
            "current_work_unit_execution.status.state": state,
            "execution_id": FieldSpec(f"{a}.eid", FieldKind.INT),
            "tags": FieldSpec(f"{a}.tags", FieldKind.STRING_LIST, sortable=False),
            "notes": FieldSpec(f"{a}.notes", FieldKind.STRING, sortable=False),
            "priority": FieldSpec(f"{a}.priority", FieldKind.ENUM, enum=Priority),
            "work_unit_type": FieldSpec(f"{a}.work_unit_type", FieldKind.INT),
            "create_time": FieldSpec(f"{a}.create_time", FieldKind.TIMESTAMP),
            "update_time": FieldSpec(f"{a}.update_time", FieldKind.TIMESTAMP),
            "state_update_time": FieldSpec(f"{a}.state_update_time", FieldKind.TIMESTAMP),
            "args": FieldSpec(f"{a}.args", FieldKind.ARGS, numbers=f"{a}.arg_numbers"),
            # Sort only (decision 0037): the current execution's runtime in milliseconds,
            # from its creation to its completion or, while it goes on, to the walk's start;
            # time in state is state_update_time read backwards (ascending: shortest first).
            "runtime": FieldSpec(_runtime_ms(a), FieldKind.INT, filterable=False),
            "time_in_state": FieldSpec(
                f"{a}.state_update_time", FieldKind.TIMESTAMP, filterable=False, inverted=True
            ),
            # The current execution's exit code (docs/logs.md); -1 while none is known, so
            # a sort puts those first and a page token never carries a NULL.
            "exit_code": FieldSpec(f"coalesce({a}.exit_code, -1)", FieldKind.INT),
        },
        default_order=(OrderKey("wid"),),
        tiebreak=(f"{a}.xid", f"{a}.wid"),
    )


WORK_UNIT_LISTING = _work_unit_listing("w", WORK_UNIT_COLUMNS)
#: Pages read the stored wire parts only (``xmc.store.wire``).
WORK_UNIT_WIRE_LISTING = _work_unit_listing("w", "xid, wid, head, exec_wire")

#: What ``UpdateWorkUnit`` may change (SPEC §2.1).
WORK_UNIT_UPDATABLE = frozenset({"priority", "urls", "tags", "notes"})


async def list_work_units(conn: Connection, xid: int, request: ListRequest) -> bytes:
    """One page as a serialized ``ListWorkUnitsResponse``, framed from the stored wire
    parts (``xmc.store.wire``). NOT_FOUND when the experiment does not exist — before any
    complaint about the filter or token — checked only when the page is empty or the
    request is refused: a work unit row implies its experiment (foreign key), so a full
    page needs no check."""
    try:
        rows, token = await fetch_page(
            conn, WORK_UNIT_WIRE_LISTING, request, where="w.xid = $1", params=[xid], scope=str(xid)
        )
    except InvalidArgumentError:
        await require_experiment(conn, xid)
        raise
    if not rows:
        await require_experiment(conn, xid)
    heads = [row["head"] for row in rows]
    wires = [row["exec_wire"] for row in rows]
    if None in heads or None in wires:
        wids = [row["wid"] for row in rows]
        return list_response_from_parts(await _fill_parts(conn, xid, wids, heads, wires), token)
    return list_response_from_parts(zip(heads, wires, strict=True), token)


async def _fill_parts(
    conn: Connection,
    xid: int,
    wids: list[int],
    heads: list[bytes | None],
    wires: list[bytes | None],
) -> list[tuple[bytes, bytes]]:
    """A page's parts with those not stored yet built from their columns. A row gone
    since the page was read (its experiment deleted) is left out."""
    parts = dict(zip(wids, zip(heads, wires, strict=True), strict=True))
    missing = [wid for wid, pair in parts.items() if None in pair]
    parts.update(await _parts_from_columns(conn, xid, missing))
    return [(h, e) for h, e in parts.values() if h is not None and e is not None]


async def _parts_from_columns(
    conn: Connection, xid: int, wids: list[int]
) -> dict[int, tuple[bytes | None, bytes | None]]:
    """Rows whose wire parts are not stored yet (written before migration 0003)."""
    rows = await conn.fetch(
        f"SELECT {WORK_UNIT_COLUMNS} FROM work_units WHERE xid = $1 AND wid = ANY($2::bigint[])",
        xid,
        wids,
    )
    return {wid: (None, None) for wid in wids} | {row["wid"]: wire_parts(row) for row in rows}


async def select_work_unit_ids(conn: Connection, xid: int, filter_text: str) -> list[int]:
    """Every work unit of the experiment matching ``filter_text`` (batch stop/restart)."""
    where, params = compile_filter(filter_text, WORK_UNIT_LISTING.fields, first_param=2)
    rows = await conn.fetch(
        f"SELECT w.wid FROM work_units w WHERE w.xid = $1 AND ({where}) ORDER BY w.wid",
        xid,
        *params,
    )
    return [r["wid"] for r in rows]


async def update_work_unit(
    conn: Connection, xid: int, wid: int, source: WorkUnit, paths: tuple[str, ...], *, now: datetime
) -> WorkUnit:
    """Apply a validated update mask (user fields only; the execution is untouched)."""
    row = await conn.fetchrow(
        f"SELECT {WORK_UNIT_COLUMNS} FROM work_units WHERE xid = $1 AND wid = $2 FOR UPDATE",
        xid,
        wid,
    )
    if row is None:
        raise NotFoundError(f"name: {work_unit_name(xid, wid)} does not exist")
    work_unit = work_unit_from_row(row)
    apply_update_mask(work_unit, source, paths)
    changed = {
        **row,
        "priority": int(work_unit.priority),
        "tags": list(work_unit.tags),
        "notes": work_unit.notes,
        "doc": work_unit_doc(work_unit),
        "update_time": now,
    }
    row = await fetch_one(
        conn,
        f"""UPDATE work_units SET priority = $3, tags = $4, notes = $5, doc = $6, update_time = $7,
                head = $8
            WHERE xid = $1 AND wid = $2 RETURNING {WORK_UNIT_COLUMNS}""",
        xid,
        wid,
        changed["priority"],
        changed["tags"],
        changed["notes"],
        changed["doc"],
        now,
        head_wire(changed),
    )
    return work_unit_from_row(row)
