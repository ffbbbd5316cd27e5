"""List/Search requests → SQL: AIP-160 filters, AIP-132 order_by, keyset page tokens.

Every ``List*``/``Search*`` RPC takes the same four fields. This module turns them into a
WHERE clause, an ORDER BY list and a LIMIT for asyncpg (numbered ``$n`` parameters), and is
pure so the whole request language can be table-tested without a database.

Design:

- **Filter** text is tokenized, parsed by recursive descent into a small AST (``Comparison``,
  ``And``, ``Or``, ``Not``) and only then compiled against a resource's field catalogue, so
  syntax errors (with a position) and meaning errors (unknown field, bad value) are
  separate steps. Values always travel as parameters, never as SQL text. Input is bounded
  (length and nesting) so a hostile filter costs neither stack nor CPU.
- **Paging** is keyset ("seek") paging, not OFFSET: the token carries the sort values of
  the last row returned, and the next page is "rows strictly after that one" in a total
  order (the requested keys, then unique tiebreak columns). Rows inserted between pages
  therefore never shift a page boundary: nothing already seen repeats and nothing that
  existed is skipped.
- **NULLs** sort as Postgres sorts them by default: greater than every value (last in
  ascending order, first in descending). The keyset condition is built from the same
  rule, and ``keyset_after`` evaluates the very same condition in Python for tests.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import json
import operator
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeAlias, TypeVar

from xmc.errors import InvalidArgumentError

MAX_FILTER_LENGTH = 2000
MAX_FILTER_DEPTH = 32
MAX_ORDER_BY_LENGTH = 1000
MAX_PAGE_TOKEN_LENGTH = 4096
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


# ---------------------------------------------------------------------------------------
# Field catalogue


class FieldKind(enum.Enum):
    """How a field's values are written in a filter and compared in SQL."""

    STRING = "string"
    INT = "int"
    ENUM = "enum"
    TIMESTAMP = "timestamp"
    STRING_LIST = "string_list"
    BOOL = "bool"


@dataclass(frozen=True)
class FieldSpec:
    """One filterable/sortable field of a resource.

    ``column`` is a SQL expression (``"w.state"``); ``enum`` names the IntEnum whose member
    names and numbers an ENUM field accepts. ``nullable`` must be set for columns that can
    be NULL so that paging past a NULL sort value stays correct.
    """

    column: str
    kind: FieldKind
    enum: type[enum.IntEnum] | None = None
    sortable: bool = True
    nullable: bool = False


# ---------------------------------------------------------------------------------------
# AST


class Op(enum.Enum):
    EQ = "="
    NE = "!="
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="
    HAS = ":"


@dataclass(frozen=True)
class Comparison:
    """``field op value``; ``wildcard`` is True when the value ended in an unescaped ``*``
    (which is then not part of ``value``)."""

    field: str
    op: Op
    value: str
    wildcard: bool = False


@dataclass(frozen=True)
class And:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Or:
    items: tuple[Node, ...]


@dataclass(frozen=True)
class Not:
    item: Node


Node: TypeAlias = Comparison | And | Or | Not


# ---------------------------------------------------------------------------------------
# Tokenizer


class _Tok(enum.Enum):
    NAME = "name"
    AND = "AND"
    OR = "OR"
    NOT = "NOT"
    MINUS = "-"
    LPAREN = "("
    RPAREN = ")"
    CMP = "comparator"
    VALUE = "value"
    END = "end"


@dataclass(frozen=True)
class _Token:
    kind: _Tok
    text: str  # source text, for error messages
    pos: int
    value: str = ""  # NAME: the name; CMP: the operator; VALUE: the unescaped value
    wildcard: bool = False


_KEYWORDS = {"AND": _Tok.AND, "OR": _Tok.OR, "NOT": _Tok.NOT}
_COMPARATORS = ("<=", ">=", "!=", "=", "<", ">", ":")  # longest first
_NAME_CHARS = re.compile(r"[A-Za-z0-9_.]+")
_BARE_VALUE = re.compile(r"[^\s()\"']+")
_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "*": "*"}


def _error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"filter: {message}")


def _describe(token: _Token) -> str:
    return "end of filter" if token.kind is _Tok.END else repr(token.text)


def _skip_space(text: str, i: int) -> int:
    while i < len(text) and text[i].isspace():
        i += 1
    return i


def _read_quoted(text: str, start: int) -> _Token:
    """A string literal; backslash escapes, and ``\\*`` keeps a trailing star literal."""
    quote, i, wildcard = text[start], start + 1, False
    out: list[str] = []
    while i < len(text):
        ch = text[i]
        if ch == quote:
            value = "".join(out[:-1] if wildcard else out)
            return _Token(_Tok.VALUE, text[start : i + 1], start, value, wildcard)
        if ch == "\\":
            escaped = text[i + 1 : i + 2]
            if escaped not in _ESCAPES:
                raise _error(f"unknown escape '\\{escaped}' at position {i}")
            out.append(_ESCAPES[escaped])
            wildcard, i = False, i + 2
            continue
        out.append(ch)
        wildcard, i = ch == "*", i + 1
    raise _error(f"unterminated string starting at position {start}")


def _read_value(text: str, i: int, comparator: _Token) -> _Token:
    """The argument after a comparator, read in "value mode": a quoted string, or a bare
    run up to whitespace or a parenthesis, so ``2024-01-02T03:04:05Z`` and ``-3`` stay whole."""
    if i < len(text) and text[i] in "\"'":
        token = _read_quoted(text, i)
    elif match := _BARE_VALUE.match(text, i):
        raw = match.group()
        wildcard = raw.endswith("*")
        token = _Token(_Tok.VALUE, raw, i, raw[:-1] if wildcard else raw, wildcard)
    else:
        raise _error(f"missing value after '{comparator.text}' at position {comparator.pos}")
    if "\x00" in token.value:
        raise _error(f"NUL character in value at position {i}")
    return token


def _read_token(text: str, i: int) -> _Token:
    ch = text[i]
    if ch in "()-":
        return _Token(_Tok(ch), ch, i)
    for op in _COMPARATORS:
        if text.startswith(op, i):
            return _Token(_Tok.CMP, op, i, op)
    if ch in "\"'":
        return _read_quoted(text, i)
    if match := _NAME_CHARS.match(text, i):
        word = match.group()
        return _Token(_KEYWORDS.get(word, _Tok.NAME), word, i, word)
    raise _error(f"unexpected character {ch!r} at position {i}")


def _tokenize(text: str) -> list[_Token]:
    """Split ``text`` into tokens; the token after a comparator is always a value."""
    tokens: list[_Token] = []
    i = _skip_space(text, 0)
    while i < len(text):
        after_comparator = bool(tokens) and tokens[-1].kind is _Tok.CMP
        token = _read_value(text, i, tokens[-1]) if after_comparator else _read_token(text, i)
        tokens.append(token)
        i = _skip_space(text, i + len(token.text))
    if tokens and tokens[-1].kind is _Tok.CMP:
        _read_value(text, i, tokens[-1])  # raises "missing value"
    tokens.append(_Token(_Tok.END, "", len(text)))
    return tokens


# ---------------------------------------------------------------------------------------
# Parser (AIP-160 subset)
#
#   filter      = [ expression ] END
#   expression  = sequence { "AND" sequence }
#   sequence    = factor { factor }                 (implicit AND)
#   factor      = term { "OR" term }                (OR binds tighter than AND)
#   term        = ( "NOT" | "-" ) term | simple
#   simple      = "(" expression ")" | restriction
#   restriction = NAME comparator value
#   comparator  = "=" | "!=" | "<" | "<=" | ">" | ">=" | ":"
#   value       = quoted string | bare run of non-space, non-paren characters

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")
_TERM_START = frozenset({_Tok.NAME, _Tok.NOT, _Tok.MINUS, _Tok.LPAREN})


def _join(kind: type[And] | type[Or], items: list[Node]) -> Node:
    """One node for ``items``, flattening nested nodes of the same kind."""
    flat: list[Node] = []
    for item in items:
        flat.extend(item.items if isinstance(item, kind) else (item,))
    return flat[0] if len(flat) == 1 else kind(tuple(flat))


class _Parser:
    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._i = 0
        self._depth = 0

    def _peek(self) -> _Token:
        return self._tokens[self._i]

    def _next(self) -> _Token:
        token = self._tokens[self._i]
        self._i += 1
        return token

    def _descend(self, token: _Token) -> None:
        self._depth += 1
        if self._depth > MAX_FILTER_DEPTH:
            raise _error(f"nested deeper than {MAX_FILTER_DEPTH} levels at position {token.pos}")

    def parse(self) -> Node:
        node = self._expression()
        if self._peek().kind is not _Tok.END:
            raise _error(f"unexpected {_describe(self._peek())} at position {self._peek().pos}")
        return node

    def _expression(self) -> Node:
        items = [self._sequence()]
        while self._peek().kind is _Tok.AND:
            self._next()
            items.append(self._sequence())
        return _join(And, items)

    def _sequence(self) -> Node:
        items = [self._factor()]
        while self._peek().kind in _TERM_START:
            items.append(self._factor())
        return _join(And, items)

    def _factor(self) -> Node:
        items = [self._term()]
        while self._peek().kind is _Tok.OR:
            self._next()
            items.append(self._term())
        return _join(Or, items)

    def _term(self) -> Node:
        token = self._peek()
        if token.kind in (_Tok.NOT, _Tok.MINUS):
            self._next()
            self._descend(token)
            node = Not(self._term())
            self._depth -= 1
            return node
        if token.kind is _Tok.LPAREN:
            return self._parenthesized()
        if token.kind is _Tok.NAME:
            return self._restriction()
        raise _error(f"unexpected {_describe(token)} at position {token.pos}")

    def _parenthesized(self) -> Node:
        opening = self._next()
        self._descend(opening)
        node = self._expression()
        closing = self._next()
        if closing.kind is _Tok.END:
            raise _error(f"missing ')' for '(' at position {opening.pos}")
        if closing.kind is not _Tok.RPAREN:
            raise _error(f"unexpected {_describe(closing)} at position {closing.pos}")
        self._depth -= 1
        return node

    def _restriction(self) -> Node:
        name = self._next()
        if not _FIELD_NAME.fullmatch(name.text):
            raise _error(f"invalid field name {name.text!r} at position {name.pos}")
        comparator = self._next()
        if comparator.kind is not _Tok.CMP:
            raise _error(
                f"expected a comparison operator after {name.text!r} at position {comparator.pos}"
            )
        value = self._next()  # the tokenizer guarantees a VALUE after a CMP
        return Comparison(name.text, Op(comparator.value), value.value, value.wildcard)


def parse_filter(text: str) -> Node | None:
    """The AST of an AIP-160 filter; None when the filter is empty (matches everything)."""
    if len(text) > MAX_FILTER_LENGTH:
        raise _error(f"longer than {MAX_FILTER_LENGTH} characters")
    tokens = _tokenize(text)
    if tokens[0].kind is _Tok.END:
        return None
    return _Parser(tokens).parse()


# ---------------------------------------------------------------------------------------
# Compiler: AST → SQL with numbered parameters

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

_CASTS: dict[FieldKind, str] = {FieldKind.INT: "::bigint", FieldKind.ENUM: "::bigint"}
"""Integers are bound as bigint so a large value is compared, not an asyncpg overflow on a
smallint column."""

_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")
_INTEGER = re.compile(r"[+-]?\d{1,19}")


class _Params:
    """Allocates ``$n`` placeholders in order of appearance."""

    def __init__(self, first: int) -> None:
        self.first = first
        self.values: list[Any] = []

    def add(self, value: Any, kind: FieldKind) -> str:
        self.values.append(value)
        return f"${self.first + len(self.values) - 1}{_CASTS.get(kind, '')}"


def _parse_int(name: str, value: str) -> int:
    if not _INTEGER.fullmatch(value):
        raise _error(f"field '{name}' needs an integer, got {value!r}")
    number = int(value)
    if not _INT64_MIN <= number <= _INT64_MAX:
        raise _error(f"field '{name}' value {value} is out of range")
    return number


def _parse_enum(name: str, value: str, spec: FieldSpec) -> int:
    assert spec.enum is not None, f"ENUM field '{name}' needs FieldSpec.enum"
    by_name = spec.enum.__members__
    if value in by_name:
        return int(by_name[value])
    if _INTEGER.fullmatch(value) and int(value) in {int(m) for m in spec.enum}:
        return int(value)
    raise _error(f"field '{name}' has no value {value!r}; valid: {', '.join(by_name)}")


def _parse_timestamp(name: str, value: str) -> datetime:
    if not _RFC3339.fullmatch(value):
        raise _error(
            f"field '{name}' needs an RFC 3339 timestamp such as 2024-01-02T03:04:05Z, "
            f"got {value!r}"
        )
    try:
        return datetime.fromisoformat(value.upper())
    except ValueError:
        raise _error(f"field '{name}' has an impossible timestamp {value!r}") from None


def _parse_bool(name: str, value: str) -> bool:
    lowered = value.lower()
    if lowered not in ("true", "false"):
        raise _error(f"field '{name}' needs true or false, got {value!r}")
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


def _compile_comparison(node: Comparison, spec: FieldSpec, params: _Params) -> str:
    column, kind, op = spec.column, spec.kind, node.op
    if node.wildcard and op is Op.HAS and node.value == "":
        return _PRESENCE_SQL.get(kind, "{c} IS NOT NULL").format(c=column)
    if op not in _ALLOWED_OPS[kind]:
        allowed = " ".join(o.value for o in Op if o in _ALLOWED_OPS[kind])
        raise _error(f"field '{node.field}' does not support '{op.value}'; use one of {allowed}")
    if node.wildcard and not (kind is FieldKind.STRING and op in (Op.EQ, Op.NE)):
        raise _error(
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
    if name not in fields:
        raise _error(f"unknown field '{name}'; known: {', '.join(sorted(fields))}")
    return fields[name]


def _compile(node: Node, fields: Mapping[str, FieldSpec], params: _Params) -> str:
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
    params = _Params(first_param)
    return _compile(node, fields, params), params.values


def compile_filter(
    text: str, fields: Mapping[str, FieldSpec], *, first_param: int
) -> tuple[str, list[Any]]:
    """Parse and compile an AIP-160 filter; an empty filter is ``("TRUE", [])``."""
    return compile_node(parse_filter(text), fields, first_param=first_param)


# ---------------------------------------------------------------------------------------
# order_by (AIP-132)


@dataclass(frozen=True)
class OrderKey:
    field: str
    descending: bool = False


def _order_error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"order_by: {message}")


def _parse_order_item(item: str, fields: Mapping[str, FieldSpec]) -> OrderKey:
    words = item.split()
    if not words:
        raise _order_error("empty sort key (stray comma?)")
    if len(words) > 2 or (len(words) == 2 and words[1].lower() not in ("asc", "desc")):
        raise _order_error(f"expected 'field' or 'field desc', got {item.strip()!r}")
    name = words[0]
    sortable = ", ".join(sorted(n for n, s in fields.items() if s.sortable))
    if name not in fields:
        raise _order_error(f"unknown field '{name}'; sortable: {sortable}")
    if not fields[name].sortable:
        raise _order_error(f"field '{name}' cannot be sorted on; sortable: {sortable}")
    return OrderKey(name, descending=len(words) == 2 and words[1].lower() == "desc")


def parse_order_by(
    text: str, fields: Mapping[str, FieldSpec], default: Sequence[OrderKey]
) -> tuple[OrderKey, ...]:
    """AIP-132 ``"create_time desc, title"``; empty text means ``default``."""
    if len(text) > MAX_ORDER_BY_LENGTH:
        raise _order_error(f"longer than {MAX_ORDER_BY_LENGTH} characters")
    if not text.strip():
        return tuple(default)
    keys = tuple(_parse_order_item(item, fields) for item in text.split(","))
    seen: set[str] = set()
    for key in keys:
        column = fields[key.field].column
        if column in seen:
            raise _order_error(f"field '{key.field}' repeats an earlier sort key")
        seen.add(column)
    return keys


# ---------------------------------------------------------------------------------------
# Keyset pagination


@dataclass(frozen=True)
class SortColumn:
    """One column of the total order: an order key's column or a tiebreak column."""

    sql: str
    descending: bool = False
    kind: FieldKind = FieldKind.INT
    nullable: bool = False


@dataclass(frozen=True)
class ListQuery:
    """Everything the store needs to run one page of a List/Search.

    Run ``SELECT …, <sort_columns(query)> … WHERE {where} ORDER BY {order_by} LIMIT {limit}``
    with ``params``; then ``finish_page`` (or ``next_page_token``) makes the next token.
    """

    where: str
    params: list[Any]
    order_by: str
    limit: int
    order: tuple[OrderKey, ...]
    fingerprint: str
    columns: tuple[SortColumn, ...]
    page_size: int


def _sort_columns(
    order: Sequence[OrderKey],
    fields: Mapping[str, FieldSpec],
    tiebreak: Sequence[str | FieldSpec],
) -> tuple[SortColumn, ...]:
    """Order keys then tiebreaks (ascending, skipping columns already ordered on)."""
    columns = [
        SortColumn(
            fields[k.field].column, k.descending, fields[k.field].kind, fields[k.field].nullable
        )
        for k in order
    ]
    seen = {c.sql for c in columns}
    for tb in tiebreak:
        column = SortColumn(tb) if isinstance(tb, str) else SortColumn(tb.column, False, tb.kind)
        if column.sql not in seen:
            columns.append(column)
            seen.add(column.sql)
    return tuple(columns)


def sort_columns(query: ListQuery) -> list[str]:
    """SQL expressions the caller must SELECT, in order, to build the next page token."""
    return [c.sql for c in query.columns]


def _order_by_sql(columns: Sequence[SortColumn]) -> str:
    def one(c: SortColumn) -> str:
        sql = f"{c.sql} DESC" if c.descending else c.sql
        if c.nullable:  # Postgres' default, spelled out: NULL is the greatest value.
            sql += " NULLS FIRST" if c.descending else " NULLS LAST"
        return sql

    return ", ".join(one(c) for c in columns)


class _Test(enum.Enum):
    GT = ">"
    LT = "<"
    GE = ">="
    LE = "<="
    EQ = "="
    IS_NULL = "IS NULL"
    IS_NOT_NULL = "IS NOT NULL"


@dataclass(frozen=True)
class _Cond:
    """``columns[index] <test> last_values[index]``."""

    index: int
    test: _Test


@dataclass(frozen=True)
class _Keyset:
    """ "Strictly after the last row" as data: ``bound AND (any of disjuncts)``.

    ``bound`` (``first >= v`` or ``first <= v``) is implied by the disjuncts; it is there so
    Postgres can seek an index on the first sort column instead of scanning from the start.
    """

    bound: _Cond | None
    disjuncts: tuple[tuple[_Cond, ...], ...]


def _strictly_after(index: int, column: SortColumn, value: Any) -> list[_Cond]:
    """Conditions for "this column alone puts the row after ``value``" (NULL is greatest)."""
    if value is None:
        return [_Cond(index, _Test.IS_NOT_NULL)] if column.descending else []
    if column.descending:
        return [_Cond(index, _Test.LT)]
    return [_Cond(index, _Test.GT)] + ([_Cond(index, _Test.IS_NULL)] if column.nullable else [])


def _keyset(columns: Sequence[SortColumn], last: Sequence[Any]) -> _Keyset:
    """Row > last in the lexicographic order of ``columns``, expanded into OR-of-ANDs:
    ``(c1 after v1) OR (c1 = v1 AND c2 after v2) OR …``."""
    disjuncts: list[tuple[_Cond, ...]] = []
    equal_prefix: list[_Cond] = []
    for index, (column, value) in enumerate(zip(columns, last, strict=True)):
        disjuncts.extend((*equal_prefix, c) for c in _strictly_after(index, column, value))
        equal_prefix.append(_Cond(index, _Test.IS_NULL if value is None else _Test.EQ))
    first = columns[0]
    bound = None
    if not first.nullable and last[0] is not None:
        bound = _Cond(0, _Test.LE if first.descending else _Test.GE)
    return _Keyset(bound, tuple(disjuncts))


_COMPARE: dict[_Test, Callable[[Any, Any], bool]] = {
    _Test.GT: operator.gt,
    _Test.LT: operator.lt,
    _Test.GE: operator.ge,
    _Test.LE: operator.le,
    _Test.EQ: operator.eq,
}


def _holds(cond: _Cond, last: Sequence[Any], row: Sequence[Any]) -> bool:
    mine, theirs = row[cond.index], last[cond.index]
    if cond.test is _Test.IS_NULL:
        return mine is None
    if cond.test is _Test.IS_NOT_NULL:
        return mine is not None
    if mine is None or theirs is None:  # SQL: a comparison with NULL is not true
        return False
    return _COMPARE[cond.test](mine, theirs)


def keyset_predicate(
    columns: Sequence[SortColumn], last_values: Sequence[Any]
) -> Callable[[Sequence[Any]], bool]:
    """The page-token condition as a Python predicate over a row's sort values: the same
    data the SQL is rendered from (Python string order stands in for the collation)."""
    keyset = _keyset(columns, last_values)

    def after(row_values: Sequence[Any]) -> bool:
        if keyset.bound is not None and not _holds(keyset.bound, last_values, row_values):
            return False
        return any(all(_holds(c, last_values, row_values) for c in d) for d in keyset.disjuncts)

    return after


def keyset_after(
    columns: Sequence[SortColumn], last_values: Sequence[Any], row_values: Sequence[Any]
) -> bool:
    """Does ``row_values`` come strictly after ``last_values`` in the order of ``columns``?"""
    return keyset_predicate(columns, last_values)(row_values)


def _keyset_sql(
    columns: Sequence[SortColumn], last: Sequence[Any], first_param: int
) -> tuple[str, list[Any]]:
    """The keyset condition as SQL; each non-NULL last value is bound once and reused."""
    params = _Params(first_param)
    placeholders = [
        None if value is None else params.add(value, column.kind)
        for column, value in zip(columns, last, strict=True)
    ]

    def cond_sql(cond: _Cond) -> str:
        column = columns[cond.index].sql
        if cond.test in (_Test.IS_NULL, _Test.IS_NOT_NULL):
            return f"{column} {cond.test.value}"
        return f"{column} {cond.test.value} {placeholders[cond.index]}"

    def conj_sql(conj: tuple[_Cond, ...]) -> str:
        sql = " AND ".join(cond_sql(c) for c in conj)
        return sql if len(conj) == 1 else f"({sql})"

    keyset = _keyset(columns, last)
    if not keyset.disjuncts:
        return "FALSE", []
    sql = " OR ".join(conj_sql(d) for d in keyset.disjuncts)
    if keyset.bound is not None:
        sql = f"{cond_sql(keyset.bound)} AND ({sql})"
    return sql, params.values


# ---------------------------------------------------------------------------------------
# Page tokens


def _token_error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"page_token: {message}")


def _fingerprint(filter_text: str, columns: Sequence[SortColumn], scope: str) -> str:
    """Binds a token to the filter text, the resolved order and the caller's scope."""
    material = json.dumps([filter_text, [[c.sql, c.descending] for c in columns], scope])
    return hashlib.sha256(material.encode()).hexdigest()[:16]


def _encode_value(value: Any) -> Any:
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)  # IntEnum members become plain numbers
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise TypeError("page token timestamps must be timezone-aware")
        return {"t": value.isoformat()}
    raise TypeError(f"cannot put {type(value).__name__} in a page token")


def _decode_value(raw: Any, column: SortColumn) -> Any:
    """A token value checked against its column, so a forged token cannot reach Postgres
    with a value of the wrong type."""
    if raw is None and column.nullable:
        return None
    match column.kind:
        case FieldKind.INT | FieldKind.ENUM:
            if type(raw) is int and _INT64_MIN <= raw <= _INT64_MAX:
                return raw
        case FieldKind.STRING | FieldKind.STRING_LIST:
            if isinstance(raw, str) and "\x00" not in raw:
                return raw
        case FieldKind.BOOL:
            if isinstance(raw, bool):
                return raw
        case FieldKind.TIMESTAMP:
            if isinstance(raw, dict) and isinstance(raw.get("t"), str):
                try:
                    value = datetime.fromisoformat(raw["t"])
                except ValueError:
                    raise _token_error("malformed") from None
                if value.tzinfo is not None:
                    return value
    raise _token_error("malformed")


def _encode_token(fingerprint: str, values: Sequence[Any]) -> str:
    payload = {"f": fingerprint, "v": [_encode_value(v) for v in values]}
    data = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]+")


def _decode_token(token: str, fingerprint: str, columns: Sequence[SortColumn]) -> list[Any]:
    if len(token) > MAX_PAGE_TOKEN_LENGTH or not _TOKEN_CHARS.fullmatch(token):
        raise _token_error("malformed")
    try:
        payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError):  # JSON and UTF-8 errors are ValueErrors
        raise _token_error("malformed") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("v"), list):
        raise _token_error("malformed")
    if payload.get("f") != fingerprint:
        raise _token_error("does not match this filter and order_by")
    if len(payload["v"]) != len(columns):
        raise _token_error("malformed")
    return [_decode_value(raw, column) for raw, column in zip(payload["v"], columns, strict=True)]


def next_page_token(query: ListQuery, last_row_values: Sequence[Any]) -> str:
    """Token for the page after the row whose ``sort_columns(query)`` values are given.

    Values are what asyncpg returns for those columns: int, str, bool, None (nullable
    columns only) and timezone-aware datetime.
    """
    if len(last_row_values) != len(query.columns):
        raise ValueError(
            f"expected {len(query.columns)} sort values {sort_columns(query)}, "
            f"got {len(last_row_values)}"
        )
    return _encode_token(query.fingerprint, last_row_values)


Row = TypeVar("Row")


def finish_page(
    query: ListQuery, rows: Sequence[Row], sort_values: Callable[[Row], Sequence[Any]]
) -> tuple[list[Row], str]:
    """The page to return and its ``next_page_token`` ("" on the last page), from the up to
    ``query.limit`` rows fetched: the one extra row only says that another page exists."""
    page = list(rows[: query.page_size])
    if len(rows) <= query.page_size:
        return page, ""
    return page, next_page_token(query, sort_values(page[-1]))


def _effective_page_size(page_size: int, default: int, maximum: int) -> int:
    if page_size < 0:
        raise InvalidArgumentError("page_size: must be >= 0")
    return min(page_size or default, maximum)


def _conjunction(conditions: Sequence[str]) -> str:
    if len(conditions) <= 1:
        return conditions[0] if conditions else "TRUE"
    return " AND ".join(f"({c})" for c in conditions)


def build_list_query(
    *,
    filter_text: str,
    order_by: str,
    page_size: int,
    page_token: str,
    fields: Mapping[str, FieldSpec],
    default_order: Sequence[OrderKey],
    tiebreak: Sequence[str | FieldSpec],
    first_param: int = 1,
    default_page_size: int = 100,
    max_page_size: int = 1000,
    scope: str = "",
) -> ListQuery:
    """Validate a List/Search request and build its SQL pieces.

    ``tiebreak`` lists NOT NULL columns that make the order unique (``("w.xid", "w.wid")``);
    a plain string is an integer column, a ``FieldSpec`` gives another kind. ``scope`` (for
    example the parent name) is bound into the token so it cannot page a different parent.
    Parameters are numbered from ``first_param``: the filter's first, then the keyset's.
    """
    if not tiebreak:
        raise ValueError("tiebreak must name the columns that make the order unique")
    # 1. Page size, order, and the total order's columns.
    size = _effective_page_size(page_size, default_page_size, max_page_size)
    order = parse_order_by(order_by, fields, default_order)
    columns = _sort_columns(order, fields, tiebreak)
    fingerprint = _fingerprint(filter_text, columns, scope)
    # 2. The filter.
    filter_sql, params = compile_filter(filter_text, fields, first_param=first_param)
    conditions = [] if filter_sql == "TRUE" else [filter_sql]
    # 3. The keyset condition from the token, numbered after the filter's parameters.
    if page_token:
        last = _decode_token(page_token, fingerprint, columns)
        keyset_sql, keyset_params = _keyset_sql(columns, last, first_param + len(params))
        conditions.append(keyset_sql)
        params = params + keyset_params
    return ListQuery(
        where=_conjunction(conditions),
        params=params,
        order_by=_order_by_sql(columns),
        limit=size + 1,
        order=order,
        fingerprint=fingerprint,
        columns=columns,
        page_size=size,
    )


__all__ = [
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_LENGTH",
    "And",
    "Comparison",
    "FieldKind",
    "FieldSpec",
    "ListQuery",
    "Node",
    "Not",
    "Op",
    "Or",
    "OrderKey",
    "SortColumn",
    "build_list_query",
    "compile_filter",
    "compile_node",
    "finish_page",
    "keyset_after",
    "keyset_predicate",
    "next_page_token",
    "parse_filter",
    "parse_order_by",
    "sort_columns",
]
