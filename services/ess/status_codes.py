"""Exception → gRPC status code, decided in one place for every RPC (STYLE practice 6).

Three families besides XMC's own errors:

- **storage unavailable** → UNAVAILABLE: Postgres is down, restarting, refusing or out of
  connections, or our pool or connection to it is closed. Nothing is wrong with the
  request, so the caller retries (the Reconciler's batcher keeps its items) rather than
  giving up on an INTERNAL.
- **concurrency conflicts** → ABORTED: a deadlock or serialization failure; retry.
- **client input that reached storage unchecked** → INVALID_ARGUMENT: Postgres class 22
  (data exception: a value out of range, a NUL in text, …) and asyncpg's refusal to encode
  a value for a column (an int past ``int16``/``int64``). The request checks
  (``request_checks.py``, ``validation.py``) reject these before any statement runs; this
  is the last line of defence, and the interceptor logs each hit as a gap in them
  (docs/decisions/0015).

Everything else is a bug: INTERNAL, logged with a request id.

A quota refusal (RESOURCE_EXHAUSTED, docs/quotas.md) also carries, in its trailing
metadata, ``retry-after`` (whole seconds, as HTTP's header) and the rich status
(``grpc-status-details-bin``: a ``google.rpc.Status`` with ``RetryInfo`` and
``QuotaFailure``), for clients that read either.
"""

from __future__ import annotations

import math
from datetime import timedelta

import asyncpg
import grpc
from asyncpg.exceptions import _base as asyncpg_base
from google.rpc import error_details_pb2, status_pb2

from xmc.errors import QuotaExceededError, XmcError

#: Postgres or the way to it is not there right now (see the module docstring): OS-level
#: connection errors and timeouts, class 08 (connection), 57 (shutdown, starting up,
#: cancelled), 53 (too many connections, out of memory or disk), 28 (login refused) and
#: 3D000 (database missing, as while it is being restored); asyncpg's "wrong server"
#: (a standby after a failover), protocol desync and stale schema cache, each fixed by a
#: fresh connection.
STORAGE_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
    asyncpg.exceptions.InvalidCatalogNameError,
    asyncpg.exceptions.TargetServerAttributeNotMatched,
    asyncpg.exceptions.ProtocolError,
    asyncpg.exceptions.OutdatedSchemaCacheError,
)

#: asyncpg's ``InterfaceError`` messages when the pool or the connection is going away
#: (a pool closed at shutdown, a connection terminated under a running query).
CLOSED_MESSAGES = (
    "connection is closed",
    "pool is closing",
    "pool is closed",
    "another operation is cancelling",
)

#: asyncpg's ``InternalClientError`` when the pool resets a connection whose server went
#: away mid-operation ("cannot switch to state 15; another operation (2) is in progress"):
#: seen on every ``pg_ctl restart -m fast`` under load (tests/integration/test_supervision.py).
#: The connection is discarded; the next attempt gets a fresh one. Any other
#: ``InternalClientError`` stays a bug.
LOST_CONNECTION_STATES = ("cannot switch to state",)

#: Client input the checks missed (see the module docstring).
UNCHECKED_INPUT: tuple[type[BaseException], ...] = (
    asyncpg.exceptions.DataError,  # Postgres class 22
    asyncpg_base.DataError,  # asyncpg could not encode a query argument
)

_RETRY_CONFLICT = "concurrent update conflict; retry"


def storage_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, STORAGE_UNAVAILABLE):
        return True
    if isinstance(exc, asyncpg.exceptions.InterfaceError):
        return any(message in str(exc) for message in CLOSED_MESSAGES)
    if isinstance(exc, asyncpg.exceptions.InternalClientError):
        return any(message in str(exc) for message in LOST_CONNECTION_STATES)
    return False


def unchecked_input(exc: BaseException) -> bool:
    """Client input that reached storage (answered INVALID_ARGUMENT, logged as a gap)."""
    return isinstance(exc, UNCHECKED_INPUT)


def status_code(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The status code and user-facing message of an exception raised by a servicer."""
    if isinstance(exc, XmcError):
        return getattr(grpc.StatusCode, exc.code), str(exc)
    if isinstance(
        exc, asyncpg.exceptions.DeadlockDetectedError | asyncpg.exceptions.SerializationError
    ):
        return grpc.StatusCode.ABORTED, _RETRY_CONFLICT
    if storage_unavailable(exc):
        return grpc.StatusCode.UNAVAILABLE, "storage unavailable; retry"
    if unchecked_input(exc):
        return (
            grpc.StatusCode.INVALID_ARGUMENT,
            "request: a value cannot be stored (out of range, or a character storage rejects)",
        )
    return grpc.StatusCode.INTERNAL, "internal error"


Trailers = tuple[tuple[str, str | bytes], ...]


def refusal_trailers(exc: BaseException, message: str) -> Trailers:
    """The trailing metadata of a quota refusal (see the module docstring); none else."""
    if not isinstance(exc, QuotaExceededError):
        return ()
    status = status_pb2.Status(code=grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], message=message)
    retry = error_details_pb2.RetryInfo()
    retry.retry_delay.FromTimedelta(timedelta(seconds=round(exc.retry_after, 3)))
    status.details.add().Pack(retry)
    failure = error_details_pb2.QuotaFailure()
    failure.violations.add(subject=exc.principal, description=f"{exc.limit} {exc.value:g}")
    status.details.add().Pack(failure)
    return (
        ("retry-after", str(max(1, math.ceil(exc.retry_after)))),
        ("grpc-status-details-bin", status.SerializeToString()),
    )
