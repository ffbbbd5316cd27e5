"""Rows ↔ protobuf messages for the execution columns shared by ``work_units`` (the current
execution, inline) and ``work_unit_executions`` (archived ones).

Nested messages are stored as serialized bytes, NULL meaning "field not set"; a present
but empty message is stored as ``b''`` so presence survives the round trip.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from google.protobuf.message import Message
from google.protobuf.timestamp_pb2 import Timestamp

from xmc.names import execution_name
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

#: Execution columns in a fixed order, shared by the SELECTs and the bulk UPDATE.
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
_STATUS_MESSAGES = ("system_message", "user_message", "scheduling_information", "detailed_status")


def to_datetime(ts: Timestamp) -> datetime:
    return ts.ToDatetime(tzinfo=UTC)


def set_timestamp(ts: Timestamp, value: datetime | None) -> None:
    if value is not None:
        ts.FromDatetime(value)


def optional_bytes(parent: Message, field: str) -> bytes | None:
    if not parent.HasField(field):
        return None
    return getattr(parent, field).SerializeToString()  # type: ignore[no-any-return]


def _load(parent: Message, field: str, data: bytes | None) -> None:
    if data is None:
        return
    target = getattr(parent, field)
    target.SetInParent()
    target.MergeFromString(data)


def execution_from_row(
    row: Mapping[str, Any], *, xid: int, wid: int, eid: int
) -> WorkUnitExecution:
    """Build the stored execution; ``state`` (ACTIVE/INACTIVE) is stamped by the reader."""
    execution = WorkUnitExecution(name=execution_name(xid, wid, eid))
    set_timestamp(execution.create_time, row["exec_create_time"])
    set_timestamp(execution.update_time, row["exec_update_time"])
    set_timestamp(execution.complete_time, row["exec_complete_time"])
    status = execution.status
    status.state = row["state"]
    set_timestamp(status.state_update_time, row["state_update_time"])
    set_timestamp(status.update_time, row["status_update_time"])
    for field in _STATUS_MESSAGES:
        _load(status, field, row[field])
    _load(execution, "metadata", row["metadata"])
    return execution


def execution_to_columns(execution: WorkUnitExecution) -> tuple[Any, ...]:
    """Column values in ``EXECUTION_COLUMNS`` order."""
    status = execution.status
    return (
        to_datetime(execution.create_time),
        to_datetime(execution.update_time),
        to_datetime(execution.complete_time) if execution.HasField("complete_time") else None,
        int(status.state),
        to_datetime(status.state_update_time),
        to_datetime(status.update_time),
        *(optional_bytes(status, field) for field in _STATUS_MESSAGES),
        optional_bytes(execution, "metadata"),
    )
