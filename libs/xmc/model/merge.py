"""The masked merge of SPEC §5.3 (``MergeWorkUnitExecution``) and its input validation.

Pure: it takes the stored execution (``xmc.model.stored``) and one update item and returns
the merged execution plus everything the storage layer must do about it (state change for
history and rollups, messages to append), as data. The repository owns locking, the EID
fence and persistence.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime
from typing import Literal, NamedTuple, TypeVar

from xmc.errors import InvalidArgumentError
from xmc.model.guard import GuardReason, decide_state_update
from xmc.model.masks import DETAILED_STATUS_PATH as DETAILED_STATUS_PATH
from xmc.model.masks import MASK_PATHS as MASK_PATHS
from xmc.model.masks import METADATA_PATH as METADATA_PATH
from xmc.model.masks import SCHEDULING_INFORMATION_PATH as SCHEDULING_INFORMATION_PATH
from xmc.model.masks import STATE_PATH as STATE_PATH
from xmc.model.masks import SYSTEM_MESSAGE_PATH as SYSTEM_MESSAGE_PATH
from xmc.model.masks import USER_MESSAGE_PATH as USER_MESSAGE_PATH
from xmc.model.masks import accepted_before, accepted_mask_paths, mask_paths
from xmc.model.retries import Failure
from xmc.model.states import (
    EXECUTION_TERMINAL_STATES,
    WORK_UNIT_STATUS_RETAINING_STATES,
    Severity,
    WorkUnitState,
)
from xmc.model.stored import StoredExecution, optional_bytes, parse_message
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)

_SETTABLE_STATES = frozenset(int(s) for s in WorkUnitState) - {0}
_STATES = {int(s): s for s in WorkUnitState}
_SEVERITIES = frozenset(int(s) for s in Severity)
_MESSAGE_PATHS = {
    SYSTEM_MESSAGE_PATH: "system_message",
    USER_MESSAGE_PATH: "user_message",
    SCHEDULING_INFORMATION_PATH: "scheduling_information",
}
MessageName = Literal["system_message", "user_message", "scheduling_information"]
_T = TypeVar("_T")


class MessageField(enum.StrEnum):
    """The execution messages that are mirrored into the StatusMessages history."""

    SYSTEM = "system_message"
    USER = "user_message"


class ExecutionUpdate(NamedTuple):
    """One item of an ``UpdateWorkUnitExecutions`` batch, with its name already parsed.

    This and ``MergeResult`` are named tuples, not frozen dataclasses, for the reason
    ``StoredExecution`` is: one of each per item of every batch, and a frozen dataclass's
    ``__init__`` cost several times a tuple's."""

    xid: int
    wid: int
    eid: int
    execution: WorkUnitExecution
    update_mask: tuple[str, ...]
    force_status_message_update: bool = False
    #: With a FAILED state: why the run failed, for the retry decision (``ess.retries``).
    failure: Failure | None = None


class MergeResult(NamedTuple):
    """What merging one item did. ``execution`` is a new object; the input is untouched."""

    execution: StoredExecution
    #: Anything stored changed (and so ``update_time`` moved).
    changed: bool
    #: (old, new) when the state change was accepted.
    state_change: tuple[WorkUnitState, WorkUnitState] | None
    #: Why a requested state change was dropped; None when accepted or not requested.
    state_rejection: GuardReason | None
    #: Messages that became current and must be appended to StatusMessages.
    new_messages: tuple[tuple[MessageField, StructuredMessage], ...]


def validate_update(item: ExecutionUpdate, index: int) -> None:
    """Reject malformed input before anything is written (fails the whole batch)."""
    if item.eid < 1:
        raise InvalidArgumentError(f"updates[{index}].execution_id: must be >= 1, got {item.eid}")
    mask = item.update_mask
    paths = accepted_before(mask) or accepted_mask_paths(mask, f"updates[{index}]")
    status = item.execution.status
    if paths.system_message:
        _check_severity(status, SYSTEM_MESSAGE_PATH, index)
    if paths.user_message:
        _check_severity(status, USER_MESSAGE_PATH, index)
    if paths.scheduling_information:
        _check_severity(status, SCHEDULING_INFORMATION_PATH, index)
    if paths.state:
        if int(status.state) not in _SETTABLE_STATES:
            raise InvalidArgumentError(
                f"updates[{index}].execution.status.state: {status.state} is not a settable "
                "WorkUnitState"
            )
        if not status.HasField("state_update_time"):
            raise InvalidArgumentError(
                f"updates[{index}].execution.status.state_update_time: required when the mask "
                "has 'status.state'"
            )


def _check_severity(status: WorkUnitStatus, path: str, index: int) -> None:
    field = _MESSAGE_PATHS[path]
    if status.HasField(field):  # type: ignore[arg-type]
        severity = int(getattr(status, field).severity)
        if severity not in _SEVERITIES:
            raise InvalidArgumentError(
                f"updates[{index}].execution.{path}.severity: {severity} is not a known Severity"
            )


def validate_batch(items: Sequence[ExecutionUpdate]) -> None:
    for index, item in enumerate(items):
        validate_update(item, index)


def defer_to_existing_message(
    existing: StructuredMessage | None, new: StructuredMessage, *, force: bool
) -> bool:
    """``DeferToExistingMessage``: the first ERROR stays unless the writer forces."""
    return (
        not force
        and existing is not None
        and int(new.severity) == Severity.ERROR
        and int(existing.severity) == Severity.ERROR
    )


def should_reset_status_message(
    stored_system_message: StructuredMessage | None,
    *,
    item_sets_system_message: bool,
    new_state: WorkUnitState,
    force: bool,
) -> bool:
    """``ShouldResetStatusMessage``: clear stale text on an accepted state change, except
    when the item brings its own, a FATAL must survive, or the state keeps diagnostics."""
    if stored_system_message is None or item_sets_system_message:
        return False
    if int(stored_system_message.severity) == Severity.FATAL and not force:
        return False
    return new_state not in WORK_UNIT_STATUS_RETAINING_STATES


def merge_metadata(
    stored: WorkUnitExecutionMetadata, new: WorkUnitExecutionMetadata
) -> WorkUnitExecutionMetadata:
    """Field-wise merge: every field the writer set wins, the rest is kept.

    JobSet and Workload observations both write ``metadata`` (resource name vs cluster and
    flavor); replacing the whole message would let each erase the other. A set map or
    message field is replaced as a whole, so stale node selectors never linger.
    """
    merged = WorkUnitExecutionMetadata()
    merged.CopyFrom(stored)
    for descriptor, _value in new.ListFields():
        merged.ClearField(descriptor.name)  # type: ignore[arg-type]
    merged.MergeFrom(new)
    return merged


def _get_message(status: WorkUnitStatus, field: MessageName) -> StructuredMessage | None:
    message: StructuredMessage = getattr(status, field)
    return message if status.HasField(field) else None


def _same_message(stored: bytes, incoming: StructuredMessage) -> bool:
    """Equal, where an incoming message without ``create_time`` ignores the stored one's
    (the server stamped it), so a resent observation does not count as a new message."""
    if incoming.HasField("create_time"):
        return stored == incoming.SerializeToString()
    bare = StructuredMessage.FromString(stored)
    bare.ClearField("create_time")
    return bare == incoming


def _merge_message(
    existing: bytes | None,
    incoming: WorkUnitStatus,
    field: MessageName,
    *,
    force: bool,
    defer: bool,
    now: datetime,
) -> tuple[bytes | None, StructuredMessage | None]:
    """Apply one masked message path: (bytes to store, the message if a new one became
    current). Returns ``existing`` itself when nothing changes."""
    new = _get_message(incoming, field)
    if new is None:
        return None, None
    if existing is not None and (
        (defer and defer_to_existing_message(parse_message(existing), new, force=force))
        or _same_message(existing, new)
    ):
        return existing, None
    if not new.HasField("create_time"):
        stamped = StructuredMessage()
        stamped.CopyFrom(new)
        set_timestamp(stamped.create_time, now)
        new = stamped
    return new.SerializeToString(), new


def _merged_metadata(stored: bytes | None, new: WorkUnitExecution) -> bytes | None:
    incoming = new.metadata.SerializeToString(deterministic=True)
    if stored is None or incoming == stored:
        # Nothing to merge with, or a resend of what is stored (the steady state).
        return incoming or None
    merged = merge_metadata(WorkUnitExecutionMetadata.FromString(stored), new.metadata)
    return merged.SerializeToString(deterministic=True) if merged.ListFields() else None


def merge_work_unit_execution(
    stored: StoredExecution,
    new: WorkUnitExecution,
    update_mask: Sequence[str],
    *,
    force_status_message_update: bool,
    now: datetime,
) -> MergeResult:
    """``MergeWorkUnitExecution`` (SPEC §5.2–§5.3) for one validated item.

    The hot path of every observation: each stored field is carried in a local and the
    merged execution built once, only when something changed (a stored value equal to
    its merged one is kept as it is)."""
    status = new.status
    current = stored.state
    force = force_status_message_update
    complete, state, state_time = stored.complete_time, current, stored.state_update_time
    system, user = stored.system_message, stored.user_message
    scheduling, detailed = stored.scheduling_information, stored.detailed_status
    metadata = stored.metadata

    # 1. A finished execution is immutable: only the user's own message still lands.
    live, finished = mask_paths(update_mask)
    paths = finished if current in EXECUTION_TERMINAL_STATES else live

    # 2. The state guard decides the state; a rejection drops only the state.
    state_change: tuple[WorkUnitState, WorkUnitState] | None = None
    rejection: GuardReason | None = None
    if paths.state:
        new_state = _STATES[status.state]  # validated: a settable state
        new_time = (
            to_datetime(status.state_update_time) if status.HasField("state_update_time") else None
        )
        decision = decide_state_update(current, state_time, new_state, new_time)
        if decision.allowed:
            state_change = (current, new_state)
            state, state_time = new_state, new_time  # type: ignore[assignment]
        else:
            rejection = decision.reason

    # 3. Copy the other masked paths.
    messages: list[tuple[MessageField, StructuredMessage]] = []
    if paths.system_message:
        system, message = _merge_message(
            system, status, "system_message", force=force, defer=True, now=now
        )
        if message is not None:
            messages.append((MessageField.SYSTEM, message))
    if paths.user_message:
        user, message = _merge_message(
            user, status, "user_message", force=force, defer=True, now=now
        )
        if message is not None:
            messages.append((MessageField.USER, message))
    if paths.scheduling_information:
        scheduling, _ = _merge_message(
            scheduling, status, "scheduling_information", force=True, defer=False, now=now
        )
    if paths.detailed_status:
        detailed = optional_bytes(status, "detailed_status")
    if paths.metadata:
        metadata = _merged_metadata(metadata, new)

    # 4. Consequences of an accepted state change.
    if state_change is not None:
        new_state = state_change[1]
        if stored.system_message is not None and should_reset_status_message(
            parse_message(stored.system_message),
            item_sets_system_message=paths.system_message and status.HasField("system_message"),
            new_state=new_state,
            force=force,
        ):
            system = None
        if new_state in EXECUTION_TERMINAL_STATES:
            complete = now

    merged = stored
    if (
        complete != stored.complete_time
        or state != current
        or state_time != stored.state_update_time
        or system != stored.system_message
        or user != stored.user_message
        or scheduling != stored.scheduling_information
        or detailed != stored.detailed_status
        or metadata != stored.metadata
    ):
        merged = StoredExecution(
            stored.create_time,
            now,
            _changed(complete, stored.complete_time),
            state,
            _changed(state_time, stored.state_update_time),
            now,
            system,
            user,
            scheduling,
            detailed,
            metadata,
        )
    return MergeResult(merged, merged is not stored, state_change, rejection, tuple(messages))


def _changed(merged: _T, stored: _T) -> _T:
    """The merged time, or the stored one itself when the two are equal (the same instant
    in another zone stays as stored). Equal bytes need no such care."""
    return stored if merged == stored else merged
