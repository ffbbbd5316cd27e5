"""Creating work units, many per transaction (SPEC §4 ``CreateWorkUnit``: a full-row
insert of the work unit with execution eid=1 INITIALIZING, plus its CREATE Operation).

The ESS groups concurrent CreateWorkUnit calls into one call of ``create_work_units``:
every create touches its experiment's row (next id, counts), so one transaction per
create serializes all of them on that row and on a commit each. Grouped, a busy
experiment pays one row lock and one commit per group.

Per-item outcomes are data: one bad item (unknown experiment, duplicate id) does not fail
the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.longrunning.operations_proto_pb2 import Operation

from xmc.errors import AlreadyExistsError, XmcError
from xmc.model.args import arg_numbers_json, work_unit_args
from xmc.model.audit import Actor
from xmc.model.states import WorkUnitState
from xmc.model.usage import queue_of, requested_resources
from xmc.model.work_unit_ids import IdRequest, Key, plan_work_unit_ids
from xmc.names import experiment_name, work_unit_name
from xmc.store.codec import EXECUTION_COLUMNS
from xmc.store.connection import Connection, Record
from xmc.store.experiments import experiment_doc_acls
from xmc.store.operations import ActionType, NewOperation, insert_operations, operations_by_key
from xmc.store.rollups import ROLLUP_COLUMNS, RollupDelta, apply_rollups
from xmc.store.runs import write_runs
from xmc.store.wire import work_unit_wire
from xmc.store.work_units import (
    HISTORY_COPY_THRESHOLD,
    insert_history,
    wire_parts,
    work_unit_doc,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

_INITIALIZING = int(WorkUnitState.INITIALIZING)

#: The units, and with them (joined to the keys actually inserted: a key another
#: transaction took gets neither) what they asked of the cluster (``xmc.store.usage``) and,
#: for a group below ``HISTORY_COPY_THRESHOLD``, their INITIALIZING history rows: one
#: statement, so a lone create pays two round trips less (over a slow database path each
#: costs the path's delay). A larger group writes its history by COPY, which is faster.
_INSERT = f"""
    WITH inserted AS (
        INSERT INTO work_units (xid, wid, work_unit_type, priority, tags, notes, doc,
            create_time, update_time, eid, exec_create_time, exec_update_time, state,
            state_update_time, status_update_time, head, exec_wire, args, arg_numbers,
            quota_principals)
        SELECT u.xid, u.wid, u.work_unit_type, u.priority,
               ARRAY(SELECT jsonb_array_elements_text(u.tags)), u.notes, u.doc,
               $8, $8, 1, $8, $8, {_INITIALIZING}, $8, $8, u.head, u.exec_wire, u.args,
               u.numbers, ARRAY(SELECT jsonb_array_elements_text(u.principals))
        FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::smallint[], $5::jsonb[],
                    $6::text[], $7::bytea[], $9::bytea[], $10::bytea[], $11::jsonb[],
                    $12::jsonb[], $13::jsonb[])
             AS u(xid, wid, work_unit_type, priority, tags, notes, doc, head, exec_wire, args,
                  numbers, principals)
        ON CONFLICT (xid, wid) DO NOTHING
        RETURNING xid, wid
    ), resources AS (
        INSERT INTO work_unit_resources
            (xid, wid, queue, cpu_millicores, memory_bytes, gpus, tpu_chips, accelerators)
        SELECT r.* FROM unnest($1::bigint[], $2::bigint[], $14::text[], $15::bigint[],
                               $16::bigint[], $17::bigint[], $18::bigint[], $19::jsonb[])
             AS r(xid, wid, queue, cpu_millicores, memory_bytes, gpus, tpu_chips, accelerators)
        JOIN inserted USING (xid, wid)
    )HISTORY
    SELECT xid, wid FROM inserted"""
_HISTORY = f""", history AS (
        INSERT INTO work_unit_status_history
            (xid, wid, eid, old_state, new_state, state_update_time, writer, record_time,
             principal, request_id)
        SELECT h.xid, h.wid, 1, 0, {_INITIALIZING}, $8, $20, $8, h.principal, h.request_id
        FROM unnest($1::bigint[], $2::bigint[], $21::text[], $22::text[])
             AS h(xid, wid, principal, request_id)
        JOIN inserted USING (xid, wid)
    )"""
_INSERT_WITH_HISTORY = _INSERT.replace("HISTORY", _HISTORY)
_INSERT_ALONE = _INSERT.replace("HISTORY", "")


@dataclass(frozen=True)
class NewWorkUnit:
    xid: int
    #: Client-chosen id (idempotent create), or None for the next free id.
    wid: int | None
    work_unit: WorkUnit
    #: Who asked (the Operation's requester, the history row's principal) and in which request.
    actor: Actor
    #: Whom the unit counts against (``xmc.model.quotas.principals_of``); none: nobody.
    principals: tuple[str, ...] = ()


@dataclass(frozen=True)
class Created:
    """A work unit this call created (``work_unit`` set) or found created before by the
    same client-chosen id (``work_unit`` None: nothing new, the first Operation)."""

    operation: Operation
    work_unit: WorkUnit | None
    #: The experiment's priority, which the CREATE task carries.
    experiment_priority: int = 0


CreateOutcome = Created | XmcError


@dataclass(frozen=True)
class ExperimentAccess:
    """What an authorization check needs to know about the parent experiment."""

    name: str
    creator: str
    acls: XidAcls


#: Given an item's index and its experiment: the error that refuses it, or None.
Authorize = Callable[[int, ExperimentAccess], XmcError | None]


async def create_work_units(
    conn: Connection,
    items: Sequence[NewWorkUnit],
    *,
    writer: str,
    now: datetime,
    authorize: Authorize | None = None,
    admit: Callable[[int], XmcError | None] | None = None,
) -> list[CreateOutcome]:
    """Create what can be created, in the caller's transaction; one outcome per item.
    ``authorize`` sees each item with its experiment (read under the row lock); ``admit``
    (quotas) each item that would create a unit, after it.

    Lock the experiments → plan the ids (``xmc.model.work_unit_ids``) → insert → record
    the Operations, history and rollups of what was inserted, and what each asked of the
    cluster (``xmc.store.usage``: accounting reads it for every execution of the unit).
    A lone create costs seven round trips with BEGIN, the outbox's insert and COMMIT."""
    locked = await _lock_experiments(conn, {item.xid for item in items})
    chosen = [(item.xid, item.wid) for item in items if item.wid is not None]
    earlier = await operations_by_key(conn, chosen, ActionType.CREATE)

    def refuse(i: int) -> XmcError | None:
        return authorize(i, locked[items[i].xid].access) if authorize else None

    plan = plan_work_unit_ids(
        [IdRequest(item.xid, item.wid) for item in items],
        next_wid={xid: experiment.next_wid for xid, experiment in locked.items()},
        created_before=earlier.keys(),
        refuse=refuse,
        admit=admit,
    )
    outcomes: dict[int, CreateOutcome] = dict(plan.refused)
    for i, key in plan.created_before.items():
        outcomes[i] = Created(earlier[key], None, locked[key[0]].priority)

    planned = {key: items[i] for key, i in plan.planned.items()}
    with_history = len(planned) < HISTORY_COPY_THRESHOLD
    created = await _insert(conn, planned, now, writer=writer if with_history else None)
    lost = [key for key in plan.planned if key not in created]
    if lost:
        # Another transaction created that id first.
        won_elsewhere = await operations_by_key(conn, lost, ActionType.CREATE)
        for key in lost:
            i, found = plan.planned[key], won_elsewhere.get(key)
            outcomes[i] = (
                Created(found, None, locked[key[0]].priority)
                if found is not None and items[i].wid is not None
                else AlreadyExistsError(f"work_unit_id: {work_unit_name(*key)} already exists")
            )

    actors = {key: items[plan.planned[key]].actor for key in created}
    operations = await _record_created(
        conn,
        actors,
        plan.next_wid,
        [locked[xid].row for xid in sorted(locked)],
        writer=writer,
        now=now,
        history_written=with_history,
    )
    for key, operation in operations.items():
        outcomes[plan.planned[key]] = Created(operation, created[key], locked[key[0]].priority)

    # In-group repeats answer like their first item.
    for i, key in plan.repeats.items():
        first = outcomes[plan.planned[key]]
        outcomes[i] = (
            Created(first.operation, None, first.experiment_priority)
            if isinstance(first, Created)
            else first
        )
    assert len(outcomes) == len(items), "every item has an outcome"
    return [outcomes[i] for i in range(len(items))]


@dataclass(frozen=True)
class _Locked:
    """An experiment as a create group needs it, read under its row lock."""

    next_wid: int
    priority: int
    access: ExperimentAccess
    #: Its rollup columns as read (``xmc.store.rollups.ROLLUP_COLUMNS``), which the
    #: rollup of the group's creates then need not read again.
    row: Record


async def _lock_experiments(conn: Connection, xids: set[int]) -> dict[int, _Locked]:
    """Lock the experiments (their next id and counts change), in xid order; the ones
    that exist, by id."""
    rows = await conn.fetch(
        f"SELECT next_wid, priority, doc, {ROLLUP_COLUMNS} FROM experiments "
        "WHERE xid = ANY($1::bigint[]) ORDER BY xid FOR UPDATE",
        sorted(xids),
    )
    return {
        r["xid"]: _Locked(
            r["next_wid"],
            r["priority"],
            ExperimentAccess(
                experiment_name(r["xid"]), r["creator"], experiment_doc_acls(r["doc"])
            ),
            r,
        )
        for r in rows
    }


async def _insert(
    conn: Connection, planned: dict[Key, NewWorkUnit], now: datetime, *, writer: str | None
) -> dict[Key, WorkUnit]:
    """Insert the planned work units with their requested resources, and with their
    history rows written by ``writer`` when given; those inserted, as stored, by key (a
    key missing: another transaction took it). The rows are built here as they will be
    stored, so the answer and the wire parts come from them and the insert returns only
    the keys."""
    if not planned:
        return {}
    keys = list(planned)
    rows = [_new_row(key, planned[key].work_unit, now) for key in keys]
    parts = [wire_parts(row) for row in rows]
    args = [work_unit_args(planned[key].work_unit) for key in keys]
    asked = [requested_resources(planned[key].work_unit) for key in keys]
    history = (
        ()
        if writer is None
        else (
            writer,
            [planned[key].actor.principal for key in keys],
            [planned[key].actor.request_id for key in keys],
        )
    )
    inserted = await conn.fetch(
        _INSERT_ALONE if writer is None else _INSERT_WITH_HISTORY,
        [k[0] for k in keys],
        [k[1] for k in keys],
        [row["work_unit_type"] for row in rows],
        [row["priority"] for row in rows],
        [_json_list(row["tags"]) for row in rows],
        [row["notes"] for row in rows],
        [row["doc"] for row in rows],
        now,
        [head for head, _ in parts],
        [exec_wire for _, exec_wire in parts],
        [json.dumps(a) for a in args],
        [arg_numbers_json(a) for a in args],
        [json.dumps(planned[key].principals) for key in keys],
        [queue_of(planned[key].work_unit) for key in keys],
        [a.cpu_millicores for a in asked],
        [a.memory_bytes for a in asked],
        [a.gpus for a in asked],
        [a.tpu_chips for a in asked],
        [json.dumps(dict(a.accelerators)) for a in asked],
        *history,
    )
    # The answer is parsed from the stored bytes (upb) rather than built a second time.
    taken = {(r["xid"], r["wid"]) for r in inserted}
    return {
        key: WorkUnit.FromString(work_unit_wire(*part))
        for key, part in zip(keys, parts, strict=True)
        if key in taken
    }


async def _record_created(
    conn: Connection,
    actors: dict[Key, Actor],
    next_wid: dict[int, int],
    locked: Sequence[Record],
    *,
    writer: str,
    now: datetime,
    history_written: bool,
) -> dict[Key, Operation]:
    """The CREATE Operations (by key), the history rows (unless the insert wrote them)
    and the experiment rollups of the work units just inserted, each requested by
    ``actors[key]``; ``locked``: the experiments' rollup columns read under their lock."""
    keys = list(actors)
    operations = await insert_operations(
        conn,
        [NewOperation(k[0], k[1], ActionType.CREATE, actors[k]) for k in keys],
        now=now,
    )
    history = [
        (k[0], k[1], 1, 0, _INITIALIZING, now, writer, now, a.principal, a.request_id)
        for k, a in actors.items()
    ]
    if history_written:
        await write_runs(conn, history)  # an INITIALIZING row opens none: no round trip
    else:
        await insert_history(conn, history)
    deltas: dict[int, RollupDelta] = {}
    for xid, _wid in keys:
        delta = deltas.setdefault(xid, RollupDelta(min_next_wid=next_wid[xid]))
        delta.state_changes.append((None, WorkUnitState.INITIALIZING))
    await apply_rollups(conn, deltas, now=now, execution_update=False, locked=locked)
    return dict(zip(keys, operations, strict=True))


def _new_row(key: tuple[int, int], work_unit: WorkUnit, now: datetime) -> dict[str, Any]:
    """The columns ``_INSERT`` stores for a new work unit: execution 1, INITIALIZING."""
    return {
        "xid": key[0],
        "wid": key[1],
        "work_unit_type": int(work_unit.work_unit_type),
        "priority": int(work_unit.priority),
        "tags": list(work_unit.tags),
        "notes": work_unit.notes,
        "doc": work_unit_doc(work_unit),
        "create_time": now,
        "update_time": now,
        "eid": 1,
        **dict.fromkeys(EXECUTION_COLUMNS),
        "exec_create_time": now,
        "exec_update_time": now,
        "state": _INITIALIZING,
        "state_update_time": now,
        "status_update_time": now,
    }


def _json_list(values: Sequence[str]) -> str:
    return json.dumps(list(values))
