"""The ``google.api.http`` rules of a gRPC service as data: path templates, the routes they
give, and which route (if any) an HTTP request names.

Why our own matcher instead of aiohttp's router: the rules' grammar (``{field=a/*/b/*}``
variables spanning segments, a ``:verb`` suffix after the last segment) has no aiohttp
equivalent, and deriving everything from the descriptor keeps the REST face in step with
the protos without one handler per RPC. Everything here is pure: no I/O, no aiohttp.

Grammar (google/api/http.proto)::

    Template = "/" Segments [ Verb ] ;
    Segments = Segment { "/" Segment } ;
    Segment  = "*" | "**" | LITERAL | Variable ;
    Variable = "{" FieldPath [ "=" Segments ] "}" ;
    Verb     = ":" LITERAL ;
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote

from google.api import annotations_pb2, http_pb2  # type: ignore[import-untyped]
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LITERAL = re.compile(r"[^/{}*=:]+")
_ENCODED_SLASH = re.compile("%2F", re.IGNORECASE)
#: HttpRule's pattern oneof cases, in the order the docs list them.
_VERBS = ("get", "put", "post", "delete", "patch")


class RuleError(ValueError):
    """A path template or rule that does not follow google/api/http.proto."""


@dataclass(frozen=True)
class Variable:
    """``{field_path=...}``: the request field bound to segments ``[start, end)``."""

    field_path: str
    start: int
    end: int


@dataclass(frozen=True)
class PathTemplate:
    text: str
    #: Literal text, ``*`` (one segment) or ``**`` (the rest, zero or more segments).
    segments: tuple[str, ...]
    variables: tuple[Variable, ...]
    #: The custom verb after the last ``:``; "" for none.
    verb: str


def _split_verb(text: str) -> tuple[str, str]:
    """``a/{b=c/*}:verb`` → (``a/{b=c/*}``, ``verb``): the last ``:`` outside braces."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        char = text[i]
        if char == "}":
            depth += 1
        elif char == "{":
            depth -= 1
        elif char == ":" and depth == 0:
            verb = text[i + 1 :]
            if not _LITERAL.fullmatch(verb):
                raise RuleError(f"bad verb {verb!r}")
            return text[:i], verb
    return text, ""


def _top_level_pieces(text: str) -> list[str]:
    """Split on ``/`` outside braces."""
    pieces, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "{":
            if depth:
                raise RuleError("nested '{'")
            depth = 1
        elif char == "}":
            if not depth:
                raise RuleError("unbalanced '}'")
            depth = 0
        elif char == "/" and not depth:
            pieces.append(text[start:i])
            start = i + 1
    if depth:
        raise RuleError("unbalanced '{'")
    pieces.append(text[start:])
    return pieces


def _check_segment(segment: str) -> str:
    if segment in ("*", "**") or _LITERAL.fullmatch(segment):
        return segment
    raise RuleError(f"bad segment {segment!r}")


def parse_template(text: str) -> PathTemplate:
    """Parse one rule path; :class:`RuleError` says what is wrong."""
    if not text.startswith("/"):
        raise RuleError(f"{text!r}: a template starts with '/'")
    try:
        body, verb = _split_verb(text[1:])
        segments: list[str] = []
        variables: list[Variable] = []
        for piece in _top_level_pieces(body):
            if not piece.startswith("{"):
                segments.append(_check_segment(piece))
                continue
            if not piece.endswith("}"):
                raise RuleError(f"bad variable {piece!r}")
            field_path, _, pattern = piece[1:-1].partition("=")
            if not all(_IDENT.fullmatch(part) for part in field_path.split(".")):
                raise RuleError(f"bad field path {field_path!r}")
            start = len(segments)
            segments.extend(_check_segment(s) for s in (pattern or "*").split("/"))
            variables.append(Variable(field_path, start, len(segments)))
        if "**" in segments[:-1]:
            raise RuleError("'**' is only allowed as the last segment")
    except RuleError as error:
        raise RuleError(f"{text!r}: {error}") from None
    return PathTemplate(text, tuple(segments), tuple(variables), verb)


def split_path(raw_path: str) -> tuple[list[str], str]:
    """A request's still percent-encoded path → (segments, verb). The verb is what follows
    the last ``:`` of the last segment, so ``/v1/experiments/7:stop`` → ([v1, experiments,
    7], stop); an encoded ``%3A`` is part of the segment."""
    segments = raw_path.removeprefix("/").split("/")
    last, colon, verb = segments[-1].rpartition(":")
    if colon:
        segments[-1] = last
        return segments, verb
    return segments, ""


def _decode(raw: Sequence[str], single: bool) -> str:
    """A variable's value: a one-segment variable is fully decoded; a multi-segment one keeps
    ``%2F`` encoded, so a ``/`` inside a segment cannot pass for a separator."""
    if single:
        return unquote(raw[0])
    return "/".join(
        "%2F".join(unquote(part) for part in _ENCODED_SLASH.split(segment)) for segment in raw
    )


def match_template(
    template: PathTemplate, segments: Sequence[str], verb: str
) -> dict[str, str] | None:
    """The variables' values when the (encoded) segments and verb match, else None."""
    if verb != template.verb:
        return None
    pattern = template.segments
    deep = bool(pattern) and pattern[-1] == "**"
    fixed = len(pattern) - 1 if deep else len(pattern)
    if len(segments) < fixed or (not deep and len(segments) != fixed):
        return None
    for want, have in zip(pattern[:fixed], segments, strict=False):
        if not have or (want != "*" and unquote(have) != want):
            return None
    values: dict[str, str] = {}
    for variable in template.variables:
        end = len(segments) if pattern[variable.end - 1] == "**" else variable.end
        raw = segments[variable.start : end]
        if not raw:
            return None
        single = variable.end - variable.start == 1 and pattern[variable.start] == "*"
        values[variable.field_path] = _decode(raw, single)
    return values


@dataclass(frozen=True)
class HttpRoute:
    """One binding: an HTTP method and path template that call one RPC."""

    rpc: str
    #: The gRPC method path, ``/package.Service/Method``.
    full_method: str
    http_method: str
    template: PathTemplate
    #: "" (no body), "*" (the whole request) or the request field the body fills.
    body: str
    #: "" (the whole response) or the response field that is the HTTP body.
    response_body: str
    input_type: Descriptor
    output_type: Descriptor
    #: The RPC answers a stream: the HTTP answer is newline-delimited JSON (docs/rest.md).
    server_streaming: bool = False


def field_at(descriptor: Descriptor, dotted: str) -> FieldDescriptor:
    """The field at ``a.b.c`` (proto names), through singular message fields."""
    parts = dotted.split(".")
    current = descriptor
    for i, part in enumerate(parts):
        fd = current.fields_by_name.get(part)
        if fd is None:
            raise RuleError(f"{descriptor.full_name} has no field {'.'.join(parts[: i + 1])}")
        if i == len(parts) - 1:
            return fd
        if fd.message_type is None or fd.is_repeated:
            raise RuleError(f"{descriptor.full_name}.{dotted}: {part} is not a singular message")
        current = fd.message_type
    raise RuleError("empty field path")  # pragma: no cover - split never returns []


def _pattern(rule: http_pb2.HttpRule) -> tuple[str, str]:
    kind = rule.WhichOneof("pattern")
    if kind is None:
        raise RuleError("an HttpRule without a pattern")
    if kind == "custom":
        return rule.custom.kind.upper(), rule.custom.path
    return kind.upper(), str(getattr(rule, kind))


def _bindings(rule: http_pb2.HttpRule) -> Iterator[http_pb2.HttpRule]:
    yield rule
    yield from rule.additional_bindings


def routes_from_service(service: ServiceDescriptor) -> tuple[HttpRoute, ...]:
    """Every binding of every method that carries ``google.api.http``, checked against the
    request and response types (a bad rule fails here, at startup, not per request)."""
    routes: list[HttpRoute] = []
    for method in service.methods:
        options = method.GetOptions()
        if not options.HasExtension(annotations_pb2.http):
            continue
        for rule in _bindings(options.Extensions[annotations_pb2.http]):
            http_method, path = _pattern(rule)
            template = parse_template(path)
            for variable in template.variables:
                fd = field_at(method.input_type, variable.field_path)
                if fd.is_repeated or fd.message_type is not None:
                    raise RuleError(f"{method.full_name}: {variable.field_path} is not a scalar")
            if rule.body not in ("", "*"):
                field_at(method.input_type, rule.body)
            if rule.response_body:
                field_at(method.output_type, rule.response_body)
            routes.append(
                HttpRoute(
                    rpc=method.name,
                    full_method=f"/{service.full_name}/{method.name}",
                    http_method=http_method,
                    template=template,
                    body=rule.body,
                    response_body=rule.response_body,
                    input_type=method.input_type,
                    output_type=method.output_type,
                    server_streaming=method.server_streaming,
                )
            )
    return tuple(routes)


@dataclass(frozen=True)
class Matched:
    route: HttpRoute
    #: Path variables by field path (``experiment.name``), decoded.
    bindings: Mapping[str, str]


@dataclass(frozen=True)
class NoRoute:
    """No template matches the path: 404."""


@dataclass(frozen=True)
class WrongMethod:
    """Some template matches the path, under other HTTP methods: 405."""

    allowed: tuple[str, ...]


def resolve(
    routes: Sequence[HttpRoute], http_method: str, raw_path: str
) -> Matched | NoRoute | WrongMethod:
    """Which route serves ``http_method raw_path``; the first in declaration order wins."""
    segments, verb = split_path(raw_path)
    allowed: list[str] = []
    for route in routes:
        values = match_template(route.template, segments, verb)
        if values is None:
            continue
        if route.http_method == http_method.upper():
            return Matched(route, values)
        if route.http_method not in allowed:
            allowed.append(route.http_method)
    return WrongMethod(tuple(sorted(allowed))) if allowed else NoRoute()


def path_prefixes(routes: Sequence[HttpRoute]) -> list[str]:
    """The first literal segment of every route (``/v1``): what the web app must send here."""
    firsts = {route.template.segments[0] for route in routes}
    if any(not _LITERAL.fullmatch(first) for first in firsts):
        raise RuleError("a route starts with a variable or wildcard: it would take every path")
    return sorted(f"/{first}" for first in firsts)


def rules_table(routes: Sequence[HttpRoute]) -> str:
    """The routes as a Markdown table (docs/rest.md embeds it; a test keeps it current)."""
    lines = ["| Method | Path | RPC | Body |", "|---|---|---|---|"]
    for route in routes:
        body = {"": "—", "*": "the request"}.get(route.body, f"`{route.body}`")
        lines.append(f"| {route.http_method} | `{route.template.text}` | {route.rpc} | {body} |")
    return "\n".join(lines) + "\n"
