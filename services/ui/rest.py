"""The REST/JSON face of the ESS: every RPC with a ``google.api.http`` rule, at its path and
verb, transcoded to gRPC on the dashboard's channel (docs/rest.md).

Nothing here is written per RPC: the routes come from the service descriptors (the
published API and XMC's own services beside it, :data:`SERVICES`)
(:mod:`ui.http_rules`), requests and responses go through the proto3 JSON mapping
(:mod:`ui.transcode`), and the RPC is called by its method path with the descriptor's
message classes. This module is the thin async shell: read the request, call, answer.
Every failure is a JSON error in the Google API shape, never a stack trace.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

import grpc
import structlog
from aiohttp import web
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import ServiceDescriptor

from ui.http_rules import (
    HttpRoute,
    Matched,
    NoRoute,
    WrongMethod,
    path_prefixes,
    resolve,
    routes_from_service,
    rules_table,
)
from ui.openapi import openapi_document, render
from ui.security import json_content_type_refusal
from ui.sse import cancel_on_hang_up, resume_from_last_event, serve_events, wants_event_stream
from ui.transcode import (
    DETAILS_KEY,
    NDJSON,
    RequestError,
    bearer_metadata,
    build_request,
    decode_json,
    details_json,
    error_body,
    http_status,
    response_json,
)

# Imported for their descriptors: Operation.metadata and .response are Any values that
# name these types, and MessageToDict resolves them in the default pool.
from xmc_api.cloud.xmanager.v1 import api_pb2, operations_pb2, work_unit_pb2  # noqa: F401
from xmc_api.xmc.v1 import (
    logs_pb2,
    notifications_pb2,
    retry_pb2,
    spec_pb2,
    sweep_pb2,
    timeline_pb2,
    usage_pb2,
    watch_pb2,
)

log = structlog.get_logger()

#: The published API.
ESS_SERVICE: Final[ServiceDescriptor] = api_pb2.DESCRIPTOR.services_by_name[
    "ExperimentStateService"
]
#: XMC's own read API beside it (docs/timelines.md).
TIMELINE_SERVICE: Final[ServiceDescriptor] = timeline_pb2.DESCRIPTOR.services_by_name[
    "TimelineService"
]
#: The manifests the Actuator created executions with (decision 0039).
SPEC_SERVICE: Final[ServiceDescriptor] = spec_pb2.DESCRIPTOR.services_by_name["SpecService"]
#: XMC's sweep reads (docs/decisions/0037-the-sweep-table.md).
SWEEP_SERVICE: Final[ServiceDescriptor] = sweep_pb2.DESCRIPTOR.services_by_name["SweepService"]
#: Container logs, kept and live (docs/logs.md).
LOG_SERVICE: Final[ServiceDescriptor] = logs_pb2.DESCRIPTOR.services_by_name["LogService"]
#: The push API (docs/watch.md): the one stream that is also served as Server-Sent Events.
WATCH_SERVICE: Final[ServiceDescriptor] = watch_pb2.DESCRIPTOR.services_by_name["WatchService"]
#: Automatic retries: experiments' default policies, units' attempts (docs/retries.md).
RETRY_SERVICE: Final[ServiceDescriptor] = retry_pb2.DESCRIPTOR.services_by_name["RetryService"]
#: Webhooks and their delivery log (docs/notifications.md).
NOTIFICATION_SERVICE: Final[ServiceDescriptor] = notifications_pb2.DESCRIPTOR.services_by_name[
    "NotificationService"
]
#: Accounting: who used how much of the cluster (docs/usage.md).
USAGE_SERVICE: Final[ServiceDescriptor] = usage_pb2.DESCRIPTOR.services_by_name["UsageService"]
#: Every service the REST face mounts; a path goes to the first route that matches, in
#: this order, so the published API's routes come first.
SERVICES: Final[tuple[ServiceDescriptor, ...]] = (
    ESS_SERVICE,
    TIMELINE_SERVICE,
    LOG_SERVICE,
    SPEC_SERVICE,
    SWEEP_SERVICE,
    WATCH_SERVICE,
    RETRY_SERVICE,
    NOTIFICATION_SERVICE,
    USAGE_SERVICE,
)
#: Where xmc-ui serves the OpenAPI document of the REST face.
OPENAPI_PATH: Final = "/openapi.json"
#: Seconds one transcoded RPC may take before the caller gets 504.
DEFAULT_TIMEOUT: Final = 30.0
#: Statuses of errors raised here rather than by the ESS (google.rpc names).
_LOCAL_STATUS: Final = {
    400: "INVALID_ARGUMENT",
    404: "NOT_FOUND",
    405: "UNIMPLEMENTED",
    413: "OUT_OF_RANGE",
    415: "INVALID_ARGUMENT",
    500: "INTERNAL",
}
_REASONS: Final = {499: "Client Closed Request"}

ChannelSource: TypeAlias = "grpc.aio.Channel | Callable[[], grpc.aio.Channel]"


def error_response(
    http: int, message: str, *, status: str | None = None, details: Sequence[Any] = ()
) -> web.Response:
    body = error_body(http, status or _LOCAL_STATUS.get(http, "UNKNOWN"), message, details)
    return web.json_response(body, status=http, reason=_REASONS.get(http))


async def _payload(request: web.Request, route: HttpRoute) -> Any:
    """The decoded JSON body; None when the route takes none or the body is empty."""
    raw = (await request.read()) if request.can_read_body else b""
    if not raw.strip():
        return {} if route.body == "*" else None
    if not route.body:
        raise RequestError(f"{route.http_method} {route.template.text} takes no request body")
    return decode_json(raw)


class RestFace:
    """Serves every route of ``routes`` over one ESS channel."""

    def __init__(
        self,
        routes: Sequence[HttpRoute],
        channel: ChannelSource,
        *,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> None:
        self.routes = tuple(routes)
        self._channel = channel
        self.timeout = timeout

    def channel(self) -> grpc.aio.Channel:
        return self._channel() if callable(self._channel) else self._channel

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """One REST request; everything unexpected is a logged 500 with no detail."""
        try:
            return await self._handle(request)
        except web.HTTPException as error:  # e.g. 413 from reading an oversized body
            return error_response(error.status, error.reason)
        except Exception:
            log.exception("rest request failed", method=request.method, path=request.path)
            return error_response(500, "internal error; xmc-ui's log has the details")

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        outcome = resolve(self.routes, request.method, request.rel_url.raw_path)
        if isinstance(outcome, NoRoute):
            return error_response(404, f"no REST route for {request.path}")
        if isinstance(outcome, WrongMethod):
            allowed = ", ".join(outcome.allowed)
            response = error_response(405, f"{request.path} takes {allowed}, not {request.method}")
            response.headers["Allow"] = allowed
            return response
        assert isinstance(outcome, Matched)
        refusal = json_content_type_refusal(request.method, request.headers.get("Content-Type"))
        if refusal is not None:
            return error_response(415, refusal)
        route = outcome.route
        try:
            payload = await _payload(request, route)
            message = build_request(route, outcome.bindings, payload, request.query.items())
        except (RequestError, json_format.ParseError) as error:
            return error_response(400, str(error))
        return await self._call(request, route, message)

    async def _call(
        self, request: web.Request, route: HttpRoute, message: Any
    ) -> web.StreamResponse:
        if route.server_streaming and wants_event_stream(request.headers.get("Accept")):
            resume_from_last_event(message, request.headers.get("Last-Event-ID"))
            return await serve_events(request, self.channel(), route, message, refuse=_rpc_error)
        if route.server_streaming:
            return await self._stream(request, route, message)
        output = message_factory.GetMessageClass(route.output_type)
        call = self.channel().unary_unary(
            route.full_method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=output.FromString,
        )
        metadata = bearer_metadata(request.headers.get("Authorization"))
        try:
            response = await call(message, metadata=metadata, timeout=self.timeout)
        except grpc.aio.AioRpcError as error:
            return _rpc_error(error)
        return web.json_response(response_json(route, response))

    async def _stream(
        self, request: web.Request, route: HttpRoute, message: Any
    ) -> web.StreamResponse:
        """A server-streaming RPC as grpc-gateway answers one: newline-delimited JSON,
        ``{"result": …}`` per message and, if the stream fails once begun,
        ``{"error": …}`` last; a failure before the first message is an ordinary error
        answer with its status. No deadline: the stream ends when the RPC ends it (a
        followed log, when its execution ends) or when the caller hangs up."""
        output = message_factory.GetMessageClass(route.output_type)
        call = self.channel().unary_stream(
            route.full_method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=output.FromString,
        )
        metadata = bearer_metadata(request.headers.get("Authorization"))
        stream = call(message, metadata=metadata)
        answer: web.StreamResponse | None = None
        watchdog = asyncio.create_task(cancel_on_hang_up(request, stream))
        try:
            async for item in stream:
                if answer is None:
                    answer = web.StreamResponse(headers={"Content-Type": NDJSON})
                    await answer.prepare(request)
                line = {"result": response_json(route, item)}
                await answer.write(json.dumps(line).encode() + b"\n")
        except grpc.aio.AioRpcError as error:
            if watchdog.done():
                return answer or web.Response(status=499)
            if answer is None:
                return _rpc_error(error)
            body = json.loads(_rpc_error(error).text or "{}")
            await answer.write(json.dumps(body).encode() + b"\n")
        except asyncio.CancelledError:
            if not watchdog.done():
                raise  # not the hang-up: this handler itself is being cancelled
            return answer or web.Response(status=499)
        finally:
            watchdog.cancel()
            stream.cancel()
        if answer is None:  # no message at all: an empty, complete stream
            answer = web.StreamResponse(headers={"Content-Type": NDJSON})
            await answer.prepare(request)
        await answer.write_eof()
        return answer


def _rpc_error(error: grpc.aio.AioRpcError) -> web.Response:
    code = error.code()
    trailers = error.trailing_metadata() or ()
    blob = next((v for k, v in trailers if k == DETAILS_KEY and isinstance(v, bytes)), None)
    return error_response(
        http_status(code),
        error.details() or code.name,
        status=code.name,
        details=details_json(blob),
    )


def routes_of(services: Sequence[ServiceDescriptor]) -> tuple[HttpRoute, ...]:
    """The routes of every service, in service order."""
    return tuple(route for service in services for route in routes_from_service(service))


def rest_routes(
    channel: ChannelSource,
    *,
    services: Sequence[ServiceDescriptor] = SERVICES,
    timeout: float = DEFAULT_TIMEOUT,
) -> list[web.RouteDef]:
    """aiohttp routes that send every path under the rules' prefixes (``/v1/...``) here,
    and ``GET /openapi.json``, the document of those routes (docs/rest.md). ``channel`` may
    be a callable, for an app that opens its channel at startup."""
    face = RestFace(routes_of(services), channel, timeout=timeout)
    document = render(openapi_document(services))

    async def openapi(_request: web.Request) -> web.Response:
        # Public like the protos it is made from: no user data, no call to the ESS.
        return web.Response(text=document, content_type="application/json")

    return [
        web.get(OPENAPI_PATH, openapi),
        *(
            web.route("*", f"{prefix}/{{tail:.*}}", face.handle)
            for prefix in path_prefixes(face.routes)
        ),
    ]


def add_rest_routes(app: web.Application, channel: grpc.aio.Channel) -> None:
    """The dashboard's hook (``ui.app``): the REST face on the app's listener."""
    app.add_routes(rest_routes(channel))


if __name__ == "__main__":  # the route table of docs/rest.md
    print(rules_table(routes_of(SERVICES)), end="")
