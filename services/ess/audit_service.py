"""``xmc.v1.AuditService``: the audit trail for admins (docs/audit.md, decision 0047).

Reads only: every change records its principal and request id where it is written
(history rows, Operations, ``audit_log``), in its own transaction; this lists them.
Admins only: the trail names every user and what they touched, across experiments.
"""

from __future__ import annotations

from typing import Any

from ess.auth import require_admin
from ess.interceptor import caller
from xmc.errors import InvalidArgumentError
from xmc.names import experiment_name, parse_experiment_name
from xmc.store.transactions import (
    AuditQuery,
    ListRequest,
    Store,
    StoredAuditEvent,
    list_audit_events,
)
from xmc.timestamps import set_timestamp, to_datetime
from xmc_api.xmc.v1 import audit_pb2, audit_pb2_grpc


def audit_query(request: audit_pb2.ListAuditEventsRequest) -> AuditQuery:
    """The request's narrowing, checked; each refusal names its field."""
    since = to_datetime(request.since) if request.HasField("since") else None
    until = to_datetime(request.until) if request.HasField("until") else None
    if since is not None and until is not None and until <= since:
        raise InvalidArgumentError("until: must be later than since")
    if len(request.principal) > 254:
        raise InvalidArgumentError("principal: at most 254 characters")
    xid = None
    if request.experiment:
        xid = parse_experiment_name(request.experiment, field="experiment")
    return AuditQuery(request.principal.strip().lower(), xid, since, until)


def event_message(event: StoredAuditEvent) -> audit_pb2.AuditEvent:
    message = audit_pb2.AuditEvent(
        principal=event.principal,
        request_id=event.request_id,
        action=event.action,
        target=event.target,
        experiment="" if event.xid is None else experiment_name(event.xid),
        operation=event.operation,
        detail=event.detail,
    )
    set_timestamp(message.time, event.time)
    return message


class AuditService(audit_pb2_grpc.AuditServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def ListAuditEvents(
        self, request: audit_pb2.ListAuditEventsRequest, context: Any
    ) -> audit_pb2.ListAuditEventsResponse:
        require_admin(caller(), "ListAuditEvents")
        query = audit_query(request)
        listing = ListRequest(
            filter=request.filter, page_size=request.page_size, page_token=request.page_token
        )
        async with self._store.connection() as conn:
            found, token = await list_audit_events(conn, query, listing)
        return audit_pb2.ListAuditEventsResponse(
            events=[event_message(e) for e in found], next_page_token=token
        )
