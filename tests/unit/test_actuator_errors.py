"""Kubernetes error classification (SPEC §6): tables, whole results."""

from __future__ import annotations

import pytest

from actuator.errors import ERROR_CLASSES, classify, classify_kubernetes_error
from xmc.kube import KubeError, KubeFailure
from xmc.retry import ErrorClass

F = KubeFailure


@pytest.mark.parametrize(
    ("failure", "retry_after", "expected"),
    [
        pytest.param(F.NO_RESPONSE, None, ErrorClass("UNAVAILABLE", False), id="no response"),
        pytest.param(F.NOT_FOUND, None, ErrorClass("NOT_FOUND", True), id="not found"),
        pytest.param(F.CONFLICT, None, ErrorClass("FAILED_PRECONDITION", True), id="uid conflict"),
        pytest.param(
            F.ALREADY_EXISTS, None, ErrorClass("ALREADY_EXISTS", True), id="already exists"
        ),
        pytest.param(F.EXPIRED, None, ErrorClass("ABORTED", False), id="expired: re-read"),
        pytest.param(F.INVALID, None, ErrorClass("INVALID_ARGUMENT", True), id="invalid"),
        pytest.param(F.UNAUTHORIZED, None, ErrorClass("UNAUTHENTICATED", True), id="unauthorized"),
        pytest.param(F.FORBIDDEN, None, ErrorClass("PERMISSION_DENIED", True), id="forbidden"),
        pytest.param(F.TIMEOUT, None, ErrorClass("DEADLINE_EXCEEDED", False), id="408"),
        pytest.param(
            F.THROTTLED, 3.0, ErrorClass("UNAVAILABLE", False, 3.0), id="throttled, retry-after"
        ),
        pytest.param(F.SERVER, None, ErrorClass("UNAVAILABLE", False), id="server"),
        pytest.param(F.CLIENT, None, ErrorClass("INVALID_ARGUMENT", True), id="other 4xx"),
        pytest.param(F.UNEXPECTED, None, ErrorClass("UNKNOWN", False), id="unexpected"),
        pytest.param(
            F.FORBIDDEN,
            5.0,
            ErrorClass("PERMISSION_DENIED", True),
            id="permanent drops retry-after",
        ),
    ],
)
def test_classify_kubernetes_error(
    failure: KubeFailure, retry_after: float | None, expected: ErrorClass
) -> None:
    assert classify_kubernetes_error(failure, retry_after=retry_after) == expected


def test_every_failure_has_an_error_class() -> None:
    assert set(ERROR_CLASSES) == set(KubeFailure)


@pytest.mark.parametrize(
    ("status", "reason", "retry_after", "expected"),
    [
        pytest.param(400, "BadRequest", None, ErrorClass("INVALID_ARGUMENT", True), id="400"),
        pytest.param(422, "Invalid", None, ErrorClass("INVALID_ARGUMENT", True), id="422"),
        pytest.param(401, "Unauthorized", None, ErrorClass("UNAUTHENTICATED", True), id="401"),
        pytest.param(403, "Forbidden", None, ErrorClass("PERMISSION_DENIED", True), id="403"),
        pytest.param(404, "NotFound", None, ErrorClass("NOT_FOUND", True), id="404"),
        pytest.param(
            409, "Conflict", None, ErrorClass("FAILED_PRECONDITION", True), id="409 uid conflict"
        ),
        pytest.param(
            409, None, None, ErrorClass("FAILED_PRECONDITION", True), id="409 without a reason"
        ),
        pytest.param(
            409,
            "AlreadyExists",
            None,
            ErrorClass("ALREADY_EXISTS", True),
            id="409 AlreadyExists for the duplicate check",
        ),
        pytest.param(
            413, "RequestEntityTooLarge", None, ErrorClass("INVALID_ARGUMENT", True), id="other 4xx"
        ),
        pytest.param(
            408, "Timeout", None, ErrorClass("DEADLINE_EXCEEDED", False), id="408 request timeout"
        ),
        pytest.param(410, "Expired", None, ErrorClass("ABORTED", False), id="410 gone: re-read"),
        pytest.param(
            429,
            "TooManyRequests",
            3.0,
            ErrorClass("UNAVAILABLE", False, 3.0),
            id="429 with retry-after",
        ),
        pytest.param(500, "InternalError", None, ErrorClass("UNAVAILABLE", False), id="500"),
        pytest.param(
            503, "ServiceUnavailable", 1.0, ErrorClass("UNAVAILABLE", False, 1.0), id="503"
        ),
        pytest.param(504, "Timeout", None, ErrorClass("UNAVAILABLE", False), id="504"),
        pytest.param(None, None, None, ErrorClass("UNAVAILABLE", False), id="connection lost"),
        pytest.param(0, None, None, ErrorClass("UNAVAILABLE", False), id="status 0: no response"),
        pytest.param(302, None, None, ErrorClass("UNKNOWN", False), id="unexpected redirect"),
    ],
)
def test_a_kube_error_is_classified_from_its_answer(
    status: int | None, reason: str | None, retry_after: float | None, expected: ErrorClass
) -> None:
    """The composition the handlers use: status and reason → KubeFailure → ErrorClass."""
    assert classify(KubeError(status, reason, "message", retry_after)) == expected
