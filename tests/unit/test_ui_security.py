"""The dashboard's refusals as tables (pure): which writes count as sent by another site,
which REST writes lack the JSON content type, and which request bodies are too deep or
hold numbers no field can take."""

from __future__ import annotations

import pytest

from ui.security import cross_site_refusal, json_content_type_refusal
from ui.transcode import MAX_JSON_DEPTH, RequestError, decode_json, json_depth

OWN = "http://127.0.0.1:8080"

#: (case, method, Origin, Sec-Fetch-Site, refused?)
ORIGIN_CASES: list[tuple[str, str, str | None, str | None, bool]] = [
    # Reads pass whoever sends them: they change nothing and the browser keeps the answer.
    ("get-cross-site", "GET", "https://evil.example", "cross-site", False),
    ("head-cross-site", "HEAD", "https://evil.example", "cross-site", False),
    ("options", "OPTIONS", "https://evil.example", "cross-site", False),
    # Non-browser clients (curl, scripts) send neither header.
    ("curl-post", "POST", None, None, False),
    ("curl-delete", "DELETE", None, None, False),
    ("curl-patch", "PATCH", None, None, False),
    # The dashboard's own forms and fetches.
    ("same-origin", "POST", OWN, "same-origin", False),
    ("same-origin-no-fetch-metadata", "POST", OWN, None, False),
    ("same-origin-upper-case", "post", "HTTP://127.0.0.1:8080", "Same-Origin", False),
    # Behind a TLS-terminating proxy this server sees http; the browser knows better.
    ("tls-proxy", "POST", "https://127.0.0.1:8080", "same-origin", False),
    ("user-typed", "POST", None, "none", False),
    # Another site, however it says so.
    ("cross-site", "POST", "https://evil.example", "cross-site", True),
    ("cross-site-no-origin", "POST", None, "cross-site", True),
    ("cross-site-no-fetch-metadata", "POST", "https://evil.example", None, True),
    ("same-site-subdomain", "POST", "http://evil.127.0.0.1:8080", "same-site", True),
    ("same-site-no-origin", "PUT", None, "same-site", True),
    ("other-port", "POST", "http://127.0.0.1:9999", None, True),
    ("host-only-match", "POST", "127.0.0.1:8080", None, True),
    ("scheme-differs", "POST", "https://127.0.0.1:8080", None, True),
    ("scheme-differs-fetch-none", "POST", "https://127.0.0.1:8080", "none", True),
    ("null-origin", "POST", "null", None, True),
    ("null-origin-cross-site", "POST", "null", "cross-site", True),
    ("prefix-of-origin", "POST", "http://127.0.0.1:8080.evil.example", None, True),
    ("delete-cross-site", "DELETE", "https://evil.example", "cross-site", True),
    ("patch-cross-site", "PATCH", "https://evil.example", "cross-site", True),
]


@pytest.mark.parametrize(
    ("case", "method", "origin", "fetch_site", "refused"),
    ORIGIN_CASES,
    ids=[c[0] for c in ORIGIN_CASES],
)
def test_cross_site_refusal(
    case: str, method: str, origin: str | None, fetch_site: str | None, refused: bool
) -> None:
    reason = cross_site_refusal(method, origin, fetch_site, OWN)
    assert (reason is not None) == refused, reason
    if reason is not None:
        assert "another site" in reason


@pytest.mark.parametrize(
    ("method", "content_type", "refused"),
    [
        ("GET", None, False),
        ("GET", "text/plain", False),
        ("POST", "application/json", False),
        ("POST", "application/json; charset=utf-8", False),
        ("PATCH", "Application/JSON;charset=UTF-8", False),
        ("DELETE", "application/json", False),
        ("POST", None, True),
        ("DELETE", None, True),
        ("POST", "text/plain", True),
        ("POST", "text/plain; charset=UTF-8", True),
        ("POST", "application/x-www-form-urlencoded", True),
        ("POST", "multipart/form-data; boundary=x", True),
        ("POST", "application/jsonx", True),
        ("PUT", "application/json-seq", True),
    ],
)
def test_rest_writes_need_json(method: str, content_type: str | None, refused: bool) -> None:
    reason = json_content_type_refusal(method, content_type)
    assert (reason is not None) == refused
    if reason is not None:
        assert "Content-Type: application/json" in reason


@pytest.mark.parametrize(
    ("raw", "depth"),
    [
        (b"", 0),
        (b"1", 0),
        (b"{}", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'{"a": "[[[[{{{{"}', 1),
        (b'{"a": "\\"[[[["}', 1),  # an escaped quote does not end the string
        (b'[{"\\\\": "["}]', 2),  # nor does an escaped backslash start one
        (b"[]" * 1000, 1),
        (b"[" * 200_000 + b"]" * 200_000, 200_000),
    ],
    ids=lambda value: str(value)[:24] if isinstance(value, bytes) else None,
)
def test_json_depth(raw: bytes, depth: int) -> None:
    assert json_depth(raw) == depth


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b'{"priority": 1e400}', "1e400 is out of range"),
        (b'{"priority": -1e400}', "-1e400 is out of range"),
        (b'{"priority": NaN}', "NaN is not a JSON value"),
        (b'{"priority": Infinity}', "Infinity is not a JSON value"),
        (b'{"priority": 1' + b"0" * 5000 + b"}", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nests 100000 levels deep"),
        (b'{"a":' * 200_000 + b"1" + b"}" * 200_000, "nests 200000 levels deep"),
        (b"[" * (MAX_JSON_DEPTH + 1), f"at most {MAX_JSON_DEPTH}"),
        (b"{not json", "not valid JSON"),
        (b'"\xff"', "not valid JSON"),
    ],
    ids=lambda value: str(value)[:24] if isinstance(value, bytes) else None,
)
def test_bodies_no_field_can_take_are_request_errors(raw: bytes, fragment: str) -> None:
    with pytest.raises(RequestError, match="request body") as caught:
        decode_json(raw)
    assert fragment in str(caught.value)


def test_bodies_within_the_limits_decode() -> None:
    deep = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert json_depth(deep) == MAX_JSON_DEPTH
    assert decode_json(deep) is not None
    assert decode_json(b'{"priority": 1.5e300, "n": 12}') == {"priority": 1.5e300, "n": 12}
