"""The OpenAPI 3.1 document of the REST face, generated from the service descriptors and the
very routes the transcoder serves (:func:`ui.http_rules.routes_from_service`), so it cannot
describe a path, a parameter or a field the REST face does not have (docs/rest.md).

What the transcoder accepts, and so what the document says:

- **Paths.** A rule variable spanning segments (``{name=experiments/*/workUnits/*}``) is
  matched segment by segment, so each ``*`` is a path parameter of its own, named after the
  literal before it (``experiments/{experiment}/workUnits/{workUnit}``); the field gets the
  segments joined by ``/``. A one-segment value may be any non-empty percent-encoded text;
  an encoded ``/`` (``%2F``) stays encoded in the field, so it cannot pose as a separator.
  A custom verb stays on the last segment (``{workUnit}:stop``).
- **Query parameters** for every scalar field the path and the body do not set, nested
  fields dotted (``workUnit.tags``), repeated fields by repetition; maps and repeated
  messages only in a body. A route whose body is the whole request takes none.
- **Bodies** per the rule's ``body``: the whole request less the fields the path sets, or
  one field's value. Writes need ``Content-Type: application/json`` (415 otherwise).
- **Answers**: the response message (or its ``response_body`` field) in the proto3 JSON
  mapping (:mod:`ui.openapi_schema`); a server-streaming method's as newline-delimited JSON;
  every error as the Google API error object, under each HTTP status the transcoder maps a
  gRPC status to, plus its own 413 and 415.
- **Security**: the caller's bearer token, which the REST face hands to the ESS.

Pure: descriptors in, a JSON-able dict out; :func:`render` is the checked-in text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final

from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor

from ui.http_rules import HttpRoute, PathTemplate, field_at, routes_from_service
from ui.openapi_schema import WELL_KNOWN, Schema, SchemaSet, ref
from ui.transcode import HTTP_STATUS, NDJSON, SCALAR_MESSAGES

OPENAPI_VERSION: Final = "3.1.0"
TITLE: Final = "XMC REST/JSON face"
#: The document's own version: the API version of its paths.
API_VERSION: Final = "v1"
ERROR: Final = "Error"
BEARER: Final = "bearer"
#: Errors the REST face raises itself, beside those mapped from the ESS's gRPC status.
_LOCAL_ERRORS: Final = {
    413: "The request body is over 1 MiB.",
    415: "A write without `Content-Type: application/json` (every write needs it, even "
    "one with no body).",
}
_WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_STREAM: Final = (
    'The stream, as newline-delimited JSON: a line `{"result": …}` for each message and,'
    " if the stream fails after it began, a last line with the error object (a failure"
    " before the first message is an error answer of its own status). The schema is one"
    " line's. A request that accepts `text/event-stream` gets Server-Sent Events instead:"
    " `data:` one message, `id:` its cursor where it has one (`Last-Event-ID` resumes),"
    " `event:` the kind of message, and a last `event: error` if the stream fails."
)
#: How a path parameter's value travels (``ui.http_rules.split_path``, ``_decode``).
_SEGMENT: Final = (
    ", percent-encoded: `/` and `:` too (an unencoded `:` starts a custom verb, an encoded"
    " `/` stays `%2F` in the field)."
)


def singular(literal: str) -> str:
    """``workUnits`` → ``workUnit``: the name of the segment a collection's ``*`` stands for."""
    return literal[:-1] if literal.endswith("s") and len(literal) > 1 else literal


def path_parameters(template: PathTemplate) -> tuple[str, list[tuple[str, str, int]]]:
    """The OpenAPI path of ``template`` and its parameters as (name, field path, segment
    index) in order.

    A variable's ``*`` segments become one parameter each, named after the literal segment
    before it (``experiments/*`` → ``{experiment}``); a variable that is one ``*`` alone, or
    a ``*`` after another, takes its field's name; a ``*`` outside any variable binds
    nothing (field ""). Names are made unique with a number."""
    owner = {i: v for v in template.variables for i in range(v.start, v.end)}
    parts: list[str] = []
    params: list[tuple[str, str, int]] = []
    for i, segment in enumerate(template.segments):
        if segment not in ("*", "**"):
            parts.append(segment)
            continue
        variable = owner.get(i)
        field = variable.field_path if variable is not None else ""
        alone = variable is not None and variable.end - variable.start == 1
        before = template.segments[i - 1] if i else "*"
        base = field if alone or before in ("*", "**") else singular(before)
        stem = base.replace(".", "_") or "segment"
        name, n = stem, 1
        while name in (p[0] for p in params):
            n += 1
            name = f"{stem}{n}"
        params.append((name, field, i))
        parts.append(f"{{{name}}}")
    verb = f":{template.verb}" if template.verb else ""
    return "/" + "/".join(parts) + verb, params


def segment_description(segment: str, field: str) -> str:
    """A path parameter's description: what it is part of and how it travels."""
    if segment == "**":  # OpenAPI has no parameter spanning segments: say so
        return f"The rest of the path, one or more segments, the end of `{field or 'no field'}`."
    return (f"One segment of `{field}`" if field else "Any one segment") + _SEGMENT


def _field_pattern(template: PathTemplate, field: str, names: dict[int, str]) -> str:
    """What a bound field receives, e.g. ``experiments/{experiment}``."""
    variable = next(v for v in template.variables if v.field_path == field)
    return "/".join(
        f"{{{names[i]}}}" if i in names else template.segments[i]
        for i in range(variable.start, variable.end)
    )


def _taken(dotted: str, excluded: Sequence[str]) -> bool:
    """The field at ``dotted`` is set by the path or body (itself or an enclosing message)."""
    return any(dotted == taken or dotted.startswith(f"{taken}.") for taken in excluded)


def query_fields(
    descriptor: Descriptor, excluded: Sequence[str], prefix: tuple[FieldDescriptor, ...] = ()
) -> Iterator[tuple[FieldDescriptor, ...]]:
    """Every field a query parameter can set, as the path of fields to it: scalars,
    repeated scalars and the well-known types with a scalar JSON form, through singular
    messages. A recursive message is entered once (the transcoder takes ``parent.parent.x``
    too; the document cannot list every depth), ``Any`` and ``Struct`` not at all (their
    JSON form is no object of their fields)."""
    for fd in descriptor.fields:
        path = (*prefix, fd)
        if _taken(".".join(f.name for f in path), excluded):
            continue
        message = fd.message_type
        if message is None or message.full_name in SCALAR_MESSAGES:
            yield path
        elif fd.is_repeated or message.full_name in WELL_KNOWN:
            continue
        elif message is not descriptor and message not in (f.containing_type for f in prefix):
            yield from query_fields(message, excluded, path)


def _query_parameter(schemas: SchemaSet, path: tuple[FieldDescriptor, ...]) -> dict[str, Any]:
    name = ".".join(fd.json_name for fd in path)
    schema = schemas.field(path[-1])
    out: dict[str, Any] = {"name": name, "in": "query", "required": False, "schema": schema}
    if path[-1].is_repeated:
        out["description"] = f"Repeat the parameter for each value: `{name}=a&{name}=b`."
    return out


def error_statuses() -> dict[int, list[str]]:
    """HTTP error status → the gRPC status names the transcoder answers with it
    (:data:`ui.transcode.HTTP_STATUS`)."""
    out: dict[int, list[str]] = {}
    for code, http in HTTP_STATUS.items():
        if http >= 400:
            out.setdefault(http, []).append(code.name)
    return dict(sorted(out.items()))


def error_schema() -> Schema:
    """``ui.transcode.error_body``: the Google API error object."""
    names = sorted({code.name for code in HTTP_STATUS})
    inner = {
        "type": "object",
        "required": ["code", "message", "status", "details"],
        "additionalProperties": False,
        "properties": {
            "code": {"type": "integer", "description": "The HTTP status."},
            "message": {"type": "string", "description": "What is wrong; names the field."},
            "status": {"type": "string", "enum": names, "description": "google.rpc.Code."},
            "details": {"type": "array", "items": dict(WELL_KNOWN["google.protobuf.Any"])},
        },
    }
    return {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {"error": inner},
    }


def error_responses() -> dict[str, Any]:
    """``components.responses``: one per error status, each the error object."""
    content = {"application/json": {"schema": ref(ERROR)}}
    out: dict[str, Any] = {}
    for http, codes in error_statuses().items():
        out[str(http)] = {"description": f"gRPC {', '.join(codes)}.", "content": content}
    for http, text in _LOCAL_ERRORS.items():
        out[str(http)] = {"description": text, "content": content}
    return dict(sorted(out.items()))


def _request_body(schemas: SchemaSet, route: HttpRoute, bound: Sequence[str]) -> dict[str, Any]:
    if route.body == "*":
        schema = schemas.object(route.input_type, without=frozenset(bound))
    else:
        schema = schemas.field(field_at(route.input_type, route.body))
    return {"required": False, "content": {"application/json": {"schema": schema}}}


def _ok(schemas: SchemaSet, route: HttpRoute) -> dict[str, Any]:
    if route.server_streaming:  # OpenAPI 3.1 has no schema of a sequence: one line's
        line = {
            "oneOf": [
                {
                    "type": "object",
                    "required": ["result"],
                    "additionalProperties": False,
                    "properties": {"result": schemas.message(route.output_type)},
                },
                ref(ERROR),
            ]
        }
        events = {"type": "string", "description": "Server-Sent Events (docs/watch.md)."}
        return {
            "description": _STREAM,
            "content": {NDJSON: {"schema": line}, "text/event-stream": {"schema": events}},
        }
    if route.response_body:
        schema = schemas.field(field_at(route.output_type, route.response_body))
    else:
        schema = schemas.message(route.output_type)
    return {"description": "OK.", "content": {"application/json": {"schema": schema}}}


def operation(
    schemas: SchemaSet, route: HttpRoute, *, operation_id: str, tag: str
) -> dict[str, Any]:
    """One route as an OpenAPI operation."""
    _path, params = path_parameters(route.template)
    names = {i: name for name, _field, i in params}
    fields = sorted({field for _name, field, _i in params if field})
    lines = [f"Calls `{route.full_method.lstrip('/')}`."]
    lines += [f"`{f}` is `{_field_pattern(route.template, f, names)}`." for f in fields]
    parameters: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "minLength": 1},
            "description": segment_description(route.template.segments[i], field),
        }
        for name, field, i in params
    ]
    excluded = [*fields, *([route.body] if route.body else [])]
    if route.body != "*":
        parameters += [
            _query_parameter(schemas, path) for path in query_fields(route.input_type, excluded)
        ]
    out: dict[str, Any] = {
        "operationId": operation_id,
        "summary": route.rpc,
        "description": " ".join(lines),
        "tags": [tag],
        "parameters": parameters,
    }
    if route.body:
        out["requestBody"] = _request_body(schemas, route, fields)
    errors = [str(http) for http in error_statuses()]
    if route.http_method in _WRITES:
        errors += [str(http) for http in _LOCAL_ERRORS]
    else:
        errors.append("413")  # a GET may carry a body too; reading one over 1 MiB fails
    responses = {"200": _ok(schemas, route)}
    responses |= {http: {"$ref": f"#/components/responses/{http}"} for http in sorted(errors)}
    out["responses"] = responses
    return out


def openapi_document(services: Sequence[ServiceDescriptor]) -> dict[str, Any]:
    """The document of every route of ``services``; where two routes share a path and
    method the first wins, as it does in :func:`ui.http_rules.resolve`."""
    schemas = SchemaSet()
    paths: dict[str, dict[str, Any]] = {}
    for service in services:
        counts: dict[str, int] = {}
        for route in routes_from_service(service):
            path, _params = path_parameters(route.template)
            item = paths.setdefault(path, {})
            method = route.http_method.lower()
            if method in item:
                continue
            counts[route.rpc] = counts.get(route.rpc, 0) + 1
            suffix = f"_{counts[route.rpc]}" if counts[route.rpc] > 1 else ""
            item[method] = operation(
                schemas,
                route,
                operation_id=f"{service.name}.{route.rpc}{suffix}",
                tag=service.full_name,
            )
    components = {
        "schemas": {ERROR: error_schema(), **dict(sorted(schemas.components.items()))},
        "responses": error_responses(),
        "securitySchemes": {
            BEARER: {
                "type": "http",
                "scheme": "bearer",
                "description": "Passed to the ESS, which authenticates and authorizes the "
                "caller; an ESS with authentication off takes requests without it.",
            }
        },
    }
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": TITLE,
            "version": API_VERSION,
            "description": "The ESS's public RPCs as JSON over HTTP, transcoded by xmc-ui from "
            "their google.api.http rules (docs/rest.md).",
        },
        "tags": [{"name": service.full_name} for service in services],
        "security": [{BEARER: []}],
        "paths": paths,
        "components": components,
    }


def render(document: dict[str, Any]) -> str:
    """The document as the text checked in to docs/openapi.json and served."""
    return json.dumps(document, indent=2, ensure_ascii=False) + "\n"
