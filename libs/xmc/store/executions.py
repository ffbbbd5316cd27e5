"""``UpdateWorkUnitExecutions`` (SPEC §5): the masked observation write, one batch per
transaction.

Steps, all inside the caller's transaction:
1. validate the whole batch (malformed input fails it before any statement runs);
2. lock the work units in (xid, wid) order — the deterministic order that keeps
   concurrent batches from deadlocking — and read their current execution;
3. per item, in request order: EID fence, then the pure ``merge_work_unit_execution``;
4. write back changed rows, history and messages with one statement each;
5. apply the experiment rollups (experiment rows locked after the work units).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from xmc.model.audit import Actor
from xmc.model.business import Transition
from xmc.model.guard import GuardReason
from xmc.model.merge import (
    STATE_PATH,
    SYSTEM_MESSAGE_PATH,
    ExecutionUpdate,
    merge_work_unit_execution,
    validate_batch,
)
from xmc.model.notifications import ExperimentChange, UnitFailure
from xmc.model.states import WorkUnitState
from xmc.model.stored import StoredExecution
from xmc.store.codec import EXECUTION_COLUMNS, stored_from_row, stored_to_columns
from xmc.store.connection import Connection
from xmc.store.rollups import RollupDelta, apply_rollups
from xmc.store.wire import execution_wire
from xmc.store.work_units import insert_history
from xmc.timestamps import set_timestamp, stamp_after, to_datetime
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution


class UpdateOutcome(enum.StrEnum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    #: EID fence: the item named an execution that is not the current one.
    STALE_EXECUTION = "stale_execution"
    NOT_FOUND = "not_found"


class ItemResult(NamedTuple):
    """One item's outcome (a NamedTuple: a frozen dataclass cost ~1.5 µs more per item)."""

    xid: int
    wid: int
    eid: int
    outcome: UpdateOutcome
    state_changed: bool = False
    #: The stored state after the item (UNSPECIFIED when the work unit does not exist).
    state: WorkUnitState = WorkUnitState.WORK_UNIT_STATE_UNSPECIFIED
    state_rejection: GuardReason | None = None


@dataclass
class _Slot:
    """One locked work unit while the batch is being merged."""

    eid: int
    initial: StoredExecution
    current: StoredExecution
    changed: bool = False


_SELECT_LOCKED = f"""
    SELECT w.xid, w.wid, w.eid, {", ".join("w." + c for c in EXECUTION_COLUMNS)}
    FROM work_units w
    WHERE (w.xid, w.wid) IN (SELECT * FROM unnest($1::bigint[], $2::bigint[]))
    ORDER BY w.xid, w.wid
    FOR UPDATE OF w"""

_COLUMN_TYPES = (
    "timestamptz",
    "timestamptz",
    "timestamptz",
    "smallint",
    "timestamptz",
    "timestamptz",
    "bytea",
    "bytea",
    "bytea",
    "bytea",
    "bytea",
)
#: The execution columns and ``exec_wire``, the execution as the API serializes it
#: (``xmc.store.wire``), which pages are framed from.
_WRITTEN = (*EXECUTION_COLUMNS, "exec_wire")
_UPDATE_CHANGED = f"""
    UPDATE work_units AS w SET {", ".join(f"{c} = u.{c}" for c in _WRITTEN)}
    FROM unnest($1::bigint[], $2::bigint[],
                {", ".join(f"${i + 3}::{t}[]" for i, t in enumerate((*_COLUMN_TYPES, "bytea")))})
         AS u(xid, wid, {", ".join(_WRITTEN)})
    WHERE w.xid = u.xid AND w.wid = u.wid"""

_INSERT_MESSAGES = """
    INSERT INTO status_messages (xid, wid, eid, field, severity, content, create_time)
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::smallint[],
                         $6::bytea[], $7::timestamptz[])"""


async def _lock_work_units(
    conn: Connection, items: Sequence[ExecutionUpdate]
) -> dict[tuple[int, int], _Slot]:
    keys = sorted({(item.xid, item.wid) for item in items})
    rows = await conn.fetch(_SELECT_LOCKED, [k[0] for k in keys], [k[1] for k in keys])
    slots = {}
    for row in rows:
        stored = stored_from_row(row)
        slots[(row["xid"], row["wid"])] = _Slot(row["eid"], stored, stored)
    return slots


async def update_work_unit_executions(
    conn: Connection,
    items: Sequence[ExecutionUpdate],
    *,
    writer: str,
    actor: Actor,
    now: datetime,
    events: list[ExperimentChange] | None = None,
    transitions: list[Transition] | None = None,
) -> list[ItemResult]:
    """Run one batch; the caller provides the transaction (see module docstring). Every
    history row of the batch records ``actor`` (one request, one principal).
    ``events``: the notifications are collected there, not queued (``apply_rollups``).
    ``transitions``: each accepted state change is appended there, with the times the
    business metrics need (``xmc.model.business``), for the caller to count after commit."""
    validate_batch(items)
    if not items:
        return []
    slots = await _lock_work_units(conn, items)

    results: list[ItemResult] = []
    history: list[tuple[Any, ...]] = []
    principal, request_id = actor.principal, actor.request_id
    messages: list[tuple[Any, ...]] = []
    for item in items:
        slot = slots.get((item.xid, item.wid))
        if slot is None:
            results.append(ItemResult(item.xid, item.wid, item.eid, UpdateOutcome.NOT_FOUND))
            continue
        if item.eid != slot.eid:
            state = slot.current.state
            results.append(
                ItemResult(item.xid, item.wid, item.eid, UpdateOutcome.STALE_EXECUTION, state=state)
            )
            continue
        merged = merge_work_unit_execution(
            slot.current,
            item.execution,
            item.update_mask,
            force_status_message_update=item.force_status_message_update,
            now=now,
        )
        before = slot.current
        slot.current = merged.execution
        slot.changed |= merged.changed
        if merged.state_change is not None:
            old, new = merged.state_change
            state_time = merged.execution.state_update_time
            history.append(
                (item.xid, item.wid, item.eid, int(old), int(new), state_time, writer, now,
                 principal, request_id)
            )  # fmt: skip
            if transitions is not None:
                transitions.append(
                    Transition(
                        item.xid, item.wid, item.eid, old, new,
                        before.state_update_time, state_time, before.create_time,
                    )
                )  # fmt: skip
        for field, message in merged.new_messages:
            messages.append(
                (
                    item.xid,
                    item.wid,
                    item.eid,
                    field.value,
                    int(message.severity),
                    message.SerializeToString(),
                    to_datetime(message.create_time),
                )
            )
        results.append(
            ItemResult(
                item.xid,
                item.wid,
                item.eid,
                UpdateOutcome.APPLIED if merged.changed else UpdateOutcome.UNCHANGED,
                state_changed=merged.state_change is not None,
                state=merged.execution.state,
                state_rejection=merged.state_rejection,
            )
        )

    await _write_changed(conn, slots)
    await insert_history(conn, history)
    if messages:
        await conn.execute(_INSERT_MESSAGES, *zip(*messages, strict=True))
    await apply_rollups(conn, _rollup_deltas(slots), now=now, execution_update=True, events=events)
    return results


async def _write_changed(conn: Connection, slots: dict[tuple[int, int], _Slot]) -> None:
    changed = [(key, slot) for key, slot in slots.items() if slot.changed]
    if not changed:
        return
    rows = [
        (*key, *stored_to_columns(slot.current), execution_wire(*key, slot.eid, slot.current))
        for key, slot in changed
    ]
    await conn.execute(_UPDATE_CHANGED, *zip(*rows, strict=True))


def _rollup_deltas(slots: dict[tuple[int, int], _Slot]) -> dict[int, RollupDelta]:
    """Net effect per experiment: only where a work unit started and ended matters."""
    deltas: dict[int, RollupDelta] = defaultdict(RollupDelta)
    for (xid, wid), slot in slots.items():
        if not slot.changed:
            continue
        before, after = slot.initial.state, slot.current.state
        if before != after:
            deltas[xid].state_changes.append((before, after))
            if after == WorkUnitState.FAILED:
                deltas[xid].failures.append(UnitFailure(wid, slot.eid))
        initial, current = slot.initial, slot.current
        if (
            initial.system_message == current.system_message
            and initial.user_message == current.user_message
        ):
            continue  # the severity comes from these two alone: no need to parse them
        old_best, new_best = initial.best_severity(), current.best_severity()
        if old_best != new_best:
            deltas[xid].severity_changes.append((old_best, new_best))
    return deltas


async def write_decided_state(
    conn: Connection,
    xid: int,
    wid: int,
    eid: int,
    state: WorkUnitState,
    *,
    message: StructuredMessage | None = None,
    writer: str,
    actor: Actor,
    now: datetime,
) -> ItemResult:
    """A state XMC decides itself (STOPPED when there is nothing to stop, FAILED when an
    execution can never start), through the masked path, so the guard still decides (a
    terminal execution stays as it is, an older eid is fenced off).

    Stamped no earlier than the stored state + 1 µs: XMC's hosts' clocks differ, and a
    writer behind the one that stamped the stored state must not lose to the time order
    and leave the execution hanging (docs/decisions/0011).
    """
    stored = await conn.fetchval(
        "SELECT state_update_time FROM work_units WHERE xid = $1 AND wid = $2", xid, wid
    )
    execution = WorkUnitExecution()
    execution.status.state = int(state)  # type: ignore[assignment]
    set_timestamp(execution.status.state_update_time, stamp_after(stored, now))
    mask: tuple[str, ...] = (STATE_PATH,)
    if message is not None:
        execution.status.system_message.CopyFrom(message)
        mask += (SYSTEM_MESSAGE_PATH,)
    (result,) = await update_work_unit_executions(
        conn, [ExecutionUpdate(xid, wid, eid, execution, mask)], writer=writer, actor=actor,
        now=now,
    )  # fmt: skip
    return result
