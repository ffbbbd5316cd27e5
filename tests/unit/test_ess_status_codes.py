"""The ESS's one error classification (services/ess/interceptor.py): a Postgres outage
is UNAVAILABLE (callers retry), never INTERNAL (callers give up)."""

from __future__ import annotations

import asyncpg
import grpc
import pytest

from ess.interceptor import _status_code
from xmc.errors import NotFoundError

UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


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
        pytest.param(NotFoundError("name: gone"), grpc.StatusCode.NOT_FOUND, id="domain error"),
        pytest.param(ValueError("bug"), grpc.StatusCode.INTERNAL, id="a bug stays INTERNAL"),
    ],
)
def test_status_code(exc: BaseException, want: grpc.StatusCode) -> None:
    assert _status_code(exc)[0] == want
