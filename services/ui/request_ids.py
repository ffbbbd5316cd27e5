"""Request ids through the dashboard (docs/audit.md): each HTTP request gets one — the
``X-Request-Id`` the browser, a script or the proxy in front sent, checked like the ESS
checks its own, else a new one — which every RPC the request makes to the ESS carries as
``x-request-id`` and the answer returns. So a stop clicked on the dashboard is recorded on
its history row, its Operation and the audit list under the id its HTTP request had.

The person is the ESS's business: the request's ``Authorization`` header (set by the auth
proxy) is what the ESS authenticates (``ui.context.ess``), so an action is attributed to
the signed-in user, not to the dashboard.
"""

from __future__ import annotations

import uuid
from typing import Final

from aiohttp import web

from ui.gateway import UiError
from ui.security import Handler
from xmc.errors import InvalidArgumentError
from xmc.model.audit import REQUEST_ID_HEADER, parse_request_id

#: Where the middleware keeps the request's id.
_KEY: Final = "xmc_request_id"


def request_id(request: web.Request) -> str:
    """The id of ``request`` (set by :func:`request_ids`; a new one outside it)."""
    found = request.get(_KEY)
    return found if isinstance(found, str) else uuid.uuid4().hex


def request_id_metadata(request: web.Request) -> tuple[tuple[str, str], ...]:
    """gRPC metadata that forwards the request's id to the ESS."""
    return ((REQUEST_ID_HEADER, request_id(request)),)


@web.middleware
async def request_ids(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Give the request its id first; a malformed ``X-Request-Id`` is refused (400) with
    the reason, as the ESS would refuse it."""
    try:
        given = parse_request_id(request.headers.get(REQUEST_ID_HEADER))
    except InvalidArgumentError as error:
        request[_KEY] = uuid.uuid4().hex
        raise UiError(400, str(error)) from None
    request[_KEY] = given or uuid.uuid4().hex
    return await handler(request)


async def request_id_header(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: every answer (pages, JSON, streams, errors) names its id."""
    found = request.get(_KEY)
    if isinstance(found, str):
        response.headers["X-Request-Id"] = found
