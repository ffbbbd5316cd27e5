"""The gRPC boundary: authentication, request checks, the read gate of restricted reads
(``ess.read_gate``), error classification and RPC metrics, once for every unary method
(STYLE practice 6: one classification per boundary; the codes themselves are decided in
``status_codes.py``).

The caller's identity is put in a context variable for the duration of the call, so
servicers read it with ``caller()`` instead of threading it through every signature; so is
the request id (``x-request-id`` as the caller sent it, checked, else a new one), which is
bound to every log line of the call, returned to the caller (trailing metadata of a unary
call, initial metadata of a stream) and recorded with every change the call makes:
``actor()`` is both (docs/audit.md).

Bytes that do not parse as the method's request type (bad UTF-8 in a string, a truncated
field) would make gRPC answer UNKNOWN before any servicer runs; the request deserializer is
wrapped so they become an ``Undecodable`` the handler refuses with INVALID_ARGUMENT. That
holds for the public methods (health, reflection) too, which otherwise pass untouched.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import grpc
import structlog

from ess.auth import Authenticator, Identity, UnknownKeyId
from ess.metrics import RPC_SECONDS, RPC_TOTAL
from ess.read_gate import ReadGate
from ess.request_checks import check_request
from ess.status_codes import refusal_trailers, status_code, unchecked_input
from xmc.errors import InvalidArgumentError
from xmc.model.audit import REQUEST_ID_HEADER, Actor, parse_request_id

log = structlog.get_logger()

_IDENTITY: ContextVar[Identity] = ContextVar("xmc_identity")
_REQUEST_ID: ContextVar[str] = ContextVar("xmc_request_id", default="")

#: Methods that answer without a token: probes and tooling must reach them.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_MAX_MESSAGE = 1000


def caller() -> Identity:
    """The authenticated identity of the RPC being served."""
    return _IDENTITY.get()


def actor() -> Actor:
    """Who the RPC being served acts for, and its request id: what its writes record."""
    return Actor(_IDENTITY.get().email, _REQUEST_ID.get())


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_of(metadata: Any) -> str:
    """The caller's ``x-request-id``, checked (INVALID_ARGUMENT naming it), else a new one.
    Sent twice is refused like any other ambiguity about the call."""
    found = [
        value
        for key, value in metadata or ()
        if key == REQUEST_ID_HEADER and isinstance(value, str)
    ]
    if len(found) > 1:
        raise InvalidArgumentError(f"{REQUEST_ID_HEADER}: sent more than once")
    return parse_request_id(found[0] if found else None) or new_request_id()


@dataclass(frozen=True)
class Undecodable:
    """What the wrapped deserializer returns for bytes that are no valid request."""

    error: str

    def refusal(self) -> InvalidArgumentError:
        return InvalidArgumentError(f"request: cannot be parsed: {self.error}")


def tolerant(deserializer: Callable[[bytes], Any] | None) -> Callable[[bytes], Any] | None:
    """``deserializer``, answering ``Undecodable`` instead of raising."""
    if deserializer is None:
        return None

    def deserialize(data: bytes) -> Any:
        try:
            return deserializer(data)
        except Exception as exc:  # DecodeError, or whatever a library deserializer raises
            return Undecodable(str(exc))

    return deserialize


@dataclass(frozen=True)
class Decoded:
    """A parsed request, and whether its bytes hold no 0x00 (then no string holds a NUL
    and the request check skips every string: ``check_request(nul_free=...)``)."""

    message: Any
    nul_free: bool


def checked(deserializer: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    """``deserializer`` answering ``Decoded``, or ``Undecodable`` instead of raising."""

    def deserialize(data: bytes) -> Any:
        try:
            message = deserializer(data)
        except Exception as exc:  # DecodeError, or whatever a library deserializer raises
            return Undecodable(str(exc))
        return Decoded(message, b"\x00" not in data)

    return deserialize


def passthrough(serializer: Callable[[Any], bytes] | None) -> Callable[[Any], bytes] | None:
    """``serializer``, except that a response a servicer returns already serialized
    (``bytes``: pages framed from stored bytes) goes out as it is."""
    if serializer is None:
        return None

    def serialize(response: Any) -> bytes:
        return response if type(response) is bytes else serializer(response)

    return serialize


def _refusal(exc: Exception) -> tuple[grpc.StatusCode, str]:
    """Classify ``exc`` for the caller; log what the operator must see (the log line
    carries the request id bound for the call, which the message names)."""
    code, message = status_code(exc)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("rpc failed")
        message = f"{message} (request id {_REQUEST_ID.get()})"
    elif unchecked_input(exc):
        log.warning("client input reached storage unchecked", exc_info=exc)
    return code, message[:_MAX_MESSAGE]


def _public(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """Health and reflection: no token, no checks, no metrics; only a request that does
    not parse is refused here."""
    inner = handler.unary_unary

    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if isinstance(request, Undecodable):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(request.refusal()))
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(
        wrapped,
        request_deserializer=tolerant(handler.request_deserializer),
        response_serializer=handler.response_serializer,
    )


class EssInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, authenticator: Authenticator, gate: ReadGate | None = None) -> None:
        self._authenticator = authenticator
        #: Restricted reads (decision 0048): each RPC's read rule, before its servicer.
        self._gate = gate
        #: The wrapped handler of each method, built on its first call: the servicers'
        #: handlers never change, and building closures and a handler per call cost
        #: more than the rest of the interceptor.
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = details.method
        wrapped = self._wrapped.get(method)
        if wrapped is not None:
            return wrapped
        handler = await continuation(details)
        if handler is None:
            return handler
        if handler.unary_stream is not None and method.startswith(PUBLIC_PREFIXES):
            return handler  # health's Watch: no token, like the rest of health
        if handler.unary_stream is not None:
            wrapped = self._wrap_stream(method, handler)
        elif handler.unary_unary is not None:
            wrapped = self._wrap(method, handler)
        else:
            return handler
        self._wrapped[method] = wrapped
        return wrapped

    def _wrap(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        if method.startswith(PUBLIC_PREFIXES):
            return _public(handler)
        inner = handler.unary_unary
        short = method.rsplit("/", 1)[-1]

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            code = grpc.StatusCode.OK
            token = None
            rid = _REQUEST_ID.set("")
            try:
                _REQUEST_ID.set(request_id_of(context.invocation_metadata()))
                context.set_trailing_metadata(((REQUEST_ID_HEADER, _REQUEST_ID.get()),))
                structlog.contextvars.bind_contextvars(request_id=_REQUEST_ID.get())
                identity = await self._authenticate(context)
                token = _IDENTITY.set(identity)
                structlog.contextvars.bind_contextvars(rpc=short, caller=identity.email)
                if isinstance(request, Undecodable):
                    raise request.refusal()
                check_request(request.message, nul_free=request.nul_free)
                if self._gate is not None:
                    await self._gate.check(method, request.message, identity)
                return await inner(request.message, context)
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:
                code, message = _refusal(exc)
                await context.abort(code, message, refusal_trailers(exc, message))
            finally:
                if token is not None:
                    _IDENTITY.reset(token)
                _REQUEST_ID.reset(rid)
                structlog.contextvars.unbind_contextvars("rpc", "caller", "request_id")
                RPC_TOTAL.labels(short, code.name).inc()
                RPC_SECONDS.labels(short).observe(time.perf_counter() - began)

        return grpc.unary_unary_rpc_method_handler(
            wrapped,
            request_deserializer=checked(handler.request_deserializer),
            response_serializer=passthrough(handler.response_serializer),
        )

    async def _authenticate(self, context: grpc.aio.ServicerContext) -> Identity:
        metadata = context.invocation_metadata()
        try:
            return self._authenticator.authenticate(metadata)
        except UnknownKeyId as unknown:  # the issuer may have rotated its keys
            return await self._authenticator.authenticate_after_refresh(metadata, unknown)

    def _wrap_stream(self, method: str, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """A server-streaming method gets what a unary one gets (authentication, request
        checks, one classification of errors, metrics), around the whole stream: an
        error after the first message still ends it with its own code, never INTERNAL."""
        inner = handler.unary_stream
        short = method.rsplit("/", 1)[-1]

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            began = time.perf_counter()
            code = grpc.StatusCode.OK
            token = None
            rid = _REQUEST_ID.set("")
            try:
                _REQUEST_ID.set(request_id_of(context.invocation_metadata()))
                await context.send_initial_metadata(((REQUEST_ID_HEADER, _REQUEST_ID.get()),))
                structlog.contextvars.bind_contextvars(request_id=_REQUEST_ID.get())
                identity = await self._authenticate(context)
                token = _IDENTITY.set(identity)
                structlog.contextvars.bind_contextvars(rpc=short, caller=identity.email)
                if isinstance(request, Undecodable):
                    raise request.refusal()
                check_request(request.message, nul_free=request.nul_free)
                if self._gate is not None:
                    await self._gate.check(method, request.message, identity)
                async for response in inner(request.message, context):
                    yield response
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except asyncio.CancelledError:
                code = grpc.StatusCode.CANCELLED
                raise
            except Exception as exc:
                code, message = _refusal(exc)
                await context.abort(code, message, refusal_trailers(exc, message))
            finally:
                if token is not None:
                    _IDENTITY.reset(token)
                _REQUEST_ID.reset(rid)
                structlog.contextvars.unbind_contextvars("rpc", "caller", "request_id")
                RPC_TOTAL.labels(short, code.name).inc()
                RPC_SECONDS.labels(short).observe(time.perf_counter() - began)

        return grpc.unary_stream_rpc_method_handler(
            wrapped,
            request_deserializer=checked(handler.request_deserializer),
            response_serializer=passthrough(handler.response_serializer),
        )
