"""Filter AST → SQL against a resource's field catalogue, with numbered ``$n`` parameters.

Meaning errors (unknown field, unsupported comparator, bad value) are raised here; values
always travel as parameters, never as SQL text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any

from xmc.query.fields import (
    INT64_MAX,
    INT64_MIN,
    FieldKind,
    FieldSpec,
    describe_fields,
    resolve_field,
)
from xmc.query.filter import And, Comparison, Node, Not, Op, Or, filter_error, parse_filter

_ORDERING = frozenset({Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE})
_ALLOWED_OPS: dict[FieldKind, frozenset[Op]] = {
    FieldKind.STRING: _ORDERING | {Op.HAS},
    FieldKind.INT: _ORDERING | {Op.HAS},
    FieldKind.ENUM: _ORDERING | {Op.HAS},
    FieldKind.TIMESTAMP: _ORDERING,
    FieldKind.STRING_LIST: frozenset({Op.EQ, Op.HAS}),
    FieldKind.BOOL: frozenset({Op.EQ, Op.NE, Op.HAS}),
}
"""Which comparators each kind supports (``:`` on a scalar means equality)."""

_PRESENCE_SQL: dict[FieldKind, str] = {
    FieldKind.STRING: "{c} <> ''",
    FieldKind.STRING_LIST: "cardinality({c}) > 0",
}
"""``field:*`` (AIP-160 "has a value"); kinds not listed test ``IS NOT NULL``."""

_CASTS: dict[FieldKind, str] = {
    FieldKind.INT: "::bigint",
    FieldKind.ENUM: "::bigint",
    FieldKind.NUMBER: "::numeric",
}
"""Integers are bound as bigint so a large value is compared, not an asyncpg overflow on a
smallint column."""

MAX_NUMBER_LENGTH = 120
NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")
"""With ``MAX_NUMBER_LENGTH``, the text an arg value or a filter literal must be to count as
a number (``is_number``); such values are also stored as numbers (``arg_numbers``,
migration 0005). The length and exponent bounds keep every one far inside ``numeric``'s
range, and ``NaN`` and ``Infinity`` are text."""


def is_number(text: str) -> bool:
    return len(text) <= MAX_NUMBER_LENGTH and NUMBER.fullmatch(text) is not None


_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")
_INTEGER = re.compile(r"[+-]?\d{1,19}")


class Params:
    """Allocates ``$n`` placeholders in order of appearance."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.values: list[Any] = []

    def add(self, value: Any, kind: FieldKind) -> str:
        self.values.append(value)
        return f"${self.first + len(self.values) - 1}{_CASTS.get(kind, '')}"


def _parse_int(name: str, value: str) -> int:
    if not _INTEGER.fullmatch(value):
        raise filter_error(f"field '{name}' needs an integer, got {value!r}")
    number = int(value)
    if not INT64_MIN <= number <= INT64_MAX:
        raise filter_error(f"field '{name}' value {value} is out of range")
    return number


def _parse_enum(name: str, value: str, spec: FieldSpec) -> int:
    assert spec.enum is not None, f"ENUM field '{name}' needs FieldSpec.enum"
    by_name = spec.enum.__members__
    if value in by_name:
        return int(by_name[value])
    if _INTEGER.fullmatch(value) and int(value) in {int(m) for m in spec.enum}:
        return int(value)
    raise filter_error(f"field '{name}' has no value {value!r}; valid: {', '.join(by_name)}")


def _parse_timestamp(name: str, value: str) -> datetime:
    if not _RFC3339.fullmatch(value):
        raise filter_error(
            f"field '{name}' needs an RFC 3339 timestamp such as 2024-01-02T03:04:05Z, "
            f"got {value!r}"
        )
    try:
        return datetime.fromisoformat(value.upper())
    except ValueError:
        raise filter_error(f"field '{name}' has an impossible timestamp {value!r}") from None


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise filter_error(f"field '{name}' needs true or false, got {value!r}")
    return lowered == "true"


def _convert(name: str, value: str, spec: FieldSpec) -> Any:
    """The filter text of a value as the Python value bound for ``spec.kind``."""
    match spec.kind:
        case FieldKind.INT:
            return _parse_int(name, value)
        case FieldKind.ENUM:
            return _parse_enum(name, value, spec)
        case FieldKind.TIMESTAMP:
            return _parse_timestamp(name, value)
        case FieldKind.BOOL:
            return _parse_bool(name, value)
        case FieldKind.STRING | FieldKind.STRING_LIST:
            return value


def _like_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _compile_arg(node: Comparison, spec: FieldSpec, params: Params) -> str:
    """One key of an args map: a number literal (unquoted, ``is_number``) compares with the
    values that read as numbers, numerically; any other literal compares as text. A unit
    without the key, or with a value that is not a number under a numeric comparison,
    matches neither ``args.k > x`` nor ``NOT args.k > x`` (SQL NULL). ``:`` is equality."""
    column, op = spec.column, node.op
    if node.wildcard and op is Op.HAS and node.value == "":
        return f"{column} IS NOT NULL"
    if node.wildcard:
        if op not in (Op.EQ, Op.NE):
            raise filter_error(
                f"field '{node.field}': a trailing '*' is only a wildcard in '=' or '!=' "
                "(write \\* in quotes for a literal star)"
            )
        like = "LIKE" if op is Op.EQ else "NOT LIKE"
        return f"{column} {like} {params.add(_like_escape(node.value) + '%', FieldKind.STRING)}"
    sql_op = "=" if op is Op.HAS else op.value
    if not node.quoted and is_number(node.value):
        number = params.add(Decimal(node.value), FieldKind.NUMBER)
        return f"{spec.numbers} {sql_op} {number}"
    return f"{column} {sql_op} {params.add(node.value, FieldKind.STRING)}"


def _compile_comparison(node: Comparison, spec: FieldSpec, params: Params) -> str:
    column, kind, op = spec.column, spec.kind, node.op
    if kind is FieldKind.ARG:
        return _compile_arg(node, spec, params)
    if node.wildcard and op is Op.HAS and node.value == "":
        return _PRESENCE_SQL.get(kind, "{c} IS NOT NULL").format(c=column)
    if op not in _ALLOWED_OPS[kind]:
        allowed = " ".join(o.value for o in Op if o in _ALLOWED_OPS[kind])
        raise filter_error(
            f"field '{node.field}' does not support '{op.value}'; use one of {allowed}"
        )
    if node.wildcard and not (kind is FieldKind.STRING and op in (Op.EQ, Op.NE)):
        raise filter_error(
            f"field '{node.field}': a trailing '*' is only a wildcard in '=' or '!=' on text "
            "fields (write \\* in quotes for a literal star)"
        )
    value = _convert(node.field, node.value, spec)
    if kind is FieldKind.STRING_LIST:
        return f"{params.add(value, kind)} = ANY({column})"
    if kind is FieldKind.STRING and op is Op.HAS:
        return f"{column} ILIKE {params.add(f'%{_like_escape(value)}%', kind)}"
    if node.wildcard:
        like = "LIKE" if op is Op.EQ else "NOT LIKE"
        return f"{column} {like} {params.add(_like_escape(value) + '%', kind)}"
    sql_op = "=" if op is Op.HAS else op.value
    return f"{column} {sql_op} {params.add(value, kind)}"


def _lookup(name: str, fields: Mapping[str, FieldSpec]) -> FieldSpec:
    spec = resolve_field(name, fields, filter_error)
    if spec is None:
        raise filter_error(f"unknown field '{name}'; known: {describe_fields(fields)}")
    if not spec.filterable:
        raise filter_error(
            f"field '{name}' can be sorted on, not filtered; known: {describe_fields(fields)}"
        )
    return spec


def _compile(node: Node, fields: Mapping[str, FieldSpec], params: Params) -> str:
    def child(item: Node) -> str:
        sql = _compile(item, fields, params)
        return sql if isinstance(item, Comparison | Not) else f"({sql})"

    match node:
        case Comparison():
            return _compile_comparison(node, _lookup(node.field, fields), params)
        case And(items):
            return " AND ".join(child(item) for item in items)
        case Or(items):
            return " OR ".join(child(item) for item in items)
        case Not(item):
            return f"NOT ({_compile(item, fields, params)})"


def compile_node(
    node: Node | None, fields: Mapping[str, FieldSpec], *, first_param: int
) -> tuple[str, list[Any]]:
    """SQL boolean expression and its parameters (``$first_param`` onward) for ``node``.

    A comparison on a NULL column is neither true nor false in SQL, so such rows match
    neither ``f > x`` nor ``NOT f > x``; ``f:*`` / ``-f:*`` test presence.
    """
    if node is None:
        return "TRUE", []
    params = Params(first_param)
    return _compile(node, fields, params), params.values


def compile_filter(
    text: str, fields: Mapping[str, FieldSpec], *, first_param: int
) -> tuple[str, list[Any]]:
    """Parse and compile an AIP-160 filter; an empty filter is ``("TRUE", [])``."""
    return compile_node(parse_filter(text), fields, first_param=first_param)
