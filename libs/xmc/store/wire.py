"""Work units kept as their API bytes, so a page is framed, not built (issue 14).

Every writer of ``work_units`` also stores the row's WorkUnit in two serialized parts:

- ``head``: the WorkUnit without its current execution (fields 1–9: name, type, priority,
  times, urls, executable, tags, notes), written by create and ``UpdateWorkUnit``;
- ``exec_wire``: the current ``WorkUnitExecution`` (ACTIVE), written by create, restart
  and every masked observation write.

Protobuf's wire format is a concatenation of fields, so ``head`` followed by field 10
framing ``exec_wire`` *is* the serialized WorkUnit, and a ``ListWorkUnitsResponse`` is
those WorkUnits framed as field 1 plus the page token as field 2: a page of 100 costs a
hundred byte joins instead of a hundred messages built field by field and serialized
again. ``head`` is made by the builder the readers used before (``write_work_unit_head``).
``exec_wire`` is written on every masked observation, so it is encoded here directly:
its nested messages are stored as their bytes already and are framed as they are (upb
would parse each one only to serialize it again), and a time's encoding is cached (a
batch stamps most of its items with the same few times). The bytes are exactly upb's
serialization of the message ``write_execution`` builds from the same values
(``tests/unit/test_store_wire.py`` compares them on random executions). A NULL part (a
row written before migration 0003, until ``backfill_wire`` reaches it) is built from the
columns instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from xmc.model.stored import StoredExecution
from xmc.names import execution_name
from xmc.timestamps import timestamp_fields
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution

_ACTIVE = WorkUnitExecution.WorkUnitExecutionState.ACTIVE
_SMALL = [bytes((n,)) for n in range(0x80)]

#: Field tags (number << 3 | 2, length-delimited) used to frame the parts.
WORK_UNITS_TAG = b"\x0a"  # ListWorkUnitsResponse.work_units = 1
NEXT_PAGE_TOKEN_TAG = b"\x12"  # ListWorkUnitsResponse.next_page_token = 2
CURRENT_EXECUTION_TAG = b"\x52"  # WorkUnit.current_work_unit_execution = 10


def varint(value: int) -> bytes:
    """The base-128 varint of a non-negative ``value`` (lengths)."""
    if value < 0x80:
        return _SMALL[value]
    if value < 0x4000:  # two bytes: every WorkUnit a page frames
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def frame(tag: bytes, data: bytes) -> bytes:
    """A length-delimited field: tag, length, bytes."""
    size = len(data)
    return tag + (_SMALL[size] if size < 0x80 else varint(size)) + data


def work_unit_wire(head: bytes, exec_wire: bytes) -> bytes:
    """The serialized WorkUnit from its two stored parts."""
    return head + frame(CURRENT_EXECUTION_TAG, exec_wire)


def list_response_from_parts(parts: Iterable[tuple[bytes, bytes]], next_page_token: str) -> bytes:
    """A serialized ``ListWorkUnitsResponse`` of WorkUnits given as (``head``,
    ``exec_wire``), in one join: no WorkUnit is assembled apart first. Each WorkUnit is
    four pieces: its field-1 tag and length, ``head``, the field-10 tag and length, and
    ``exec_wire``; the tag-and-length pieces come from caches keyed by length (a page's
    rows have a few lengths)."""
    out: list[bytes] = []
    append = out.append
    outer, inner = _UNIT_PREFIXES, _EXECUTION_PREFIXES
    for head, exec_wire in parts:
        size = len(exec_wire)
        execution = inner.get(size) or _prefix(inner, CURRENT_EXECUTION_TAG, size)
        total = len(head) + len(execution) + size
        append(outer.get(total) or _prefix(outer, WORK_UNITS_TAG, total))
        append(head)
        append(execution)
        append(exec_wire)
    if next_page_token:
        append(frame(NEXT_PAGE_TOKEN_TAG, next_page_token.encode()))
    return b"".join(out)


#: Tag-and-length prefixes by length: a WorkUnit's (field 1 of the response) and its
#: current execution's (field 10 of the WorkUnit). Bounded: cleared when full.
_UNIT_PREFIXES: dict[int, bytes] = {}
_EXECUTION_PREFIXES: dict[int, bytes] = {}
_MAX_PREFIXES = 4096


def _prefix(cache: dict[int, bytes], tag: bytes, size: int) -> bytes:
    if len(cache) >= _MAX_PREFIXES:
        cache.clear()
    prefix = cache[size] = tag + varint(size)
    return prefix


def execution_wire(xid: int, wid: int, eid: int, stored: StoredExecution) -> bytes:
    """``exec_wire`` of a work unit whose current execution is ``stored``."""
    return execution_wire_from_values(execution_name(xid, wid, eid), stored)


def execution_wire_from_values(name: str, values: Sequence[Any]) -> bytes:
    """``exec_wire`` from execution column values (``EXECUTION_COLUMNS`` order): the
    serialized ``WorkUnitExecution`` (ACTIVE), fields in number order as upb writes them."""
    (create, update, complete, state, state_time, status_time, system, user, scheduling,
     detailed, metadata) = values  # fmt: skip
    status = [_STATE_TAG + varint(int(state))] if state else []
    if detailed is not None:
        status.append(frame(_DETAILED_STATUS_TAG, detailed))
    if status_time is not None:
        status.append(_time_field(_STATUS_UPDATE_TIME_TAG, status_time))
    if state_time is not None:
        status.append(_time_field(_STATE_UPDATE_TIME_TAG, state_time))
    for tag, message in ((_SYSTEM_TAG, system), (_USER_TAG, user), (_SCHEDULING_TAG, scheduling)):
        if message is not None:
            status.append(frame(tag, message))
    out = [frame(_NAME_TAG, name.encode())] if name else []
    if create is not None:
        out.append(_time_field(_CREATE_TIME_TAG, create))
    if update is not None:
        out.append(_time_field(_UPDATE_TIME_TAG, update))
    out.append(frame(_STATUS_TAG, b"".join(status)))
    out.append(_ACTIVE_FIELD)
    if metadata is not None:
        out.append(frame(_METADATA_TAG, metadata))
    if complete is not None:
        out.append(_time_field(_COMPLETE_TIME_TAG, complete))
    return b"".join(out)


def signed_varint(value: int) -> bytes:
    """An int64 as protobuf writes it: a negative one as its 64-bit two's complement."""
    return varint(value & _UINT64 if value < 0 else value)


def timestamp_wire(value: datetime) -> bytes:
    """The serialized ``google.protobuf.Timestamp`` of ``value`` (µs precision, like
    ``set_timestamp``; zero fields omitted, as proto3 does)."""
    seconds, nanos = timestamp_fields(value)
    return (b"\x08" + signed_varint(seconds) if seconds else b"") + (
        b"\x10" + varint(nanos) if nanos else b""
    )


def _time_field(tag: bytes, value: datetime) -> bytes:
    """A Timestamp field, framed; each distinct time is encoded once (bounded cache)."""
    body = _TIMES.get(value)
    if body is None:
        if len(_TIMES) >= _MAX_TIMES:
            _TIMES.clear()
        body = _TIMES[value] = frame(b"", timestamp_wire(value))
    return tag + body


#: Encoded times (length-prefixed Timestamp bodies), keyed by the datetime.
_TIMES: dict[datetime, bytes] = {}
_MAX_TIMES = 4096
_UINT64 = (1 << 64) - 1

# Tags of WorkUnitExecution (name 1, create_time 2, update_time 3, status 4, state 5,
# metadata 6, complete_time 7) and of its WorkUnitStatus (state 1, detailed_status 3,
# update_time 4, state_update_time 5, system_message 6, user_message 7,
# scheduling_information 8): number << 3 | wire type.
_NAME_TAG, _CREATE_TIME_TAG, _UPDATE_TIME_TAG, _STATUS_TAG = b"\x0a", b"\x12", b"\x1a", b"\x22"
_METADATA_TAG, _COMPLETE_TIME_TAG = b"\x32", b"\x3a"
_ACTIVE_FIELD = b"\x28" + varint(_ACTIVE)
_STATE_TAG, _DETAILED_STATUS_TAG = b"\x08", b"\x1a"
_STATUS_UPDATE_TIME_TAG, _STATE_UPDATE_TIME_TAG = b"\x22", b"\x2a"
_SYSTEM_TAG, _USER_TAG, _SCHEDULING_TAG = b"\x32", b"\x3a", b"\x42"
