"""An execution as the store keeps it (``StoredExecution``) and its API form.

Times are datetimes and nested messages their serialized bytes, so the masked merge
(``xmc.model.merge``) and the row codec (``xmc.store.codec``) work on rows without a
protobuf round trip; ``write_execution`` builds the response message only at the edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, NamedTuple

from xmc.model.rollups import best_severity
from xmc.model.states import Severity, WorkUnitState
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

StatusMessageName = Literal[
    "system_message", "user_message", "scheduling_information", "detailed_status"
]


class StoredExecution(NamedTuple):
    """An execution as the store keeps it: times as datetimes, nested messages as their
    serialized bytes (None = unset). Merging on this form, not on a ``WorkUnitExecution``,
    spares the hot path a protobuf round trip per row; fields are in the column order of
    ``xmc.store.codec.EXECUTION_COLUMNS``.

    Immutable: a named tuple rather than a frozen dataclass, because the masked write
    builds two per item (the row, the merged result), and a frozen dataclass's
    ``__init__`` (a guarded ``__setattr__`` per field) cost ~2.5 µs each, a tuple ~0.3."""

    create_time: datetime
    update_time: datetime
    complete_time: datetime | None
    state: WorkUnitState
    state_update_time: datetime
    status_update_time: datetime
    system_message: bytes | None = None
    user_message: bytes | None = None
    scheduling_information: bytes | None = None
    detailed_status: bytes | None = None
    metadata: bytes | None = None

    def to_proto(self, name: str) -> WorkUnitExecution:
        """The API form; ``state`` (ACTIVE/INACTIVE) is left for the reader to stamp."""
        execution = WorkUnitExecution()
        write_execution(execution, name, self)
        return execution

    def best_severity(self) -> Severity | None:
        """What this execution contributes to ``message_severity_counts`` (SPEC §3.3)."""
        return best_severity(parse_message(self.system_message), parse_message(self.user_message))

    @classmethod
    def from_proto(cls, execution: WorkUnitExecution) -> StoredExecution:
        status = execution.status
        return cls(
            create_time=to_datetime(execution.create_time),
            update_time=to_datetime(execution.update_time),
            complete_time=(
                to_datetime(execution.complete_time)
                if execution.HasField("complete_time")
                else None
            ),
            state=WorkUnitState(status.state),
            state_update_time=to_datetime(status.state_update_time),
            status_update_time=to_datetime(status.update_time),
            system_message=optional_bytes(status, "system_message"),
            user_message=optional_bytes(status, "user_message"),
            scheduling_information=optional_bytes(status, "scheduling_information"),
            detailed_status=optional_bytes(status, "detailed_status"),
            metadata=(
                execution.metadata.SerializeToString(deterministic=True)
                if execution.HasField("metadata")
                else None
            ),
        )


def write_execution(target: WorkUnitExecution, name: str, values: Sequence[Any]) -> None:
    """Fill an empty ``target`` in place from ``values`` in ``StoredExecution`` field order
    (rows carry them in that order too): readers build each response message where it
    lands, with no intermediate message and no copy. ``state`` is left to the reader."""
    (create, update, complete, state, state_time, status_time, *messages, metadata) = values
    target.name = name
    set_timestamp(target.create_time, create)
    set_timestamp(target.update_time, update)
    set_timestamp(target.complete_time, complete)
    status = target.status
    status.state = int(state)  # type: ignore[assignment]
    set_timestamp(status.state_update_time, state_time)
    set_timestamp(status.update_time, status_time)
    for field, data in zip(_STATUS_MESSAGE_FIELDS, messages, strict=True):
        if data is not None:
            _merge_bytes(getattr(status, field), data)
    if metadata is not None:
        _merge_bytes(target.metadata, metadata)


#: The status messages of ``StoredExecution``, in its field order.
_STATUS_MESSAGE_FIELDS = (
    "system_message",
    "user_message",
    "scheduling_information",
    "detailed_status",
)


def _merge_bytes(field: Any, data: bytes) -> None:
    """Set a message field from stored bytes; ``b''`` is a present but empty message."""
    if data:
        field.MergeFromString(data)
    else:
        field.SetInParent()


def parse_message(data: bytes | None) -> StructuredMessage | None:
    return None if data is None else StructuredMessage.FromString(data)


def optional_bytes(parent: WorkUnitStatus, field: StatusMessageName) -> bytes | None:
    return getattr(parent, field).SerializeToString() if parent.HasField(field) else None
