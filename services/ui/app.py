"""The dashboard's aiohttp application: templates, static files, error pages, probes, and
the hook where the REST/JSON routes join the same listener.

Why aiohttp + Jinja2: aiohttp is already the HTTP stack of every XMC service (the ops
endpoints, kubesim), so the UI adds one well-kept template engine and nothing else; pages
are rendered on the server from the gRPC answers, so the browser needs no framework, no
build step and nothing from a CDN (docs/ui.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import grpc
import structlog
from aiohttp import web
from grpc_health.v1 import health_pb2, health_pb2_grpc

from ui import actions, audit_page, logs_page, pages, usage_page
from ui.context import CHANNEL, HERE, OPTIONS, TEMPLATES, UiOptions, render, templates
from ui.gateway import UiError
from ui.request_ids import request_id_header, request_ids
from ui.rest import add_rest_routes
from ui.security import same_site_writes, security_headers
from ui.transcode import error_body
from xmc.health import Check, Readiness, evaluate, ready_body

log = structlog.get_logger()

#: A function that adds routes to the app over the ESS channel (``ui.rest.add_rest_routes``).
RestHook = Callable[[web.Application, grpc.aio.Channel], None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
#: google.rpc names of the errors raised around the REST face (a refused write, a 404).
_REST_STATUS = {403: "PERMISSION_DENIED", 404: "NOT_FOUND", 500: "INTERNAL"}


def default_rest_hooks() -> list[RestHook]:
    """The REST/JSON face (``ui.rest``, derived from the ``google.api.http`` rules) on the
    dashboard's listener; the pages never define ``/v1/...`` routes themselves."""
    return [add_rest_routes]


def _error_page(request: web.Request, status: int, message: str) -> web.Response:
    if request.path.startswith("/v1/"):  # the REST face's shape (docs/rest.md)
        body = error_body(status, _REST_STATUS.get(status, "UNKNOWN"), message)
        return web.json_response(body, status=status)
    if "/live" in request.path:
        return web.json_response({"error": {"code": status, "message": message}}, status=status)
    try:
        return render(request, "error.html", {"status": status, "message": message}, status=status)
    except Exception:  # a broken template must still not show a trace
        log.exception("error page failed", path=request.path)
        return web.Response(text=f"{status}: {message}", status=status)


@web.middleware
async def error_pages(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Failures become a page with one message, never a stack trace: RPC errors with
    their code, unknown paths as 404, anything else as a logged 500."""
    try:
        return await handler(request)
    except UiError as error:
        return _error_page(request, error.status, error.message)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        message = "page not found" if error.status == 404 else error.reason
        return _error_page(request, error.status, message)
    except Exception:
        log.exception("page failed", path=request.path)
        return _error_page(request, 500, "internal error; the dashboard's log has the details")


def ess_readiness(channel: grpc.aio.Channel) -> Readiness:
    """Ready while the ESS answers its gRPC health check as SERVING."""
    stub = health_pb2_grpc.HealthStub(channel)

    async def checks() -> list[Check]:
        try:
            answer = await stub.Check(health_pb2.HealthCheckRequest(), timeout=2.0)
        except grpc.RpcError as error:
            code = error.code().name if isinstance(error, grpc.aio.AioRpcError) else "UNKNOWN"
            return [Check("ess", False, code)]
        serving = answer.status == health_pb2.HealthCheckResponse.SERVING
        return [
            Check("ess", serving, health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
        ]

    return checks


def create_app(
    channel: grpc.aio.Channel,
    options: UiOptions | None = None,
    *,
    rest_routes: Sequence[RestHook] | None = None,
) -> web.Application:
    """The dashboard over ``channel``; ``rest_routes`` (default :func:`default_rest_hooks`)
    add the REST/JSON face to the same application."""
    # ``XMANAGER_UI_URL`` with a trailing slash makes the client print ``…//experiments/7``:
    # merged slashes (and a dropped trailing one) redirect to the page instead of a 404.
    normalize = web.normalize_path_middleware(
        append_slash=False, remove_slash=True, merge_slashes=True
    )
    app = web.Application(middlewares=[normalize, error_pages, request_ids, same_site_writes])
    app.on_response_prepare.append(security_headers)
    app.on_response_prepare.append(request_id_header)
    app[CHANNEL] = channel
    app[OPTIONS] = options or UiOptions()
    app[TEMPLATES] = templates()
    readiness = ess_readiness(channel)

    async def healthz(_request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def readyz(_request: web.Request) -> web.Response:
        status, body = ready_body(await evaluate(readiness))
        return web.json_response(body, status=status)

    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    static = app.router.add_static("/static/", HERE / "static", append_version=True)
    for asset in ("ui.css", "ui.js"):
        app[TEMPLATES].globals[asset.replace(".", "_")] = str(static.url_for(filename=asset))
    pages.add_routes(app)
    actions.add_routes(app)
    logs_page.add_routes(app)
    audit_page.add_routes(app)
    usage_page.add_routes(app)
    for hook in default_rest_hooks() if rest_routes is None else rest_routes:
        hook(app, channel)
    return app
