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
again. Both parts are made by the same builders the readers used before
(``write_work_unit_head``, ``write_execution``), so the bytes parse to exactly the message
a reader would build from the columns. A NULL part (a row written before migration 0003,
until ``backfill_wire`` reaches it) is built from the columns instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from xmc.model.stored import StoredExecution, write_execution
from xmc.names import execution_name
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


def list_response_from_parts(parts: Sequence[tuple[bytes, bytes]], next_page_token: str) -> bytes:
    """A serialized ``ListWorkUnitsResponse`` of WorkUnits given as (``head``,
    ``exec_wire``), in one join: no WorkUnit is assembled apart first."""
    out: list[bytes] = []
    append = out.append
    for head, exec_wire in parts:
        size = len(exec_wire)
        length = _SMALL[size] if size < 0x80 else varint(size)
        total = len(head) + 1 + len(length) + size
        append(WORK_UNITS_TAG)
        append(_SMALL[total] if total < 0x80 else varint(total))
        append(head)
        append(CURRENT_EXECUTION_TAG)
        append(length)
        append(exec_wire)
    if next_page_token:
        append(frame(NEXT_PAGE_TOKEN_TAG, next_page_token.encode()))
    return b"".join(out)


def execution_wire(xid: int, wid: int, eid: int, stored: StoredExecution) -> bytes:
    """``exec_wire`` of a work unit whose current execution is ``stored``."""
    return execution_wire_from_values(execution_name(xid, wid, eid), stored.values())


def execution_wire_from_values(name: str, values: Sequence[Any]) -> bytes:
    """``exec_wire`` from execution column values (``EXECUTION_COLUMNS`` order)."""
    execution = WorkUnitExecution()
    write_execution(execution, name, values)
    execution.state = _ACTIVE
    return execution.SerializeToString()
