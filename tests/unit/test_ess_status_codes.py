"""The ESS's one error classification (services/ess/status_codes.py): a Postgres outage
is UNAVAILABLE (callers retry), never INTERNAL (callers give up); client input that reached
storage is INVALID_ARGUMENT; only a bug is INTERNAL."""

from __future__ import annotations

import asyncpg
import grpc
import pytest
from asyncpg.exceptions import _base as asyncpg_base

from ess.status_codes import status_code as _status_code
from xmc.errors import NotFoundError

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
INVALID = grpc.StatusCode.INVALID_ARGUMENT
INTERNAL = grpc.StatusCode.INTERNAL


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        pytest.param(ConnectionRefusedError(111, "refused"), UNAVAILABLE, id="connection refused"),
        pytest.param(TimeoutError(), UNAVAILABLE, id="pool acquire timed out"),
        pytest.param(
            asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
            UNAVAILABLE,
            id="postgres starting up",
        ),
        pytest.param(
            asyncpg.exceptions.AdminShutdownError("terminating connection"),
            UNAVAILABLE,
            id="postgres shutting down",
        ),
        pytest.param(
            asyncpg.exceptions.ConnectionDoesNotExistError("closed mid-query"),
            UNAVAILABLE,
            id="connection lost mid-query",
        ),
        pytest.param(
            asyncpg.exceptions.ConnectionFailureError("connection failure"),
            UNAVAILABLE,
            id="class 08",
        ),
        pytest.param(
            asyncpg.exceptions.DeadlockDetectedError("deadlock"),
            grpc.StatusCode.ABORTED,
            id="deadlock: retry",
        ),
        pytest.param(ConnectionResetError(104, "reset"), UNAVAILABLE, id="connection reset"),
        pytest.param(
            asyncpg.exceptions.InterfaceError("connection is closed"),
            UNAVAILABLE,
            id="connection closed under us",
        ),
        pytest.param(
            asyncpg.exceptions.InterfaceError("cannot perform operation: connection is closed"),
            UNAVAILABLE,
            id="protocol: connection is closed",
        ),
        pytest.param(
            asyncpg.exceptions.InterfaceError("pool is closing"), UNAVAILABLE, id="pool closing"
        ),
        pytest.param(
            asyncpg.exceptions.InterfaceError("pool is closed"), UNAVAILABLE, id="pool closed"
        ),
        pytest.param(
            asyncpg.exceptions.InterfaceError(
                "cannot perform operation: another operation is in progress"
            ),
            INTERNAL,
            id="misuse of a connection is a bug",
        ),
        pytest.param(
            asyncpg.exceptions.ClientCannotConnectError("no route"),
            UNAVAILABLE,
            id="client cannot connect",
        ),
        pytest.param(
            asyncpg.exceptions.TooManyConnectionsError("too many clients already"),
            UNAVAILABLE,
            id="postgres out of connections",
        ),
        pytest.param(
            asyncpg.exceptions.InvalidPasswordError("password authentication failed"),
            UNAVAILABLE,
            id="login refused",
        ),
        pytest.param(
            asyncpg.exceptions.InvalidCatalogNameError('database "x" does not exist'),
            UNAVAILABLE,
            id="database missing",
        ),
        pytest.param(
            asyncpg.exceptions.QueryCanceledError("canceling statement due to statement timeout"),
            UNAVAILABLE,
            id="statement timeout",
        ),
        pytest.param(
            asyncpg.exceptions.TargetServerAttributeNotMatched("standby"),
            UNAVAILABLE,
            id="connected to a standby after failover",
        ),
        pytest.param(
            asyncpg.exceptions.ProtocolError("unexpected message"),
            UNAVAILABLE,
            id="protocol desync",
        ),
        pytest.param(
            asyncpg.exceptions.OutdatedSchemaCacheError("cached plan changed"),
            UNAVAILABLE,
            id="stale schema cache",
        ),
        pytest.param(
            asyncpg.exceptions.InternalClientError(
                "cannot switch to state 15; another operation (2) is in progress"
            ),
            UNAVAILABLE,
            id="pool reset of a connection lost mid-operation (a Postgres restart)",
        ),
        pytest.param(
            asyncpg.exceptions.InternalClientError("holder already connected"),
            INTERNAL,
            id="asyncpg's own invariant broken: a bug",
        ),
        pytest.param(
            asyncpg.exceptions.SerializationError("could not serialize"),
            grpc.StatusCode.ABORTED,
            id="serialization failure: retry",
        ),
        pytest.param(
            asyncpg.exceptions.CharacterNotInRepertoireError("invalid byte sequence: 0x00"),
            INVALID,
            id="class 22: NUL in text",
        ),
        pytest.param(
            asyncpg.exceptions.UntranslatableCharacterError("unsupported Unicode escape"),
            INVALID,
            id="class 22: NUL in jsonb",
        ),
        pytest.param(
            asyncpg.exceptions.NumericValueOutOfRangeError("smallint out of range"),
            INVALID,
            id="class 22: numeric out of range",
        ),
        pytest.param(
            asyncpg.exceptions.InvalidTextRepresentationError("invalid input syntax"),
            INVALID,
            id="class 22: invalid text representation",
        ),
        pytest.param(
            asyncpg_base.DataError("invalid input for query argument $1: 2**63"),
            INVALID,
            id="asyncpg cannot encode an argument",
        ),
        pytest.param(NotFoundError("name: gone"), grpc.StatusCode.NOT_FOUND, id="domain error"),
        pytest.param(ValueError("bug"), INTERNAL, id="a bug stays INTERNAL"),
    ],
)
def test_status_code(exc: BaseException, want: grpc.StatusCode) -> None:
    assert _status_code(exc)[0] == want
