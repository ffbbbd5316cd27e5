"""Rows ↔ ``StoredExecution`` for the execution columns shared by ``work_units`` (the
current execution, inline) and ``work_unit_executions`` (archived ones).

Nested messages are stored as serialized bytes, NULL meaning "field not set"; a present
but empty message is stored as ``b''`` so presence survives the round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from xmc.model.states import WorkUnitState
from xmc.model.stored import StoredExecution, write_execution
from xmc.names import execution_name
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

#: Execution columns in ``StoredExecution`` field order, shared by SELECTs and UPDATEs.
EXECUTION_COLUMNS = (
    "exec_create_time",
    "exec_update_time",
    "exec_complete_time",
    "state",
    "state_update_time",
    "status_update_time",
    "system_message",
    "user_message",
    "scheduling_information",
    "detailed_status",
    "metadata",
)


def optional_bytes(parent: Message, field: str) -> bytes | None:
    if not parent.HasField(field):
        return None
    return getattr(parent, field).SerializeToString()  # type: ignore[no-any-return]


def stored_from_row(row: Mapping[str, Any]) -> StoredExecution:
    return StoredExecution(
        row["exec_create_time"],
        row["exec_update_time"],
        row["exec_complete_time"],
        _STATES[row["state"]],
        row["state_update_time"],
        row["status_update_time"],
        row["system_message"],
        row["user_message"],
        row["scheduling_information"],
        row["detailed_status"],
        row["metadata"],
    )


#: ``WorkUnitState`` by number: a dict lookup instead of an Enum call per row.
_STATES = {int(state): state for state in WorkUnitState}


def stored_to_columns(stored: StoredExecution) -> tuple[Any, ...]:
    """Column values in ``EXECUTION_COLUMNS`` order."""
    return (
        stored.create_time,
        stored.update_time,
        stored.complete_time,
        int(stored.state),
        stored.state_update_time,
        stored.status_update_time,
        stored.system_message,
        stored.user_message,
        stored.scheduling_information,
        stored.detailed_status,
        stored.metadata,
    )


def execution_from_row(
    row: Mapping[str, Any], *, xid: int, wid: int, eid: int
) -> WorkUnitExecution:
    """The API form; ``state`` (ACTIVE/INACTIVE) is stamped by the reader."""
    execution = WorkUnitExecution()
    write_execution_from_row(execution, row, execution_name(xid, wid, eid))
    return execution


def write_execution_from_row(target: WorkUnitExecution, row: Mapping[str, Any], name: str) -> None:
    """Fill ``target`` (an empty message, typically a field of the response) in place."""
    write_execution(target, name, [row[c] for c in EXECUTION_COLUMNS])
