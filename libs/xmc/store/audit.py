"""The audit trail's rows (docs/audit.md, decision 0047).

``audit_log`` holds the changes that leave neither a history row nor an Operation
(experiment and work-unit edits, retry policies, webhooks, artifacts, pause/resume): one
row each, written by :func:`record_audit` in the transaction of the change, so a change
and its record commit or vanish together.

The audit list reads that table and the Operations (creates, stops, restarts, with their
requester and request id) as one stream of events, newest first, through the common
keyset pager (``xmc.query``): a page token carries the last event's (time, key) and is
bound to the request's filters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from xmc.model.audit import Actor, AuditAction, AuditEntry
from xmc.query import FieldKind, FieldSpec, OrderKey
from xmc.store.connection import Connection
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc.store.operations import ActionType

#: Kept as long as Operations (SPEC §2.2), which hold the other half of the trail.
AUDIT_RETENTION = timedelta(days=90)

#: An Operation's action as the audit list names it.
_OPERATION_ACTIONS: Mapping[ActionType, AuditAction] = {
    ActionType.CREATE: AuditAction.CREATE_WORK_UNIT,
    ActionType.STOP: AuditAction.STOP_WORK_UNIT,
    ActionType.RESTART: AuditAction.RESTART_WORK_UNIT,
}
_ACTION_CASE = " ".join(
    f"WHEN {int(kind)} THEN '{action.value}'" for kind, action in _OPERATION_ACTIONS.items()
)

# Both sources as one relation. The key orders events of one instant and makes the order
# total: an Operation's name, or the audit row's id padded so text order is number order.
_EVENTS = f"""(
    SELECT o.create_time AS event_time, 'op:' || o.name AS key, o.original_requester AS principal,
           o.request_id, CASE o.action_type {_ACTION_CASE} ELSE '' END AS action,
           o.target, o.xid, o.name AS operation, '' AS detail
    FROM operations o
    UNION ALL
    SELECT a.event_time, 'log:' || lpad(a.id::text, 19, '0'), a.principal, a.request_id,
           a.action, a.target, a.xid, '', a.detail
    FROM audit_log a
) e"""

AUDIT_LISTING = ListResource(
    source=_EVENTS,
    columns="e.event_time, e.key, e.principal, e.request_id, e.action, e.target, e.xid, "
    "e.operation, e.detail",
    fields={
        "principal": FieldSpec("e.principal", FieldKind.STRING),
        "request_id": FieldSpec("e.request_id", FieldKind.STRING),
        "action": FieldSpec("e.action", FieldKind.STRING),
        "target": FieldSpec("e.target", FieldKind.STRING),
        "time": FieldSpec("e.event_time", FieldKind.TIMESTAMP),
    },
    default_order=(OrderKey("time", descending=True),),
    tiebreak=(FieldSpec("e.key", FieldKind.STRING),),
)


@dataclass(frozen=True)
class AuditQuery:
    """The admin's narrowing of the list, beside the page parameters."""

    principal: str = ""
    xid: int | None = None
    since: datetime | None = None
    until: datetime | None = None


@dataclass(frozen=True)
class StoredAuditEvent:
    time: datetime
    principal: str
    request_id: str
    action: str
    target: str
    xid: int | None
    #: The Operation's name, for creates, stops and restarts ('' otherwise).
    operation: str
    detail: str


async def record_audit(conn: Connection, actor: Actor, entry: AuditEntry, *, now: datetime) -> None:
    """One audit row, in the caller's transaction (the change's)."""
    await conn.execute(
        """INSERT INTO audit_log (event_time, principal, request_id, action, target, xid, detail)
           VALUES ($1, $2, $3, $4, $5, $6, $7)""",
        now,
        actor.principal,
        actor.request_id,
        entry.action.value,
        entry.target,
        entry.xid,
        entry.detail,
    )


def _narrowing(query: AuditQuery) -> tuple[str, list[Any]]:
    conditions: list[str] = []
    params: list[Any] = []
    for value, sql in (
        (query.principal or None, "e.principal = ${}"),
        (query.xid, "e.xid = ${}"),
        (query.since, "e.event_time >= ${}"),
        (query.until, "e.event_time < ${}"),
    ):
        if value is not None:
            params.append(value)
            conditions.append(sql.format(len(params)))
    return " AND ".join(conditions) or "TRUE", params


async def list_audit_events(
    conn: Connection, query: AuditQuery, request: ListRequest
) -> tuple[list[StoredAuditEvent], str]:
    """One page of events, newest first unless ``order_by`` says otherwise."""
    where, params = _narrowing(query)
    scope = repr((query.principal, query.xid, query.since, query.until))
    rows, token = await fetch_page(
        conn, AUDIT_LISTING, request, where=where, params=params, scope=scope
    )
    return [
        StoredAuditEvent(
            r["event_time"],
            r["principal"],
            r["request_id"],
            r["action"],
            r["target"],
            r["xid"],
            r["operation"],
            r["detail"],
        )
        for r in rows
    ], token


async def delete_expired_audit(conn: Connection, *, now: datetime) -> int:
    """TTL: drop audit rows older than ``AUDIT_RETENTION`` (the Operations' own)."""
    status: str = await conn.execute(
        "DELETE FROM audit_log WHERE event_time < $1", now - AUDIT_RETENTION
    )
    return int(status.split()[-1])
