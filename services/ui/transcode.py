"""HTTP request ↔ protobuf message, and gRPC status → HTTP error, as pure functions.

A request message is filled in three layers, later ones winning: the JSON body, the query
parameters, the path variables, each in the proto3 JSON mapping (``json_format`` does the
type conversions, so a query ``pageSize=5`` and a body ``{"pageSize": 5}`` are parsed by the
same code). Unknown fields are errors, never silently dropped: a typo in a filter name
must not list everything.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from itertools import accumulate, count
from operator import sub
from typing import Any, Final

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message
from google.rpc import (
    error_details_pb2,  # noqa: F401  # RetryInfo etc. in details_json
    status_pb2,
)

from ui.http_rules import HttpRoute

#: gRPC status → HTTP status, as google.rpc.Code documents it.
HTTP_STATUS: Final[Mapping[grpc.StatusCode, int]] = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400,
    grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400,
    grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500,
    grpc.StatusCode.UNAUTHENTICATED: 401,
}
#: Message types whose JSON form is one string or scalar, so a query parameter can set them.
SCALAR_MESSAGES: Final = frozenset(
    f"google.protobuf.{name}"
    for name in (
        "Timestamp",
        "Duration",
        "FieldMask",
        *(f"{kind}Value" for kind in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32")),
        *(f"{kind}Value" for kind in ("Bool", "String", "Bytes")),
    )
)
_BOOLS: Final = {"true": True, "1": True, "false": False, "0": False}
#: The media type of a server-streaming route's answer (``ui.rest``; the OpenAPI document).
NDJSON: Final = "application/x-ndjson"
#: The trailer a server puts a serialized google.rpc.Status in.
DETAILS_KEY: Final = "grpc-status-details-bin"
#: The deepest nesting of arrays and objects a request body may have. The API's deepest
#: message (a work unit's job spec) is about 8 levels; Python's JSON decoder and
#: json_format both recurse, and fail with RecursionError around 1,000 levels.
MAX_JSON_DEPTH: Final = 64
#: A JSON string, escapes included: what :func:`json_depth` skips, since brackets inside
#: strings do not nest.
_JSON_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
#: Bracket → 2 (opens) or 0 (closes); every other byte is deleted.
_BRACKETS: Final = bytes.maketrans(b"[{]}", b"\x02\x02\x00\x00")
_NOT_BRACKETS: Final = bytes(sorted(set(range(256)) - set(b"[{]}")))


class RequestError(ValueError):
    """A request the REST face refuses with 400; the message names the field or parameter."""


def json_depth(raw: bytes) -> int:
    """How deep arrays and objects nest in ``raw``, counted without parsing it (so without
    recursion, at C speed): strings removed, the brackets left are 2 (open) or 0 (close),
    and the depth after ``k`` brackets is their sum minus ``k``."""
    marks = _JSON_STRING.sub(b"", raw).translate(_BRACKETS, _NOT_BRACKETS)
    return max(map(sub, accumulate(marks), count(1)), default=0)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise RequestError(f"the request body's number {text} is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise RequestError(f"the request body is not valid JSON: {name} is not a JSON value")


def decode_json(raw: bytes) -> Any:
    """A request body as JSON, refusing (:class:`RequestError`, so 400) what the JSON
    grammar allows but no field can hold, and what would crash the decoders further on:
    nesting deeper than :data:`MAX_JSON_DEPTH`, numbers beyond a double (``1e400`` would
    be ``inf``, which an integer or enum field cannot take), Python's ``NaN`` and
    ``Infinity`` extensions, and integers too long to convert."""
    depth = json_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise RequestError(
            f"the request body nests {depth} levels deep; at most {MAX_JSON_DEPTH} are allowed"
        )
    try:
        return json.loads(raw, parse_float=_finite, parse_constant=_no_constant)
    except RequestError:
        raise
    except (ValueError, RecursionError) as error:  # ValueError: JSONDecodeError, UTF-8, int
        raise RequestError(f"the request body is not valid JSON: {error}") from None


def http_status(code: grpc.StatusCode) -> int:
    return HTTP_STATUS.get(code, 500)


def error_body(
    http: int, status: str, message: str, details: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """The error as Google APIs answer it: ``{"error": {code, message, status, details}}``."""
    return {"error": {"code": http, "message": message, "status": status, "details": [*details]}}


def details_json(blob: bytes | None) -> list[dict[str, Any]]:
    """The ``details`` of a ``grpc-status-details-bin`` trailer; a type this process does not
    know is shown by its type URL alone, a malformed trailer as no details."""
    if not blob:
        return []
    try:
        status = status_pb2.Status.FromString(blob)
    except DecodeError:
        return []
    out: list[dict[str, Any]] = []
    for detail in status.details:
        try:
            out.append(json_format.MessageToDict(detail))
        except (TypeError, KeyError):
            out.append({"@type": detail.type_url})
    return out


def bearer_metadata(authorization: str | None) -> tuple[tuple[str, str], ...]:
    """The caller's ``Authorization: Bearer ...`` as gRPC metadata; any other scheme, and
    every other header, stays here (the ESS authorizes the caller, not this service)."""
    if not authorization:
        return ()
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return ()
    return (("authorization", f"Bearer {token.strip()}"),)


def _field_named(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    """By proto name (``page_size``) or JSON name (``pageSize``), as grpc-gateway accepts."""
    fd = descriptor.fields_by_name.get(name)
    if fd is not None:
        return fd
    return next((f for f in descriptor.fields if f.json_name == name), None)


def _leaf_value(fd: FieldDescriptor, key: str, raw: str) -> Any:
    """A query value as its JSON value: json_format converts strings to every scalar except
    bool, so only bools are converted here."""
    is_bool = fd.type == FieldDescriptor.TYPE_BOOL or (
        fd.message_type is not None and fd.message_type.full_name == "google.protobuf.BoolValue"
    )
    if not is_bool:
        return raw
    if raw.lower() not in _BOOLS:
        raise RequestError(f"query parameter {key}: {raw!r} is not true or false")
    return _BOOLS[raw.lower()]


def _query_field(descriptor: Descriptor, key: str) -> tuple[list[str], FieldDescriptor]:
    """The proto-name path and leaf field of query key ``a.b`` (each part either name)."""
    path: list[str] = []
    current: Descriptor | None = descriptor
    fd: FieldDescriptor | None = None
    for part in key.split("."):
        if current is None:
            raise RequestError(f"query parameter {key}: {'.'.join(path)} has no subfields")
        fd = _field_named(current, part)
        if fd is None:
            raise RequestError(f"unknown query parameter {key}: {current.full_name} has no {part}")
        path.append(fd.name)
        message = fd.message_type
        if message is not None and message.full_name not in SCALAR_MESSAGES and fd.is_repeated:
            kind = "a map" if message.GetOptions().map_entry else "a list of messages"
            raise RequestError(f"query parameter {key}: {fd.name} is {kind}; use a JSON body")
        scalar = message is None or message.full_name in SCALAR_MESSAGES
        current = None if scalar else message
    assert fd is not None  # a split always has one part
    if current is not None:
        raise RequestError(f"query parameter {key}: set its subfields ({key}.<field>) instead")
    return path, fd


def _json_names(descriptor: Descriptor, path: Sequence[str]) -> list[str]:
    """Proto-name path → lowerCamelCase path, the names json_format's errors then use."""
    names: list[str] = []
    current: Descriptor | None = descriptor
    for part in path:
        assert current is not None
        fd = current.fields_by_name[part]
        names.append(fd.json_name)
        current = fd.message_type
    return names


def _covered(path: Sequence[str], excluded: Iterable[str]) -> str | None:
    dotted = ".".join(path)
    for taken in excluded:
        if dotted == taken or dotted.startswith(f"{taken}.") or taken.startswith(f"{dotted}."):
            return taken
    return None


def query_json(
    descriptor: Descriptor, pairs: Iterable[tuple[str, str]], excluded: Iterable[str] = ()
) -> dict[str, Any]:
    """Query parameters (``a.b=v``, a repeated field by repetition) as a nested JSON dict by
    JSON field names. ``excluded`` are (proto-name) field paths the path or the body sets."""
    grouped: dict[str, list[str]] = {}
    for key, value in pairs:
        grouped.setdefault(key, []).append(value)
    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, values in grouped.items():
        path, fd = _query_field(descriptor, key)
        json_path = _json_names(descriptor, path)
        taken = _covered(path, excluded)
        if taken is not None:
            raise RequestError(f"query parameter {key}: {taken} is set by the path or body")
        dotted = ".".join(path)
        if dotted in seen:
            raise RequestError(f"query parameters {seen[dotted]} and {key} name one field")
        seen[dotted] = key
        if not fd.is_repeated and len(values) > 1:
            raise RequestError(f"query parameter {key} given {len(values)} times")
        leaves = [_leaf_value(fd, key, value) for value in values]
        node = out
        for part in json_path[:-1]:
            node = node.setdefault(part, {})
        node[json_path[-1]] = leaves if fd.is_repeated else leaves[0]
    return out


def path_json(bindings: Mapping[str, str]) -> dict[str, Any]:
    """Path variables (``experiment.name``) as a nested JSON dict."""
    out: dict[str, Any] = {}
    for dotted, value in bindings.items():
        *parents, leaf = dotted.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def body_json(route: HttpRoute, payload: Any) -> dict[str, Any]:
    """The decoded JSON body as the request's JSON: all of it (``body: "*"``) or one field."""
    if not route.body:
        return {}
    if route.body == "*":
        if not isinstance(payload, dict):
            raise RequestError("the request body must be a JSON object")
        return payload
    node: dict[str, Any] = {}
    out = node
    *parents, leaf = route.body.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = payload
    return out


def build_request(
    route: HttpRoute,
    bindings: Mapping[str, str],
    payload: Any,
    query: Iterable[tuple[str, str]],
) -> Message:
    """The request message of ``route``; :class:`RequestError` (or json_format's
    ``ParseError``, which names the field) when the request does not fit it."""
    message = message_factory.GetMessageClass(route.input_type)()
    excluded = [*bindings]
    if route.body:
        excluded.append(route.body)
    pairs = list(query)
    if route.body == "*" and pairs:
        raise RequestError(
            f"query parameter {pairs[0][0]}: {route.http_method} with a body takes no parameters"
        )
    for layer in (body_json(route, payload), query_json(route.input_type, pairs, excluded)):
        json_format.ParseDict(layer, message, ignore_unknown_fields=False)
    json_format.ParseDict(path_json(bindings), message, ignore_unknown_fields=False)
    return message


def response_json(route: HttpRoute, response: Message) -> Any:
    """The response in the proto3 JSON mapping (lowerCamelCase names, as grpc-gateway and
    ESF answer), or its ``response_body`` field alone."""
    if route.response_body:
        fd = route.output_type.fields_by_name[route.response_body]
        whole = json_format.MessageToDict(response, always_print_fields_with_no_presence=True)
        return whole.get(fd.json_name)
    return json_format.MessageToDict(response, preserving_proto_field_name=False)
