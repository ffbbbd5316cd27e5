"""The gRPC boundary: authentication, error classification and RPC metrics, once for
every unary method (STYLE practice 6: one classification per boundary).

The caller's identity is put in a context variable for the duration of the call, so
servicers read it with ``caller()`` instead of threading it through every signature.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

import asyncpg
import grpc
import structlog

from ess.auth import Authenticator, Identity
from ess.metrics import RPC_SECONDS, RPC_TOTAL
from xmc.errors import XmcError

log = structlog.get_logger()

_IDENTITY: ContextVar[Identity] = ContextVar("xmc_identity")

#: Methods that answer without a token: probes and tooling must reach them.
PUBLIC_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
_MAX_MESSAGE = 1000


def caller() -> Identity:
    """The authenticated identity of the RPC being served."""
    return _IDENTITY.get()


#: Postgres is down, restarting or unreachable: nothing is wrong with the request, so the
#: caller retries (the Reconciler's batcher keeps the items) rather than giving up on an
#: INTERNAL. Class 08 (connection), class 57 (shutdown, starting up), a connection lost
#: mid-query, and a pool that could not connect in time.
_STORAGE_UNAVAILABLE = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.ConnectionDoesNotExistError,
)


def _status_code(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """Map an exception to a status code and a user-facing message."""
    if isinstance(exc, XmcError):
        return getattr(grpc.StatusCode, exc.code), str(exc)
    if isinstance(exc, asyncpg.exceptions.DeadlockDetectedError):
        return grpc.StatusCode.ABORTED, "concurrent update conflict; retry"
    if isinstance(exc, asyncpg.exceptions.SerializationError):
        return grpc.StatusCode.ABORTED, "concurrent update conflict; retry"
    if isinstance(exc, _STORAGE_UNAVAILABLE):
        return grpc.StatusCode.UNAVAILABLE, "storage unavailable; retry"
    return grpc.StatusCode.INTERNAL, "internal error"


class EssInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    def __init__(self, authenticator: Authenticator) -> None:
        self._authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or handler.unary_unary is None or method.startswith(PUBLIC_PREFIXES):
            return handler
        inner = handler.unary_unary
        authenticator = self._authenticator
        short = method.rsplit("/", 1)[-1]

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            began = time.perf_counter()
            code = grpc.StatusCode.OK
            token = None
            try:
                identity = authenticator.authenticate(context.invocation_metadata())
                token = _IDENTITY.set(identity)
                structlog.contextvars.bind_contextvars(rpc=short, caller=identity.email)
                return await inner(request, context)
            except grpc.aio.AbortError:
                code = context.code() or grpc.StatusCode.UNKNOWN
                raise
            except Exception as exc:
                code, message = _status_code(exc)
                if code == grpc.StatusCode.INTERNAL:
                    request_id = uuid.uuid4().hex[:12]
                    log.exception("rpc failed", request_id=request_id)
                    message = f"{message} (request id {request_id})"
                await context.abort(code, message[:_MAX_MESSAGE])
            finally:
                if token is not None:
                    _IDENTITY.reset(token)
                structlog.contextvars.unbind_contextvars("rpc", "caller")
                RPC_TOTAL.labels(short, code.name).inc()
                RPC_SECONDS.labels(short).observe(time.perf_counter() - began)

        return grpc.unary_unary_rpc_method_handler(
            wrapped,
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )
