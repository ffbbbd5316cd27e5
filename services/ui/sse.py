"""Server-Sent Events: a server-streaming RPC of the REST face for a caller that accepts
``text/event-stream`` (a browser's ``EventSource``; docs/rest.md, docs/watch.md).

Each message is one event — each element of a batch message (``WatchEvents``) one of its
own: ``id:`` its ``cursor`` field when it has one (so the browser
sends it back as ``Last-Event-ID`` when it reconnects, and the stream resumes right after
it), ``event:`` the name of its ``kind`` oneof when it has one, ``data:`` the message in
the proto3 JSON mapping on one line. A failure after the stream began is a last
``event: error`` with the error object; one before is an ordinary error answer with its
HTTP status (``EventSource`` then stops retrying, as it should for a refusal).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, Final

import grpc
from aiohttp import web
from google.protobuf import json_format, message_factory
from google.protobuf.message import Message

from ui.http_rules import HttpRoute
from ui.request_ids import request_id_metadata
from ui.transcode import bearer_metadata, response_json

EVENT_STREAM: Final = "text/event-stream"
#: Milliseconds a browser waits before reconnecting (the ``retry:`` field).
RETRY_MS: Final = 2000
_CURSOR: Final = "cursor"
_BATCH: Final = "events"
_HANG_UP_CHECK_SECONDS: Final = 1.0


async def cancel_on_hang_up(request: web.Request, stream: Any) -> None:
    """aiohttp does not cancel a handler whose client went away, and a quiet watch writes
    only every heartbeat (15 s): look at the connection every second and end the RPC once
    it is gone, so the ESS stops feeding a watcher nobody reads (the NDJSON streams of
    ``ui.rest`` use it too)."""
    # aiohttp offers no event for a peer's hang-up to wait on, hence the look each second.
    while request.transport is not None and not request.transport.is_closing():  # noqa: ASYNC110
        await asyncio.sleep(_HANG_UP_CHECK_SECONDS)
    stream.cancel()


def wants_event_stream(accept: str | None) -> bool:
    """The caller named ``text/event-stream`` in its Accept header (EventSource always
    does); anyone else keeps getting newline-delimited JSON."""
    if not accept:
        return False
    return any(part.split(";")[0].strip().lower() == EVENT_STREAM for part in accept.split(","))


def resume_from_last_event(message: Message, last_event_id: str | None) -> None:
    """``Last-Event-ID`` fills the request's ``cursor`` when the query did not set one: a
    reconnecting browser resumes where it stopped. An explicit ``?cursor=`` wins."""
    if not last_event_id or _CURSOR not in message.DESCRIPTOR.fields_by_name:
        return
    if not getattr(message, _CURSOR):
        setattr(message, _CURSOR, last_event_id.strip())


def event_frames(route: HttpRoute, item: Message) -> bytes:
    """One stream message as SSE events: one per element of a batch (a message whose one
    field is a repeated ``events``, as ``WatchEvents``), else one for the message."""
    fields = item.DESCRIPTOR.fields
    if len(fields) == 1 and fields[0].name == _BATCH and fields[0].message_type is not None:
        elements = getattr(item, _BATCH)
        return b"".join(_frame(e, json_format.MessageToDict(e)) for e in elements)
    return _frame(item, response_json(route, item))


def _frame(item: Message, data: Any) -> bytes:
    lines = []
    fields = item.DESCRIPTOR.fields_by_name
    cursor = getattr(item, _CURSOR) if _CURSOR in fields else ""
    if cursor:
        lines.append(f"id: {cursor}")
    kind = item.WhichOneof("kind") if "kind" in item.DESCRIPTOR.oneofs_by_name else None
    if kind:
        lines.append(f"event: {kind}")
    lines.append("data: " + json.dumps(data, separators=(",", ":")))
    return ("\n".join(lines) + "\n\n").encode()


async def serve_events(
    request: web.Request,
    channel: grpc.aio.Channel,
    route: HttpRoute,
    message: Message,
    *,
    refuse: Callable[[grpc.aio.AioRpcError], web.Response],
) -> web.StreamResponse:
    output = message_factory.GetMessageClass(route.output_type)
    call = channel.unary_stream(
        route.full_method,
        request_serializer=lambda m: m.SerializeToString(),
        response_deserializer=output.FromString,
    )
    stream: Any = call(
        message,
        metadata=bearer_metadata(request.headers.get("Authorization"))
        + request_id_metadata(request),
    )
    answer: web.StreamResponse | None = None
    watchdog = asyncio.create_task(cancel_on_hang_up(request, stream))
    try:
        async for item in stream:
            if answer is None:
                answer = web.StreamResponse(
                    headers={
                        "Content-Type": EVENT_STREAM,
                        "Cache-Control": "no-store",
                        # Proxies that buffer (nginx) would hold events back.
                        "X-Accel-Buffering": "no",
                    }
                )
                await answer.prepare(request)
                await answer.write(f"retry: {RETRY_MS}\n\n".encode())
            await answer.write(event_frames(route, item))
    except grpc.aio.AioRpcError as error:
        if watchdog.done():
            return answer or web.Response(status=499)
        if answer is None:
            return refuse(error)
        body = refuse(error).text or "{}"
        data = json.dumps(json.loads(body), separators=(",", ":"))
        await answer.write(f"event: error\ndata: {data}\n\n".encode())
    except asyncio.CancelledError:
        if not watchdog.done():
            raise  # not the hang-up: this handler itself is being cancelled
        return answer or web.Response(status=499)
    finally:
        watchdog.cancel()
        stream.cancel()
    if answer is None:  # no message at all: an empty, complete stream
        answer = web.StreamResponse(headers={"Content-Type": EVENT_STREAM})
        await answer.prepare(request)
    await answer.write_eof()
    return answer
