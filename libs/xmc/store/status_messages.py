"""A work unit's status-message history (SPEC §4 ``ListStatusMessages``): one page of
an experiment's or one work unit's messages, oldest first, filtered and ordered like
every other list of this package (:mod:`xmc.store.listing`).

Kept apart from :mod:`xmc.store.work_units` because the messages have their own table
and are only ever read here; the Reconciler's updates write them (:mod:`xmc.store.executions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from xmc.model.states import Severity
from xmc.names import status_message_name
from xmc.query import FieldKind, FieldSpec
from xmc.store.connection import Connection
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

STATUS_MESSAGE_LISTING = ListResource(
    source="status_messages m",
    columns="m.id, m.xid, m.wid, m.eid, m.content",
    fields={
        "severity": FieldSpec("m.severity", FieldKind.ENUM, enum=Severity),
        "content.severity": FieldSpec("m.severity", FieldKind.ENUM, enum=Severity),
        "execution_id": FieldSpec("m.eid", FieldKind.INT),
        "create_time": FieldSpec("m.create_time", FieldKind.TIMESTAMP),
        "content.create_time": FieldSpec("m.create_time", FieldKind.TIMESTAMP),
        "wid": FieldSpec("m.wid", FieldKind.INT),
    },
    default_order=(),
    tiebreak=("m.id",),
)


def _status_message_from_row(row: Mapping[str, Any]) -> StatusMessage:
    return StatusMessage(
        name=status_message_name(row["xid"], row["wid"], row["id"]),
        content=StructuredMessage.FromString(row["content"]),
        execution_id=row["eid"],
    )


async def list_status_messages(
    conn: Connection, xid: int, wid: int | None, request: ListRequest
) -> tuple[list[StatusMessage], str]:
    """One page of an experiment's (all work units) or one work unit's message history."""
    if wid is None:
        where, params = "m.xid = $1", [xid]
    else:
        where, params = "m.xid = $1 AND m.wid = $2", [xid, wid]
    rows, token = await fetch_page(
        conn, STATUS_MESSAGE_LISTING, request, where=where, params=params, scope=str(params)
    )
    return [_status_message_from_row(r) for r in rows], token
