"""The pure half of the Kubernetes boundary (``xmc.kube``): the one classification of a
failed call, the one Status-body parser, the one response check, resource paths, and the
watcher's mapping from the classification. Tables, whole results."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.watch import Failure, classify
from xmc.errors import InvalidArgumentError
from xmc.kube import (
    JOBSETS,
    LEASES,
    PODS,
    WORKLOADS,
    KubeError,
    KubeFailure,
    Resource,
    classify_failure,
    error_from_answer,
    parse_retry_after,
    pending_workloads_path,
    read_answer,
)
from xmc.settings import load_settings

F = KubeFailure


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        pytest.param(None, None, F.NO_RESPONSE, id="no answer at all"),
        pytest.param(0, None, F.NO_RESPONSE, id="kubernetes-asyncio's 0: nothing was sent"),
        pytest.param(404, "NotFound", F.NOT_FOUND, id="404"),
        pytest.param(409, "Conflict", F.CONFLICT, id="409 precondition"),
        pytest.param(409, None, F.CONFLICT, id="409 without a reason"),
        pytest.param(409, "AlreadyExists", F.ALREADY_EXISTS, id="409 AlreadyExists"),
        pytest.param(404, "AlreadyExists", F.NOT_FOUND, id="the reason only splits 409"),
        pytest.param(410, "Expired", F.EXPIRED, id="410"),
        pytest.param(400, "BadRequest", F.INVALID, id="400"),
        pytest.param(422, "Invalid", F.INVALID, id="422"),
        pytest.param(401, "Unauthorized", F.UNAUTHORIZED, id="401"),
        pytest.param(403, "Forbidden", F.FORBIDDEN, id="403"),
        pytest.param(408, "Timeout", F.TIMEOUT, id="408"),
        pytest.param(429, "TooManyRequests", F.THROTTLED, id="429"),
        pytest.param(500, "InternalError", F.SERVER, id="500"),
        pytest.param(503, "ServiceUnavailable", F.SERVER, id="503"),
        pytest.param(504, "Timeout", F.SERVER, id="504 is the server's, not 408"),
        pytest.param(405, "MethodNotAllowed", F.CLIENT, id="other 4xx"),
        pytest.param(413, None, F.CLIENT, id="413"),
        pytest.param(302, None, F.UNEXPECTED, id="a redirect"),
        pytest.param(200, None, F.UNEXPECTED, id="a success that could not be used"),
        pytest.param(600, None, F.UNEXPECTED, id="beyond HTTP"),
    ],
)
def test_classify_failure(status: int | None, reason: str | None, expected: KubeFailure) -> None:
    assert classify_failure(status, reason) is expected
    assert KubeError(status, reason, "message").failure is expected


def test_kube_error_reads_as_its_answer() -> None:
    assert str(KubeError(409, "AlreadyExists", "jobsets x exists")) == (
        "409 AlreadyExists: jobsets x exists"
    )
    assert str(KubeError.no_response("timed out")) == "no response: timed out"
    assert KubeError(0, None, "not sent").status is None


def _status(code: int, reason: str, message: str = "m", **details: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "code": code, "reason": reason, "message": message}
    if details:
        body["details"] = details
    return body


@pytest.mark.parametrize(
    ("status", "body", "header", "expected"),
    [
        pytest.param(
            409,
            json.dumps(_status(409, "AlreadyExists", "exists")).encode(),
            None,
            (409, "AlreadyExists", "exists", None, F.ALREADY_EXISTS),
            id="a Status body as bytes",
        ),
        pytest.param(
            429,
            json.dumps(_status(429, "TooManyRequests", retryAfterSeconds=2)),
            "7",
            (429, "TooManyRequests", "m", 7.0, F.THROTTLED),
            id="the Retry-After header wins over the body",
        ),
        pytest.param(
            503,
            _status(503, "ServiceUnavailable", retryAfterSeconds=2),
            None,
            (503, "ServiceUnavailable", "m", 2.0, F.SERVER),
            id="details.retryAfterSeconds as the fallback",
        ),
        pytest.param(
            503,
            _status(503, "ServiceUnavailable", retryAfterSeconds=True),
            "soon",
            (503, "ServiceUnavailable", "m", None, F.SERVER),
            id="neither usable: no retry-after",
        ),
        pytest.param(
            502,
            b"<html>bad gateway</html>",
            None,
            (502, None, "HTTP 502", None, F.SERVER),
            id="a proxy's HTML",
        ),
        pytest.param(500, b"", None, (500, None, "HTTP 500", None, F.SERVER), id="no body"),
        pytest.param(
            404,
            json.dumps(["not", "an", "object"]),
            None,
            (404, None, "HTTP 404", None, F.NOT_FOUND),
            id="JSON but not an object",
        ),
        pytest.param(
            404,
            _status(404, "NotFound") | {"reason": 7},
            None,
            (404, None, "m", None, F.NOT_FOUND),
            id="a reason that is not a string",
        ),
        pytest.param(
            None,
            _status(410, "Expired", "too old resource version"),
            None,
            (410, "Expired", "too old resource version", None, F.EXPIRED),
            id="a watch ERROR event: the code is the body's",
        ),
        pytest.param(
            None, {"message": "?"}, None, (500, None, "?", None, F.SERVER), id="an ERROR, no code"
        ),
    ],
)
def test_error_from_answer(
    status: int | None,
    body: bytes | str | dict[str, Any],
    header: str | None,
    expected: tuple[int, str | None, str, float | None, KubeFailure],
) -> None:
    error = error_from_answer(status, body, header)
    assert (error.status, error.reason, error.message, error.retry_after, error.failure) == (
        expected
    )


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        pytest.param(None, None, id="absent"),
        pytest.param("7", 7.0, id="seconds"),
        pytest.param(" 2.5 ", 2.5, id="fractional with spaces"),
        pytest.param("-1", None, id="negative"),
        pytest.param("Wed, 21 Oct 2015 07:28:00 GMT", None, id="HTTP date is ignored"),
        pytest.param("nan", None, id="not a number"),
    ],
)
def test_parse_retry_after(header: str | None, expected: float | None) -> None:
    assert parse_retry_after(header) == expected


def test_read_answer_returns_the_object_of_a_success() -> None:
    assert read_answer(200, b'{"kind": "JobSet"}') == {"kind": "JobSet"}
    assert read_answer(201, b'{"a": 1}') == {"a": 1}
    assert read_answer(200, b"") == {}


@pytest.mark.parametrize(
    ("status", "raw", "expected"),
    [
        pytest.param(200, b"[1, 2]", F.UNEXPECTED, id="a success that is not an object"),
        pytest.param(200, b"<html/>", F.UNEXPECTED, id="a success that is not JSON"),
        pytest.param(404, json.dumps(_status(404, "NotFound")).encode(), F.NOT_FOUND, id="404"),
        pytest.param(302, b"", F.UNEXPECTED, id="a redirect"),
    ],
)
def test_read_answer_raises_everything_else(status: int, raw: bytes, expected: KubeFailure) -> None:
    with pytest.raises(KubeError) as raised:
        read_answer(status, raw)
    assert raised.value.failure is expected
    assert raised.value.status == status


@pytest.mark.parametrize(
    ("resource", "collection", "api_version"),
    [
        pytest.param(
            JOBSETS,
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/ns/jobsets",
            "jobset.x-k8s.io/v1alpha2",
        ),
        pytest.param(
            WORKLOADS,
            "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads",
            "kueue.x-k8s.io/v1beta2",
        ),
        pytest.param(PODS, "/api/v1/namespaces/ns/pods", "v1", id="the core group"),
        pytest.param(
            LEASES,
            "/apis/coordination.k8s.io/v1/namespaces/ns/leases",
            "coordination.k8s.io/v1",
        ),
    ],
)
def test_resource_paths(resource: Resource, collection: str, api_version: str) -> None:
    assert resource.collection("ns") == collection
    assert resource.item("ns", "a") == f"{collection}/a"
    assert resource.api_version == api_version


def test_names_are_quoted_into_paths() -> None:
    assert PODS.item("n s", "a/b") == "/api/v1/namespaces/n%20s/pods/a%2Fb"
    assert pending_workloads_path("default", "team a") == (
        "/apis/visibility.kueue.x-k8s.io/v1beta1/namespaces/default/localqueues/team%20a"
        "/pendingworkloads"
    )


def test_resources_are_values() -> None:
    assert Resource("jobset.x-k8s.io", "v1alpha2", "jobsets") == JOBSETS
    assert len({JOBSETS, Resource("jobset.x-k8s.io", "v1alpha2", "jobsets")}) == 1


# --- the watcher's mapping -------------------------------------------------------------

#: (status, reason, what the watcher does): one row per KubeFailure.
WATCHER_CASES = [
    pytest.param(None, None, Failure.RETRY, id="no response: resume"),
    pytest.param(404, "NotFound", Failure.RETRY, id="not found: a CRD being installed"),
    pytest.param(409, "Conflict", Failure.RETRY, id="conflict"),
    pytest.param(409, "AlreadyExists", Failure.RETRY, id="already exists"),
    pytest.param(410, "Expired", Failure.EXPIRED, id="expired: re-list"),
    pytest.param(422, "Invalid", Failure.FATAL, id="invalid: a request never accepted"),
    pytest.param(401, "Unauthorized", Failure.RETRY, id="unauthorized: a token rotating"),
    pytest.param(403, "Forbidden", Failure.RETRY, id="forbidden: RBAC being installed"),
    pytest.param(408, "Timeout", Failure.RETRY, id="408"),
    pytest.param(429, "TooManyRequests", Failure.RETRY, id="throttled"),
    pytest.param(500, "InternalError", Failure.RETRY, id="server"),
    pytest.param(405, "MethodNotAllowed", Failure.RETRY, id="other 4xx"),
    pytest.param(200, None, Failure.RETRY, id="unexpected: a garbled stream"),
]


@pytest.mark.parametrize(("status", "reason", "expected"), WATCHER_CASES)
def test_the_watcher_maps_the_shared_classification(
    status: int | None, reason: str | None, expected: Failure
) -> None:
    assert classify(KubeError(status, reason, "message")) is expected


def _answer(code: int, reason: str, message: str, causes: list[dict[str, str]]) -> dict[str, Any]:
    return {"kind": "Status", "status": "Failure", "code": code, "reason": reason,
            "message": message, "details": {"causes": causes, "retryAfterSeconds": 1}}  # fmt: skip


_TOO_LARGE = "Too large resource version: 900, current: 12"
_CAUSE = {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}

#: (Status body, what the watcher does): "too large resource version" the ways API servers
#: have said it (apiserver storage.NewTooLargeResourceVersionError; client-go reflector.go
#: isTooLargeResourceVersionError), and look-alikes that are not it.
TOO_LARGE_CASES = [
    pytest.param(
        _answer(504, "Timeout", _TOO_LARGE, [_CAUSE]), Failure.TOO_LARGE, id="1.18.6+: the cause"
    ),
    pytest.param(
        _answer(504, "Timeout", _TOO_LARGE, [{"message": "Too large resource version"}]),
        Failure.TOO_LARGE,
        id="1.17-1.18.5: the cause's message",
    ),
    pytest.param(
        _answer(504, "Timeout", _TOO_LARGE, []), Failure.TOO_LARGE, id="before 1.17: the message"
    ),
    pytest.param(
        _answer(504, "Timeout", "request timed out", []),
        Failure.RETRY,
        id="a plain 504 timeout: resume",
    ),
    pytest.param(
        _answer(500, "InternalError", _TOO_LARGE, []),
        Failure.RETRY,
        id="the words without Timeout: not it",
    ),
    pytest.param(
        _answer(500, "InternalError", "x", [_CAUSE]), Failure.TOO_LARGE, id="the cause is enough"
    ),
    pytest.param(
        _answer(410, "Expired", "too old resource version", []),
        Failure.EXPIRED,
        id="410 stays expired",
    ),
]


@pytest.mark.parametrize(("body", "expected"), TOO_LARGE_CASES)
def test_the_watcher_relists_when_the_server_is_behind_its_version(
    body: dict[str, Any], expected: Failure
) -> None:
    as_answer = error_from_answer(body["code"], json.dumps(body).encode())
    as_event = error_from_answer(None, body)  # a watch ERROR event's object
    assert classify(as_answer) is expected
    assert classify(as_event) is expected
    assert as_event.retry_after == 1.0


def test_the_watcher_table_covers_every_failure() -> None:
    def failure(status: object, reason: object) -> KubeFailure:
        assert status is None or isinstance(status, int)
        assert reason is None or isinstance(reason, str)
        return classify_failure(status, reason)

    assert {failure(*case.values[:2]) for case in WATCHER_CASES} == set(KubeFailure)


def test_the_watcher_retries_errors_that_are_not_kubernetes_calls() -> None:
    assert classify(KeyError("metadata")) is Failure.RETRY
    assert classify(ValueError("not JSON")) is Failure.RETRY


# --- the setting -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        pytest.param({}, 30.0, id="default"),
        pytest.param({"XMC_KUBE_REQUEST_TIMEOUT": "2.5"}, 2.5, id="fractional seconds"),
        pytest.param({"XMC_KUBE_REQUEST_TIMEOUT": ""}, 30.0, id="empty is the default"),
    ],
)
def test_kube_request_timeout_setting(env: dict[str, str], expected: float) -> None:
    assert load_settings(env).core.kube_request_timeout == expected


@pytest.mark.parametrize("raw", ["0", "-1", "soon", "nan", "inf"])
def test_kube_request_timeout_must_be_positive_seconds(raw: str) -> None:
    with pytest.raises(InvalidArgumentError, match="XMC_KUBE_REQUEST_TIMEOUT"):
        load_settings({"XMC_KUBE_REQUEST_TIMEOUT": raw})
