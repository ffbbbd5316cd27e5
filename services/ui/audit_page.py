"""The dashboard's ``/audit`` page: who changed what, for admins (docs/audit.md).

The ESS decides who may read it (``xmc.v1.AuditService``, admins only); anyone else gets
its PERMISSION_DENIED as a 403 page. The form's fields become the RPC's: principal,
experiment, since (an ISO time, or ``2h``/``7d`` back from now), and the page token.
"""

from __future__ import annotations

from datetime import datetime

from aiohttp import web

from ui import views
from ui.context import ess, render
from ui.gateway import UiError
from xmc.errors import InvalidArgumentError
from xmc.model.audit import parse_time_bound
from xmc.timestamps import set_timestamp, utc_now
from xmc_api.xmc.v1 import audit_pb2

#: Events per page.
PAGE_SIZE = 100


def audit_request(query: dict[str, str], now: datetime) -> audit_pb2.ListAuditEventsRequest:
    experiment = query.get("experiment", "").strip()
    if experiment.isdigit():
        experiment = f"experiments/{experiment}"
    request = audit_pb2.ListAuditEventsRequest(
        principal=query.get("principal", "").strip(),
        experiment=experiment,
        page_size=PAGE_SIZE,
        page_token=query.get("page_token", ""),
    )
    try:
        since = parse_time_bound(query.get("since", ""), now=now, field="since")
    except InvalidArgumentError as error:
        raise UiError(400, str(error)) from None
    if since is not None:
        set_timestamp(request.since, since)
    return request


async def audit(request: web.Request) -> web.Response:
    query = {k: request.query.get(k, "") for k in ("principal", "experiment", "since")}
    rpc = audit_request({**query, "page_token": request.query.get("page_token", "")}, utc_now())
    found = await ess(request).audit_events(rpc)
    rows = [
        {
            "time": views.fmt_time(e.time),
            "principal": e.principal,
            "action": e.action,
            "target": e.target,
            "request_id": e.request_id,
            "operation": e.operation,
            "detail": e.detail,
        }
        for e in found.items
    ]
    return render(
        request,
        "audit.html",
        {"rows": rows, "query": query, "next_page_token": found.next_page_token},
    )


def add_routes(app: web.Application) -> None:
    app.router.add_get("/audit", audit)
