"""Operations (SPEC §2.2): one row per long-running request, read back as
``google.longrunning.Operation`` with ``cloud.xmanager.v1.OperationMetadata``.

A batch operation covers many tasks; ``pending_tasks`` counts those not finished yet and
the last ``finish_operation_task`` closes the operation, so a batch is done only when every
work unit it touched is.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from google.longrunning.operations_proto_pb2 import Operation
from google.protobuf.any_pb2 import Any as AnyProto
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status

from xmc.errors import NotFoundError
from xmc.messages import printable
from xmc.model.audit import Actor
from xmc.names import experiment_name, work_unit_name
from xmc.query import FieldKind, FieldSpec, OrderKey
from xmc.store.connection import Connection
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata

#: How long operations are kept (SPEC §2.2).
OPERATION_RETENTION = timedelta(days=90)

_COLUMNS = """name, xid, wid, action_type, target, original_requester, done, pending_tasks,
    response, error_code, error_message, create_time, end_time, request_id"""


class ActionType(enum.IntEnum):
    """``OperationMetadata.ActionType``, with the contract's numbers."""

    ACTION_TYPE_UNSPECIFIED = 0
    CREATE = 1
    STOP = 2
    RESTART = 3


@dataclass(frozen=True)
class NewOperation:
    xid: int
    wid: int | None
    action_type: ActionType
    #: Who asked (``original_requester``: the principal) and in which request.
    actor: Actor
    pending_tasks: int = 1

    @property
    def target(self) -> str:
        if self.wid is None:
            return experiment_name(self.xid)
        return work_unit_name(self.xid, self.wid)

    def new_name(self) -> str:
        return f"{self.target}/operations/{uuid.uuid4().hex}"


def pack(message: Message) -> bytes:
    any_message = AnyProto()
    any_message.Pack(message)
    return any_message.SerializeToString()


def operation_from_row(row: Mapping[str, Any]) -> Operation:
    metadata = OperationMetadata(
        target=row["target"],
        action_type=row["action_type"],
        original_requester=row["original_requester"],
    )
    set_timestamp(metadata.create_time, row["create_time"])
    set_timestamp(metadata.end_time, row["end_time"])
    operation = Operation(name=row["name"], done=row["done"])
    operation.metadata.Pack(metadata)
    if row["error_code"] is not None:
        operation.error.CopyFrom(Status(code=row["error_code"], message=row["error_message"] or ""))
    elif row["response"] is not None:
        operation.response.ParseFromString(row["response"])
    return operation


async def insert_operations(
    conn: Connection, news: Sequence[NewOperation], *, now: datetime, done: bool = False
) -> list[Operation]:
    """Insert Operations (``done`` ones are closed at once, with nothing pending)."""
    if not news:
        return []
    names = [new.new_name() for new in news]
    rows = await conn.fetch(
        f"""INSERT INTO operations (name, xid, wid, action_type, target, original_requester,
                done, pending_tasks, create_time, end_time, request_id)
            SELECT n.name, n.xid, n.wid, n.action_type, n.target, n.original_requester,
                   $7::boolean, CASE WHEN $7 THEN 0 ELSE n.pending END, $8::timestamptz,
                   CASE WHEN $7 THEN $8::timestamptz END, n.request_id
            FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::smallint[], $5::text[],
                        $6::text[], $9::integer[], $10::text[])
                 AS n(name, xid, wid, action_type, target, original_requester, pending,
                      request_id)
            RETURNING {_COLUMNS}""",
        names,
        [new.xid for new in news],
        [new.wid for new in news],
        [int(new.action_type) for new in news],
        [new.target for new in news],
        [new.actor.principal for new in news],
        done,
        now,
        [new.pending_tasks for new in news],
        [new.actor.request_id for new in news],
    )
    by_name = {row["name"]: operation_from_row(row) for row in rows}
    return [by_name[name] for name in names]


async def insert_operation(
    conn: Connection, new: NewOperation, *, now: datetime, done: bool = False
) -> Operation:
    (operation,) = await insert_operations(conn, [new], now=now, done=done)
    return operation


async def operations_by_key(
    conn: Connection, keys: Sequence[tuple[int, int | None]], action: ActionType
) -> dict[tuple[int, int], Operation]:
    """The ``action`` Operations of the given work units (at most one CREATE each)."""
    if not keys:
        return {}
    rows = await conn.fetch(
        f"""SELECT {_COLUMNS} FROM operations
            WHERE action_type = $3 AND (xid, wid) IN (
                SELECT * FROM unnest($1::bigint[], $2::bigint[]))""",
        [k[0] for k in keys],
        [k[1] for k in keys],
        int(action),
    )
    return {(r["xid"], r["wid"]): operation_from_row(r) for r in rows}


async def fetch_operation(conn: Connection, name: str) -> Operation:
    row = await conn.fetchrow(f"SELECT {_COLUMNS} FROM operations WHERE name = $1", name)
    if row is None:
        raise NotFoundError(f"name: operation {name!r} does not exist")
    return operation_from_row(row)


async def finish_operation_task(
    conn: Connection,
    name: str,
    *,
    now: datetime,
    response: Message | None = None,
    error: tuple[int, str] | None = None,
    task_id: str | None = None,
) -> Operation:
    """``updateOperation``: one task of the operation finished. The first error sticks;
    the operation is done when no task is pending (or on an error). With ``task_id``, a
    redelivered task that already finished is not counted again."""
    row = await conn.fetchrow(
        f"""UPDATE operations SET
                pending_tasks = greatest(pending_tasks - 1, 0),
                finished_tasks = CASE WHEN $6::text IS NULL THEN finished_tasks
                                      ELSE array_append(finished_tasks, $6::text) END,
                error_code = coalesce(error_code, $3),
                error_message = CASE WHEN error_code IS NULL THEN $4 ELSE error_message END,
                response = coalesce($2, response),
                done = done OR $3::integer IS NOT NULL OR pending_tasks <= 1,
                end_time = CASE
                    WHEN done THEN end_time
                    WHEN $3::integer IS NOT NULL OR pending_tasks <= 1 THEN $5
                END
            WHERE name = $1 AND ($6::text IS NULL OR NOT $6::text = ANY(finished_tasks))
            RETURNING {_COLUMNS}""",
        name,
        None if response is None else pack(response),
        None if error is None else error[0],
        None if error is None else printable(error[1]),
        now,
        task_id,
    )
    if row is None:
        return await fetch_operation(conn, name)  # counted before (or NOT_FOUND)
    return operation_from_row(row)


async def delete_expired_operations(conn: Connection, *, now: datetime) -> int:
    """TTL: drop operations created more than ``OPERATION_RETENTION`` ago."""
    status: str = await conn.execute(
        "DELETE FROM operations WHERE create_time < $1", now - OPERATION_RETENTION
    )
    return int(status.split()[-1])


OPERATION_LISTING = ListResource(
    source="operations o",
    columns=", ".join(f"o.{c.strip()}" for c in _COLUMNS.split(",")),
    fields={
        "done": FieldSpec("o.done", FieldKind.BOOL),
        "action_type": FieldSpec("o.action_type", FieldKind.ENUM, enum=ActionType),
        "metadata.action_type": FieldSpec("o.action_type", FieldKind.ENUM, enum=ActionType),
        "target": FieldSpec("o.target", FieldKind.STRING),
        "metadata.target": FieldSpec("o.target", FieldKind.STRING),
        "create_time": FieldSpec("o.create_time", FieldKind.TIMESTAMP),
        "metadata.create_time": FieldSpec("o.create_time", FieldKind.TIMESTAMP),
    },
    default_order=(OrderKey("create_time"),),
    tiebreak=(FieldSpec("o.name", FieldKind.STRING),),
)


async def list_operations(
    conn: Connection, xid: int, request: ListRequest
) -> tuple[list[Operation], str]:
    rows, token = await fetch_page(
        conn, OPERATION_LISTING, request, where="o.xid = $1", params=[xid], scope=str(xid)
    )
    return [operation_from_row(r) for r in rows], token
