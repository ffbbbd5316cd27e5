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

from xmc.errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    XmcError,
)
from xmc.model.states import WorkUnitState
from xmc.names import MAX_CLIENT_WORK_UNIT_ID, MAX_ID, experiment_name, work_unit_name
from xmc.store.codec import EXECUTION_COLUMNS
from xmc.store.connection import Connection
from xmc.store.experiments import RollupDelta, apply_rollups, experiment_doc_acls
from xmc.store.operations import ActionType, NewOperation, insert_operations, operations_by_key
from xmc.store.wire import work_unit_wire
from xmc.store.work_units import (
    insert_history,
    wire_parts,
    work_unit_doc,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

_INITIALIZING = int(WorkUnitState.INITIALIZING)

_INSERT = f"""
    INSERT INTO work_units (xid, wid, work_unit_type, priority, tags, notes, doc,
        create_time, update_time, eid, exec_create_time, exec_update_time, state,
        state_update_time, status_update_time, head, exec_wire)
    SELECT u.xid, u.wid, u.work_unit_type, u.priority,
           ARRAY(SELECT jsonb_array_elements_text(u.tags)), u.notes, u.doc,
           $8, $8, 1, $8, $8, {_INITIALIZING}, $8, $8, u.head, u.exec_wire
    FROM unnest($1::bigint[], $2::bigint[], $3::smallint[], $4::smallint[], $5::jsonb[],
                $6::text[], $7::bytea[], $9::bytea[], $10::bytea[])
         AS u(xid, wid, work_unit_type, priority, tags, notes, doc, head, exec_wire)
    ON CONFLICT (xid, wid) DO NOTHING
    RETURNING xid, wid"""


@dataclass(frozen=True)
class NewWorkUnit:
    xid: int
    #: Client-chosen id (idempotent create), or None for the next free id.
    wid: int | None
    work_unit: WorkUnit
    requester: str


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
) -> list[CreateOutcome]:
    """Create what can be created, in the caller's transaction; one outcome per item.
    ``authorize`` sees each item with its experiment (read under the row lock)."""
    outcomes: list[CreateOutcome | None] = [None] * len(items)
    for i, item in enumerate(items):
        if item.wid is not None and item.wid < 1:
            outcomes[i] = InvalidArgumentError(f"work_unit_id: must be >= 1, got {item.wid}")
        elif item.wid is not None and item.wid > MAX_CLIENT_WORK_UNIT_ID:
            outcomes[i] = InvalidArgumentError(
                f"work_unit_id: must be <= {MAX_CLIENT_WORK_UNIT_ID}, got {item.wid}"
            )

    # 1. Lock the experiments (their next id and counts change), in xid order.
    xids = sorted({item.xid for item in items})
    rows = await conn.fetch(
        "SELECT xid, next_wid, creator, priority, doc FROM experiments "
        "WHERE xid = ANY($1::bigint[]) ORDER BY xid FOR UPDATE",
        xids,
    )
    next_wid = {r["xid"]: r["next_wid"] for r in rows}
    access = {
        r["xid"]: ExperimentAccess(
            experiment_name(r["xid"]), r["creator"], experiment_doc_acls(r["doc"])
        )
        for r in rows
    }
    priority = {r["xid"]: r["priority"] for r in rows}

    # 2. Repeats of a client-chosen id answer with the first Operation.
    chosen = [(item.xid, item.wid) for item in items if item.wid is not None]
    existing = await operations_by_key(conn, chosen, ActionType.CREATE)

    # 3. Assign ids; a client id repeated within the group is created once.
    planned: dict[tuple[int, int], int] = {}
    first_of: dict[tuple[int, int], int] = {}
    repeats: dict[int, tuple[int, int]] = {}
    for i, item in enumerate(items):
        if outcomes[i] is not None:
            continue
        if item.xid not in next_wid:
            outcomes[i] = NotFoundError(f"parent: {experiment_name(item.xid)} does not exist")
            continue
        refusal = authorize(i, access[item.xid]) if authorize else None
        if refusal is not None:
            outcomes[i] = refusal
            continue
        if item.wid is None:
            wid = next_wid[item.xid]
            if wid >= MAX_ID:  # only ids chosen before the client bound can get here
                outcomes[i] = ResourceExhaustedError(
                    f"parent: {experiment_name(item.xid)} has no server-assigned work-unit "
                    "ids left; choose a work_unit_id"
                )
                continue
        else:
            wid = item.wid
            key = (item.xid, wid)
            if key in existing:
                outcomes[i] = Created(existing[key], None, priority[item.xid])
                continue
            if key in planned:
                repeats[i] = key
                continue
        next_wid[item.xid] = max(next_wid[item.xid], wid + 1)
        planned[(item.xid, wid)] = first_of[(item.xid, wid)] = i

    # 4. Insert the rows; a conflict means another transaction created that id first.
    # The rows as they will be stored, so the response and the wire parts are built
    # here and the insert returns only which keys it took.
    keys = list(planned)
    rows = [_new_row(k, items[planned[k]].work_unit, now) for k in keys]
    parts = [wire_parts(row) for row in rows]
    inserted = (
        await conn.fetch(
            _INSERT,
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
        )
        if keys
        else []
    )
    # The answer is parsed from the stored bytes (upb) rather than built a second time.
    taken = {(r["xid"], r["wid"]) for r in inserted}
    created = {
        key: WorkUnit.FromString(work_unit_wire(*part))
        for key, part in zip(keys, parts, strict=True)
        if key in taken
    }
    lost = [k for k in keys if k not in created]
    if lost:
        won_elsewhere = await operations_by_key(conn, lost, ActionType.CREATE)
        for key in lost:
            i = planned.pop(key)
            found = won_elsewhere.get(key)
            outcomes[i] = (
                Created(found, None, priority[key[0]])
                if found is not None and items[i].wid is not None
                else AlreadyExistsError(f"work_unit_id: {work_unit_name(*key)} already exists")
            )

    # 5. Operations, history and rollups for what was created.
    new_keys = [k for k in keys if k in created]
    operations = await insert_operations(
        conn,
        [
            NewOperation(k[0], k[1], ActionType.CREATE, items[planned[k]].requester)
            for k in new_keys
        ],
        now=now,
    )
    for key, operation in zip(new_keys, operations, strict=True):
        outcomes[planned[key]] = Created(operation, created[key], priority[key[0]])
    await insert_history(
        conn,
        [(k[0], k[1], 1, 0, _INITIALIZING, now, writer, now) for k in new_keys],
    )
    deltas: dict[int, RollupDelta] = {}
    for xid, _wid in new_keys:
        delta = deltas.setdefault(xid, RollupDelta(min_next_wid=next_wid[xid]))
        delta.state_changes.append((None, WorkUnitState.INITIALIZING))
    await apply_rollups(conn, deltas, now=now, execution_update=False)

    # 6. In-group repeats answer like their first item.
    for i, key in repeats.items():
        first = outcomes[first_of[key]]
        outcomes[i] = (
            Created(first.operation, None, first.experiment_priority)
            if isinstance(first, Created)
            else first
        )
    assert all(o is not None for o in outcomes), "every item has an outcome"
    return [o for o in outcomes if o is not None]


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
