"""Status messages XMC writes about a work unit (SPEC §3.2), built in one place."""

from __future__ import annotations

from typing import Any

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

from xmc.model.states import Severity
from xmc.names import work_unit_name
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage


def backend_message(severity: Severity, xid: int, wid: int, text: str) -> StructuredMessage:
    """A message from XMC itself (source XMANAGER_BACKEND) about work unit ``xid/wid``;
    control characters in ``text`` (a user's label quoted in a reason) are spelled out."""
    return StructuredMessage(
        severity=int(severity),  # type: ignore[arg-type]
        source=StructuredMessage.XMANAGER_BACKEND,
        parent=work_unit_name(xid, wid),
        user_facing_text=printable(text),
    )


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F)}


def printable(text: str) -> str:
    """``text`` with control characters spelled out (``\\x00``): what XMC stores as a
    reason must be readable, and Postgres ``text`` cannot hold a NUL at all — a NUL
    from a user's label once made a FAILED write roll back on every retry."""
    return text.translate(_CONTROL)


def scrub_nul(message: Message) -> Message:
    """``message`` with every NUL of every string field, nested ones and map keys and
    values included, spelled out (``\\x00``), in place. The ESS refuses a NUL anywhere in
    a request (Postgres cannot store one), so text copied from the cluster — a
    condition's message, a container's termination message — must not carry one, or one
    pod would cost a whole batch of observations."""
    for field, value in message.ListFields():
        if field.type == FieldDescriptor.TYPE_STRING:
            _scrub_strings(message, field, value)
        elif field.message_type is not None:
            if field.message_type.GetOptions().map_entry:
                _scrub_map(field.message_type.fields_by_name["value"], value)
            elif field.is_repeated:
                for item in value:
                    scrub_nul(item)
            else:
                scrub_nul(value)
    return message


def _spelled(text: str) -> str:
    return text.replace("\x00", "\\x00")


def _scrub_strings(message: Message, field: FieldDescriptor, value: Any) -> None:
    if not field.is_repeated:
        if "\x00" in value:
            setattr(message, field.name, _spelled(value))
    elif any("\x00" in item for item in value):
        items = [_spelled(item) for item in value]
        del value[:]
        value.extend(items)


def _scrub_map(value_field: FieldDescriptor, mapping: Any) -> None:
    nested = value_field.type == FieldDescriptor.TYPE_MESSAGE
    for key in list(mapping):
        if nested:
            scrub_nul(mapping[key])
        elif isinstance(mapping[key], str) and "\x00" in mapping[key]:
            mapping[key] = _spelled(mapping[key])
        if isinstance(key, str) and "\x00" in key:
            item = mapping[key]
            del mapping[key]
            if nested:
                mapping[_spelled(key)].CopyFrom(item)
            else:
                mapping[_spelled(key)] = item
