"""List/Search request language (SPEC §2.1): AIP-160 filters, AIP-132 order_by, keyset pages."""

from __future__ import annotations

import base64
import functools
import heapq
import json
import random
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from xmc.errors import InvalidArgumentError
from xmc.model.states import WorkUnitState
from xmc.query import (
    MAX_FILTER_DEPTH,
    And,
    Comparison,
    FieldKind,
    FieldSpec,
    ListQuery,
    Node,
    Not,
    Op,
    Or,
    OrderKey,
    SortColumn,
    build_list_query,
    compile_filter,
    finish_page,
    keyset_after,
    keyset_predicate,
    next_page_token,
    parse_filter,
    parse_order_by,
    sort_columns,
)

STATE = FieldSpec("w.state", FieldKind.ENUM, WorkUnitState)
FIELDS: dict[str, FieldSpec] = {
    "state": STATE,
    "status.state": STATE,
    "tags": FieldSpec("w.tags", FieldKind.STRING_LIST, sortable=False),
    "create_time": FieldSpec("w.create_time", FieldKind.TIMESTAMP),
    "complete_time": FieldSpec("w.complete_time", FieldKind.TIMESTAMP, nullable=True),
    "title": FieldSpec("e.title", FieldKind.STRING),
    "priority": FieldSpec("w.priority", FieldKind.INT),
    "done": FieldSpec("o.done", FieldKind.BOOL),
}
DEFAULT_ORDER = (OrderKey("create_time", descending=True),)
T0 = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)


def c(field: str, op: str, value: str, wildcard: bool = False, quoted: bool = False) -> Comparison:
    return Comparison(field, Op(op), value, wildcard, quoted)


def build(
    filter_text: str = "",
    order_by: str = "",
    page_size: int = 0,
    page_token: str = "",
    **kwargs: Any,
) -> ListQuery:
    return build_list_query(
        filter_text=filter_text,
        order_by=order_by,
        page_size=page_size,
        page_token=page_token,
        fields=kwargs.pop("fields", FIELDS),
        default_order=kwargs.pop("default_order", DEFAULT_ORDER),
        tiebreak=kwargs.pop("tiebreak", ("w.xid", "w.wid")),
        **kwargs,
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def raw_token(payload: Any) -> str:
    return _b64(json.dumps(payload).encode())


# ---------------------------------------------------------------------------------------
# parse_filter


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", None, id="empty filter matches everything"),
        pytest.param("  \t\n ", None, id="whitespace-only filter matches everything"),
        pytest.param("a=1", c("a", "=", "1"), id="single comparison"),
        pytest.param("  a  =  1  ", c("a", "=", "1"), id="spaces around the comparator"),
        pytest.param("a!=1", c("a", "!=", "1"), id="not equal"),
        pytest.param("a<1", c("a", "<", "1"), id="less than"),
        pytest.param("a<=1", c("a", "<=", "1"), id="less or equal"),
        pytest.param("a>1", c("a", ">", "1"), id="greater than"),
        pytest.param("a>=1", c("a", ">=", "1"), id="greater or equal"),
        pytest.param("a:1", c("a", ":", "1"), id="has"),
        pytest.param("status.state = RUNNING", c("status.state", "=", "RUNNING"), id="dotted name"),
        pytest.param(
            "a=1 OR b=2 AND c=3",
            And((Or((c("a", "=", "1"), c("b", "=", "2"))), c("c", "=", "3"))),
            id="OR binds tighter than AND",
        ),
        pytest.param(
            "a=1 AND b=2 OR c=3",
            And((c("a", "=", "1"), Or((c("b", "=", "2"), c("c", "=", "3"))))),
            id="OR binds tighter than AND on the right too",
        ),
        pytest.param(
            "a=1 b=2",
            And((c("a", "=", "1"), c("b", "=", "2"))),
            id="adjacent terms are an implicit AND",
        ),
        pytest.param(
            "a=1 b=2 OR c=3",
            And((c("a", "=", "1"), Or((c("b", "=", "2"), c("c", "=", "3"))))),
            id="implicit AND is looser than OR",
        ),
        pytest.param(
            "a=1 AND b=2 AND c=3",
            And((c("a", "=", "1"), c("b", "=", "2"), c("c", "=", "3"))),
            id="chained ANDs are one flat node",
        ),
        pytest.param(
            "(a=1 AND b=2) c=3",
            And((c("a", "=", "1"), c("b", "=", "2"), c("c", "=", "3"))),
            id="a parenthesised AND inside an AND is flattened",
        ),
        pytest.param(
            "a=1 OR (b=2 AND c=3)",
            Or((c("a", "=", "1"), And((c("b", "=", "2"), c("c", "=", "3"))))),
            id="parentheses override precedence",
        ),
        pytest.param("NOT a=1", Not(c("a", "=", "1")), id="NOT"),
        pytest.param("-a=1", Not(c("a", "=", "1")), id="prefix minus negates"),
        pytest.param("NOT NOT a=1", Not(Not(c("a", "=", "1"))), id="double negation is kept"),
        pytest.param(
            "-(a=1 OR b=2)",
            Not(Or((c("a", "=", "1"), c("b", "=", "2")))),
            id="minus before parentheses",
        ),
        pytest.param(
            "NOT a=1 b=2",
            And((Not(c("a", "=", "1")), c("b", "=", "2"))),
            id="NOT applies to one term only",
        ),
        pytest.param("NOT(a=1)", Not(c("a", "=", "1")), id="NOT directly before a parenthesis"),
        pytest.param(
            't = "a b"', c("t", "=", "a b", quoted=True), id="double-quoted value keeps spaces"
        ),
        pytest.param("t = 'a b'", c("t", "=", "a b", quoted=True), id="single-quoted value"),
        pytest.param(
            't = "it\'s"', c("t", "=", "it's", quoted=True), id="other quote inside a string"
        ),
        pytest.param(
            r't = "say \"hi\"\n\t\\"',
            c("t", "=", 'say "hi"\n\t\\', quoted=True),
            id="backslash escapes",
        ),
        pytest.param(r"t = 'it\'s'", c("t", "=", "it's", quoted=True), id="escaped single quote"),
        pytest.param('t = ""', c("t", "=", "", quoted=True), id="empty string"),
        pytest.param(
            't = "AND"', c("t", "=", "AND", quoted=True), id="keyword inside quotes is a value"
        ),
        pytest.param("t = AND", c("t", "=", "AND"), id="a keyword after a comparator is a value"),
        pytest.param(
            't="héllo wörld"', c("t", "=", "héllo wörld", quoted=True), id="non-ascii value"
        ),
        pytest.param("p > -3", c("p", ">", "-3"), id="negative number"),
        pytest.param(
            "create_time > 2024-01-02T03:04:05+02:00",
            c("create_time", ">", "2024-01-02T03:04:05+02:00"),
            id="bare RFC 3339 timestamp keeps its colons",
        ),
        pytest.param(
            "(create_time>2024-01-02T03:04:05Z)",
            c("create_time", ">", "2024-01-02T03:04:05Z"),
            id="bare value stops at a closing parenthesis",
        ),
        pytest.param("t = foo*", c("t", "=", "foo", wildcard=True), id="bare trailing star"),
        pytest.param(
            't = "foo*"', c("t", "=", "foo", wildcard=True, quoted=True), id="quoted trailing star"
        ),
        pytest.param(
            r't = "foo\*"', c("t", "=", "foo*", quoted=True), id="escaped star is literal"
        ),
        pytest.param("t = a*b", c("t", "=", "a*b"), id="inner star is literal"),
        pytest.param("tags:*", c("tags", ":", "", wildcard=True), id="presence test"),
    ],
)
def test_parse_filter(text: str, expected: Node | None) -> None:
    assert parse_filter(text) == expected


def _nested_parens(depth: int) -> str:
    return "(" * depth + "a=1" + ")" * depth


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "state = RUNNING)",
            "filter: unexpected ')' at position 15",
            id="stray closing parenthesis",
        ),
        pytest.param("()", "filter: unexpected ')' at position 1", id="empty parentheses"),
        pytest.param(
            "x=1 (state = RUNNING",
            "filter: missing ')' for '(' at position 4",
            id="unclosed parenthesis",
        ),
        pytest.param(
            "(a=1 'x')",
            "filter: unexpected \"'x'\" at position 5",
            id="a string where ')' is expected",
        ),
        pytest.param(
            "state",
            "filter: expected a comparison operator after 'state' at position 5",
            id="bare name (global restriction) is not supported",
        ),
        pytest.param(
            "state RUNNING",
            "filter: expected a comparison operator after 'state' at position 6",
            id="missing comparator",
        ),
        pytest.param(
            "a=1 and b=2",
            "filter: expected a comparison operator after 'and' at position 8",
            id="keywords are upper case",
        ),
        pytest.param("state =", "filter: missing value after '=' at position 6", id="no value"),
        pytest.param(
            "state = (RUNNING)",
            "filter: missing value after '=' at position 6",
            id="parenthesised value",
        ),
        pytest.param(
            'title = "abc',
            "filter: unterminated string starting at position 8",
            id="unterminated string",
        ),
        pytest.param(
            r'title = "abc\"',
            "filter: unterminated string starting at position 8",
            id="escaped quote does not close the string",
        ),
        pytest.param(
            r'title = "a\qb"', "filter: unknown escape '\\q' at position 10", id="unknown escape"
        ),
        pytest.param(
            "AND state = RUNNING",
            "filter: unexpected 'AND' at position 0",
            id="leading AND",
        ),
        pytest.param(
            "state = RUNNING AND",
            "filter: unexpected end of filter at position 19",
            id="trailing AND",
        ),
        pytest.param(
            "a=1 OR OR b=2",
            "filter: unexpected 'OR' at position 7",
            id="doubled OR",
        ),
        pytest.param("NOT", "filter: unexpected end of filter at position 3", id="lonely NOT"),
        pytest.param(
            "state = RUNNING #",
            "filter: unexpected character '#' at position 16",
            id="unexpected character",
        ),
        pytest.param("a ! b", "filter: unexpected character '!' at position 2", id="lonely bang"),
        pytest.param(
            "1abc = 2",
            "filter: invalid field name '1abc' at position 0",
            id="name starts with digit",
        ),
        pytest.param(
            "a..b = 2", "filter: invalid field name 'a..b' at position 0", id="empty name segment"
        ),
        pytest.param(
            '"foo"', "filter: unexpected '\"foo\"' at position 0", id="value without a field"
        ),
        pytest.param(
            "t = a\x00b", "filter: NUL character in value at position 4", id="NUL in a value"
        ),
        pytest.param(
            "a=1 " * 500 + "b",
            "filter: longer than 2000 characters",
            id="filter longer than the bound",
        ),
        pytest.param(
            _nested_parens(MAX_FILTER_DEPTH + 1),
            "filter: nested deeper than 32 levels at position 32",
            id="too many parentheses",
        ),
        pytest.param(
            "-" * (MAX_FILTER_DEPTH + 1) + "a=1",
            "filter: nested deeper than 32 levels at position 32",
            id="too many minus signs",
        ),
        pytest.param(
            "NOT " * (MAX_FILTER_DEPTH + 1) + "a=1",
            "filter: nested deeper than 32 levels at position 128",
            id="too many NOTs",
        ),
    ],
)
def test_parse_filter_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        parse_filter(text)
    assert str(raised.value) == message


def test_nesting_up_to_the_bound_is_accepted() -> None:
    assert parse_filter(_nested_parens(MAX_FILTER_DEPTH)) == c("a", "=", "1")


def test_hostile_filters_at_the_length_bound_parse_quickly() -> None:
    """Work is linear: the longest legal filters parse without deep recursion."""
    assert isinstance(parse_filter(("a=1 OR " * 285)[:-4]), Or)
    assert isinstance(parse_filter("a=1 " * 500), And)
    deep = "(" * MAX_FILTER_DEPTH + " OR ".join(["a=1"] * 276) + ")" * MAX_FILTER_DEPTH
    assert len(deep) <= 2000
    parsed = parse_filter(deep)
    assert isinstance(parsed, Or)
    assert len(parsed.items) == 276


# ---------------------------------------------------------------------------------------
# compile_filter


@pytest.mark.parametrize(
    ("text", "sql", "params"),
    [
        pytest.param("", "TRUE", [], id="empty filter is TRUE"),
        pytest.param(
            "state = RUNNING", "w.state = $1::bigint", [4], id="enum by case-sensitive name"
        ),
        pytest.param("state = 4", "w.state = $1::bigint", [4], id="enum by number"),
        pytest.param('state = "RUNNING"', "w.state = $1::bigint", [4], id="quoted enum name"),
        pytest.param(
            "status.state != FAILED", "w.state != $1::bigint", [11], id="dotted alias of a field"
        ),
        pytest.param("state:RUNNING", "w.state = $1::bigint", [4], id="has on an enum is equality"),
        pytest.param("state >= COMPLETED", "w.state >= $1::bigint", [10], id="enum ordering"),
        pytest.param("priority >= -2", "w.priority >= $1::bigint", [-2], id="negative integer"),
        pytest.param("priority < +7", "w.priority < $1::bigint", [7], id="explicit plus sign"),
        pytest.param('title = "Exact"', "e.title = $1", ["Exact"], id="string equality is exact"),
        pytest.param("title < m", "e.title < $1", ["m"], id="string ordering"),
        pytest.param(
            'title:"50%_off\\\\"',
            "e.title ILIKE $1",
            ["%50\\%\\_off\\\\%"],
            id="has on a string is an escaped case-insensitive substring match",
        ),
        pytest.param(
            'title = "Run*"', "e.title LIKE $1", ["Run%"], id="trailing star is a prefix match"
        ),
        pytest.param(
            "title != a_b*",
            "e.title NOT LIKE $1",
            ["a\\_b%"],
            id="negated prefix match escapes LIKE characters",
        ),
        pytest.param(r'title = "a\*"', "e.title = $1", ["a*"], id="escaped star is exact"),
        pytest.param("tags:gpu", "$1 = ANY(w.tags)", ["gpu"], id="has on a list is membership"),
        pytest.param("tags = gpu", "$1 = ANY(w.tags)", ["gpu"], id="equality on a list too"),
        pytest.param("tags:*", "cardinality(w.tags) > 0", [], id="list presence"),
        pytest.param("title:*", "e.title <> ''", [], id="string presence"),
        pytest.param("complete_time:*", "w.complete_time IS NOT NULL", [], id="nullable presence"),
        pytest.param(
            "create_time > 2024-01-02T03:04:05Z",
            "w.create_time > $1",
            [T0],
            id="bare timestamp",
        ),
        pytest.param(
            'create_time <= "2024-01-02T05:04:05.5+02:00"',
            "w.create_time <= $1",
            [T0 + timedelta(microseconds=500_000)],
            id="quoted timestamp with offset and fraction",
        ),
        pytest.param("done = true", "o.done = $1", [True], id="bool true"),
        pytest.param("done != FALSE", "o.done != $1", [False], id="bool false any case"),
        pytest.param(
            "state = RUNNING OR state = STOPPED tags:gpu",
            "(w.state = $1::bigint OR w.state = $2::bigint) AND $3 = ANY(w.tags)",
            [4, 8, "gpu"],
            id="parameters numbered in order of appearance",
        ),
        pytest.param(
            "-tags:gpu AND NOT (priority > 1 title:x)",
            "NOT ($1 = ANY(w.tags)) AND NOT (w.priority > $2::bigint AND e.title ILIKE $3)",
            ["gpu", 1, "%x%"],
            id="negations",
        ),
        pytest.param(
            "state = RUNNING OR (priority = 1 AND title = x)",
            "w.state = $1::bigint OR (w.priority = $2::bigint AND e.title = $3)",
            [4, 1, "x"],
            id="nested AND inside OR keeps its parentheses",
        ),
    ],
)
def test_compile_filter(text: str, sql: str, params: list[Any]) -> None:
    assert compile_filter(text, FIELDS, first_param=1) == (sql, params)


def test_compile_filter_numbers_from_first_param() -> None:
    assert compile_filter("priority = 1 tags:a", FIELDS, first_param=5) == (
        "w.priority = $5::bigint AND $6 = ANY(w.tags)",
        [1, "a"],
    )


_STATES = ", ".join(s.name for s in WorkUnitState)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "foo = 1",
            "filter: unknown field 'foo'; known: complete_time, create_time, done, priority, "
            "state, status.state, tags, title",
            id="unknown field lists the known ones",
        ),
        pytest.param(
            "tags < a",
            "filter: field 'tags' does not support '<'; use one of = :",
            id="ordering on a list",
        ),
        pytest.param(
            "tags != a",
            "filter: field 'tags' does not support '!='; use one of = :",
            id="not-equal on a list",
        ),
        pytest.param(
            "create_time : 2024-01-02T03:04:05Z",
            "filter: field 'create_time' does not support ':'; use one of = != < <= > >=",
            id="has on a timestamp",
        ),
        pytest.param(
            "done < true",
            "filter: field 'done' does not support '<'; use one of = != :",
            id="ordering on a bool",
        ),
        pytest.param(
            "priority = high",
            "filter: field 'priority' needs an integer, got 'high'",
            id="integer field with a word",
        ),
        pytest.param(
            "priority = 1.5",
            "filter: field 'priority' needs an integer, got '1.5'",
            id="integer field with a decimal",
        ),
        pytest.param(
            "priority = 9223372036854775808",
            "filter: field 'priority' value 9223372036854775808 is out of range",
            id="integer beyond int64",
        ),
        pytest.param(
            "state = running",
            f"filter: field 'state' has no value 'running'; valid: {_STATES}",
            id="enum names are case-sensitive",
        ),
        pytest.param(
            "state = 99",
            f"filter: field 'state' has no value '99'; valid: {_STATES}",
            id="enum number out of range",
        ),
        pytest.param(
            "create_time > 2024-01-02",
            "filter: field 'create_time' needs an RFC 3339 timestamp such as "
            "2024-01-02T03:04:05Z, got '2024-01-02'",
            id="date without time",
        ),
        pytest.param(
            "create_time > 2024-01-02T03:04:05",
            "filter: field 'create_time' needs an RFC 3339 timestamp such as "
            "2024-01-02T03:04:05Z, got '2024-01-02T03:04:05'",
            id="timestamp without a time zone",
        ),
        pytest.param(
            "create_time > 2024-02-30T00:00:00Z",
            "filter: field 'create_time' has an impossible timestamp '2024-02-30T00:00:00Z'",
            id="impossible date",
        ),
        pytest.param(
            "done = yes",
            "filter: field 'done' needs true or false, got 'yes'",
            id="bool with another word",
        ),
        pytest.param(
            "priority = 1*",
            "filter: field 'priority': a trailing '*' is only a wildcard in '=' or '!=' on text "
            "fields (write \\* in quotes for a literal star)",
            id="wildcard on an integer",
        ),
        pytest.param(
            "title:ab*",
            "filter: field 'title': a trailing '*' is only a wildcard",
            id="wildcard with has",
        ),
        pytest.param(
            "title < ab*",
            "filter: field 'title': a trailing '*' is only a wildcard",
            id="wildcard with ordering",
        ),
        pytest.param(
            "tags = gp*",
            "filter: field 'tags': a trailing '*' is only a wildcard",
            id="wildcard on a list",
        ),
    ],
)
def test_compile_filter_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        compile_filter(text, FIELDS, first_param=1)
    assert str(raised.value).startswith(message)


# ---------------------------------------------------------------------------------------
# parse_order_by


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param("", DEFAULT_ORDER, id="empty means the default"),
        pytest.param("   ", DEFAULT_ORDER, id="blank means the default"),
        pytest.param("title", (OrderKey("title"),), id="ascending by default"),
        pytest.param("title asc", (OrderKey("title"),), id="explicit asc"),
        pytest.param(" title   DESC ", (OrderKey("title", True),), id="desc in any case"),
        pytest.param(
            "create_time desc, title",
            (OrderKey("create_time", True), OrderKey("title")),
            id="several keys",
        ),
        pytest.param(
            "status.state,priority desc",
            (OrderKey("status.state"), OrderKey("priority", True)),
            id="dotted name and no space after the comma",
        ),
    ],
)
def test_parse_order_by(text: str, expected: tuple[OrderKey, ...]) -> None:
    assert parse_order_by(text, FIELDS, DEFAULT_ORDER) == expected


_SORTABLE = "complete_time, create_time, done, priority, state, status.state, title"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(
            "foo", f"order_by: unknown field 'foo'; sortable: {_SORTABLE}", id="unknown field"
        ),
        pytest.param(
            "tags desc",
            f"order_by: field 'tags' cannot be sorted on; sortable: {_SORTABLE}",
            id="field that is not sortable",
        ),
        pytest.param(
            "title up",
            "order_by: expected 'field' or 'field desc', got 'title up'",
            id="unknown direction",
        ),
        pytest.param(
            "title desc priority",
            "order_by: expected 'field' or 'field desc', got 'title desc priority'",
            id="missing comma",
        ),
        pytest.param("title,", "order_by: empty sort key (stray comma?)", id="trailing comma"),
        pytest.param(", title", "order_by: empty sort key (stray comma?)", id="leading comma"),
        pytest.param(
            "state, status.state desc",
            "order_by: field 'status.state' repeats an earlier sort key",
            id="alias of a key already used",
        ),
        pytest.param("title," * 200, "order_by: longer than 1000 characters", id="too long"),
    ],
)
def test_parse_order_by_errors(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        parse_order_by(text, FIELDS, DEFAULT_ORDER)
    assert str(raised.value) == message


# ---------------------------------------------------------------------------------------
# build_list_query


@pytest.mark.parametrize(
    ("page_size", "expected"),
    [
        pytest.param(0, 100, id="zero means the default"),
        pytest.param(1, 1, id="one"),
        pytest.param(250, 250, id="within bounds"),
        pytest.param(1000, 1000, id="the maximum"),
        pytest.param(5000, 1000, id="above the maximum is clamped"),
    ],
)
def test_page_size(page_size: int, expected: int) -> None:
    query = build(page_size=page_size)
    assert (query.page_size, query.limit) == (expected, expected + 1)


def test_negative_page_size_is_rejected() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^page_size: must be >= 0$"):
        build(page_size=-1)


def test_first_page_query() -> None:
    query = build("state = RUNNING", "title desc", page_size=10, first_param=3)
    assert (query.where, query.params) == ("w.state = $3::bigint", [4])
    assert query.order_by == "e.title DESC, w.xid, w.wid"
    assert query.order == (OrderKey("title", True),)
    assert sort_columns(query) == ["e.title", "w.xid", "w.wid"]


def test_first_page_without_filter_is_true() -> None:
    query = build()
    assert (query.where, query.params) == ("TRUE", [])
    assert query.order_by == "w.create_time DESC, w.xid, w.wid"


def test_tiebreak_columns_already_ordered_on_are_not_repeated() -> None:
    fields = {**FIELDS, "id": FieldSpec("w.xid", FieldKind.INT)}
    query = build(order_by="id desc", fields=fields)
    assert sort_columns(query) == ["w.xid", "w.wid"]
    assert query.order_by == "w.xid DESC, w.wid"


def test_nullable_columns_spell_out_postgres_null_order() -> None:
    assert build(order_by="complete_time").order_by == "w.complete_time NULLS LAST, w.xid, w.wid"
    assert (
        build(order_by="complete_time desc").order_by
        == "w.complete_time DESC NULLS FIRST, w.xid, w.wid"
    )


def _second_page(
    order_by: str, last: Sequence[Any], filter_text: str = "", first_param: int = 1
) -> ListQuery:
    first = build(filter_text, order_by, first_param=first_param)
    return build(filter_text, order_by, page_token=next_page_token(first, last), first_param=1)


@pytest.mark.parametrize(
    ("order_by", "last", "where", "params"),
    [
        pytest.param(
            "priority",
            [3, 1, 2],
            "w.priority >= $1::bigint AND (w.priority > $1::bigint"
            " OR (w.priority = $1::bigint AND w.xid > $2::bigint)"
            " OR (w.priority = $1::bigint AND w.xid = $2::bigint AND w.wid > $3::bigint))",
            [3, 1, 2],
            id="ascending key then ascending tiebreaks",
        ),
        pytest.param(
            "create_time desc, title",
            [T0, "t", 1, 2],
            "w.create_time <= $1 AND (w.create_time < $1"
            " OR (w.create_time = $1 AND e.title > $2)"
            " OR (w.create_time = $1 AND e.title = $2 AND w.xid > $3::bigint)"
            " OR (w.create_time = $1 AND e.title = $2 AND w.xid = $3::bigint"
            " AND w.wid > $4::bigint))",
            [T0, "t", 1, 2],
            id="mixed descending and ascending keys",
        ),
        pytest.param(
            "complete_time",
            [T0, 1, 2],
            "w.complete_time > $1 OR w.complete_time IS NULL"
            " OR (w.complete_time = $1 AND w.xid > $2::bigint)"
            " OR (w.complete_time = $1 AND w.xid = $2::bigint AND w.wid > $3::bigint)",
            [T0, 1, 2],
            id="nullable ascending after a value: larger values, then the NULLs",
        ),
        pytest.param(
            "complete_time",
            [None, 1, 2],
            "(w.complete_time IS NULL AND w.xid > $1::bigint)"
            " OR (w.complete_time IS NULL AND w.xid = $1::bigint AND w.wid > $2::bigint)",
            [1, 2],
            id="nullable ascending after NULL: only later NULL rows",
        ),
        pytest.param(
            "complete_time desc",
            [T0, 1, 2],
            "w.complete_time < $1"
            " OR (w.complete_time = $1 AND w.xid > $2::bigint)"
            " OR (w.complete_time = $1 AND w.xid = $2::bigint AND w.wid > $3::bigint)",
            [T0, 1, 2],
            id="nullable descending after a value: smaller values only",
        ),
        pytest.param(
            "complete_time desc",
            [None, 1, 2],
            "w.complete_time IS NOT NULL"
            " OR (w.complete_time IS NULL AND w.xid > $1::bigint)"
            " OR (w.complete_time IS NULL AND w.xid = $1::bigint AND w.wid > $2::bigint)",
            [1, 2],
            id="nullable descending after NULL: every value, then later NULL rows",
        ),
    ],
)
def test_keyset_condition_sql(
    order_by: str, last: list[Any], where: str, params: list[Any]
) -> None:
    query = _second_page(order_by, last)
    assert (query.where, query.params) == (where, params)


def test_keyset_parameters_follow_the_filter_parameters() -> None:
    first = build("state = RUNNING", "priority desc", first_param=4)
    query = build(
        "state = RUNNING",
        "priority desc",
        page_token=next_page_token(first, [7, 1, 2]),
        first_param=4,
    )
    assert query.where == (
        "(w.state = $4::bigint) AND (w.priority <= $5::bigint AND (w.priority < $5::bigint"
        " OR (w.priority = $5::bigint AND w.xid > $6::bigint)"
        " OR (w.priority = $5::bigint AND w.xid = $6::bigint AND w.wid > $7::bigint)))"
    )
    assert query.params == [4, 7, 1, 2]


def test_string_tiebreak_columns() -> None:
    fields = {"create_time": FieldSpec("o.create_time", FieldKind.TIMESTAMP)}
    kwargs: dict[str, Any] = {
        "fields": fields,
        "tiebreak": (FieldSpec("o.name", FieldKind.STRING),),
    }
    first = build(order_by="create_time", **kwargs)
    query = build(
        order_by="create_time", page_token=next_page_token(first, [T0, "ops/1"]), **kwargs
    )
    assert query.where == (
        "o.create_time >= $1 AND (o.create_time > $1 OR (o.create_time = $1 AND o.name > $2))"
    )
    assert query.params == [T0, "ops/1"]


# ---------------------------------------------------------------------------------------
# Page tokens


@pytest.mark.parametrize(
    ("order_by", "last"),
    [
        pytest.param("", [T0, 1, 2], id="default order"),
        pytest.param("title desc", ["é ünïcode \"'", 3, 4], id="string value"),
        pytest.param(
            "create_time",
            [datetime(2024, 1, 2, 5, 4, 5, 123456, tzinfo=timezone(timedelta(hours=2))), 1, 2],
            id="timestamp with an offset and microseconds",
        ),
        pytest.param("done desc, state", [True, WorkUnitState.RUNNING, 5, 6], id="bool and enum"),
        pytest.param("complete_time", [None, 2**62, 1], id="NULL value and a large id"),
    ],
)
def test_page_token_round_trip(order_by: str, last: list[Any]) -> None:
    first = build(order_by=order_by)
    token = next_page_token(first, last)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", token), "URL-safe, unpadded"
    second = build(order_by=order_by, page_token=token)
    assert second.params == [v for v in last if v is not None]
    assert [type(v) for v in second.params] == [
        int if isinstance(v, int) and not isinstance(v, bool) else type(v)
        for v in last
        if v is not None
    ]


def test_equivalent_order_by_spellings_accept_each_others_tokens() -> None:
    token = next_page_token(build(order_by=""), [T0, 1, 2])
    assert build(order_by="create_time   DESC", page_token=token).params == [T0, 1, 2]


@pytest.mark.parametrize(
    ("kwargs", "other"),
    [
        pytest.param({}, {"filter_text": "state = RUNNING"}, id="different filter"),
        pytest.param(
            {"filter_text": "a=1"}, {"filter_text": "a=1 "}, id="filter text must match exactly"
        ),
        pytest.param({}, {"order_by": "create_time"}, id="different direction"),
        pytest.param({"scope": "experiments/1"}, {"scope": "experiments/2"}, id="other parent"),
        pytest.param({}, {"tiebreak": ("e.xid",)}, id="other resource's columns"),
    ],
)
def test_token_from_another_query_is_rejected(
    kwargs: dict[str, Any], other: dict[str, Any]
) -> None:
    fields = {**FIELDS, "a": FieldSpec("w.a", FieldKind.INT)}
    first = build(fields=fields, **kwargs)
    token = next_page_token(first, [T0, 1, 2][: len(first.columns)])
    with pytest.raises(InvalidArgumentError) as raised:
        build(fields=fields, page_token=token, **{**kwargs, **other})
    assert str(raised.value) == "page_token: does not match this filter and order_by"


def _malformed_tokens() -> list[Any]:
    fp = build(order_by="complete_time").fingerprint  # columns: complete_time, xid, wid
    ts = {"t": T0.isoformat()}
    cases = {
        "not base64": "!!!!",
        "bad padding length": "a",
        "not UTF-8": _b64(b'"\xc3\x28"'),
        "not JSON": _b64(b"{nope"),
        "JSON but not an object": raw_token([fp, []]),
        "values missing": raw_token({"f": fp}),
        "too few values": raw_token({"f": fp, "v": [ts, 1]}),
        "too many values": raw_token({"f": fp, "v": [ts, 1, 2, 3]}),
        "string for an integer": raw_token({"f": fp, "v": [ts, "1", 2]}),
        "bool for an integer": raw_token({"f": fp, "v": [ts, True, 2]}),
        "float for an integer": raw_token({"f": fp, "v": [ts, 1.0, 2]}),
        "integer beyond int64": raw_token({"f": fp, "v": [ts, 2**63, 2]}),
        "NULL in a NOT NULL column": raw_token({"f": fp, "v": [ts, None, 2]}),
        "bare string for a timestamp": raw_token({"f": fp, "v": [T0.isoformat(), 1, 2]}),
        "naive timestamp": raw_token({"f": fp, "v": [{"t": "2024-01-02T03:04:05"}, 1, 2]}),
        "unparsable timestamp": raw_token({"f": fp, "v": [{"t": "yesterday"}, 1, 2]}),
        "longer than the bound": "A" * 5000,
    }
    return [pytest.param(token, id=name) for name, token in cases.items()]


@pytest.mark.parametrize("token", _malformed_tokens())
def test_malformed_token_is_rejected(token: str) -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        build(order_by="complete_time", page_token=token)
    assert str(raised.value) == "page_token: malformed"


def test_string_token_value_with_nul_is_rejected() -> None:
    fp = build(order_by="title").fingerprint
    with pytest.raises(InvalidArgumentError, match=r"^page_token: malformed$"):
        build(order_by="title", page_token=raw_token({"f": fp, "v": ["a\x00", 1, 2]}))


def test_next_page_token_checks_the_caller_contract() -> None:
    query = build()
    with pytest.raises(ValueError, match="expected 3 sort values"):
        next_page_token(query, [T0, 1])
    with pytest.raises(TypeError, match="timezone-aware"):
        next_page_token(query, [datetime(2024, 1, 2), 1, 2])
    with pytest.raises(TypeError, match="cannot put float"):
        next_page_token(query, [T0, 1.5, 2])


def test_tiebreak_is_required() -> None:
    with pytest.raises(ValueError, match="tiebreak"):
        build(tiebreak=())


@pytest.mark.parametrize(
    ("fetched", "page_len", "has_next"),
    [
        pytest.param(0, 0, False, id="no rows"),
        pytest.param(2, 2, False, id="short page is the last"),
        pytest.param(3, 3, False, id="exactly page_size rows is the last page"),
        pytest.param(4, 3, True, id="the extra row means another page"),
    ],
)
def test_finish_page(fetched: int, page_len: int, has_next: bool) -> None:
    query = build(page_size=3)
    rows = [(T0, i, i) for i in range(fetched)]
    page, token = finish_page(query, rows, lambda row: row)
    assert len(page) == page_len
    assert bool(token) == has_next
    if has_next:
        assert build(page_size=3, page_token=token).params == [T0, 2, 2]


# ---------------------------------------------------------------------------------------
# Keyset paging never skips or repeats rows (simulated in Python)


def _reference_cmp(columns: Sequence[SortColumn], x: Sequence[Any], y: Sequence[Any]) -> int:
    """Independent statement of the order: column by column, NULL greatest, desc flips."""
    for column, a, b in zip(columns, x, y, strict=True):
        if a == b:
            continue
        greater = a is None or (b is not None and a > b)
        return (-1 if greater else 1) if column.descending else (1 if greater else -1)
    return 0


def _sorted(columns: Sequence[SortColumn], rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return sorted(rows, key=functools.cmp_to_key(functools.partial(_reference_cmp, columns)))


def _smallest(
    columns: Sequence[SortColumn], rows: list[tuple[Any, ...]], n: int
) -> list[tuple[Any, ...]]:
    """``ORDER BY … LIMIT n``."""
    return heapq.nsmallest(
        n, rows, key=functools.cmp_to_key(functools.partial(_reference_cmp, columns))
    )


ORDERS = [
    "priority desc, title",
    "title, priority desc",
    "complete_time desc, priority",
    "complete_time, title desc, priority",
    "done, create_time desc",
    "",
]


def _random_row(rng: random.Random, xid: int) -> dict[str, Any]:
    return {
        "w.priority": rng.randint(0, 3),
        "e.title": rng.choice(["a", "b", "B", "c"]),
        "w.complete_time": rng.choice([None, T0, T0 + timedelta(seconds=1)]),
        "o.done": rng.choice([True, False]),
        "w.create_time": T0 + timedelta(seconds=rng.randint(0, 5)),
        "w.xid": xid,
        "w.wid": rng.randint(1, 3),
    }


@pytest.mark.parametrize("order_by", [pytest.param(o, id=o or "default order") for o in ORDERS])
def test_keyset_after_matches_the_reference_order(order_by: str) -> None:
    rng = random.Random(order_by)
    columns = build(order_by=order_by).columns
    rows = [_random_row(rng, rng.randint(1, 3)) for _ in range(300)]
    for x in rows:
        y = rng.choice(rows)
        xv, yv = [x[c.sql] for c in columns], [y[c.sql] for c in columns]
        assert keyset_after(columns, yv, xv) == (_reference_cmp(columns, xv, yv) > 0)


@pytest.mark.parametrize("order_by", [pytest.param(o, id=o or "default order") for o in ORDERS])
@pytest.mark.parametrize("page_size", [2, 7, 50])
def test_paging_neither_skips_nor_repeats_under_concurrent_inserts(
    order_by: str, page_size: int
) -> None:
    rng = random.Random(f"{order_by}/{page_size}")
    next_xid = iter(range(1, 10_000))
    table = [_random_row(rng, next(next_xid)) for _ in range(300)]
    original = {row["w.xid"] for row in table}
    seen: list[tuple[Any, ...]] = []
    token = ""
    while True:
        # The store's side: WHERE keyset ORDER BY … LIMIT page_size + 1 over the table now.
        query = build(order_by=order_by, page_size=page_size, page_token=token)
        values = [tuple(row[c] for c in sort_columns(query)) for row in table]
        last = next_page_token_values(query, token)
        after = (
            values if last is None else list(filter(keyset_predicate(query.columns, last), values))
        )
        page, token = finish_page(query, _smallest(query.columns, after, query.limit), lambda v: v)
        seen.extend(page)
        if not token:
            break
        # Concurrent writers add rows anywhere in the order between two pages.
        table.extend(_random_row(rng, next(next_xid)) for _ in range(rng.randint(0, 3)))
    xid_index = sort_columns(query).index("w.xid")
    seen_xids = [row[xid_index] for row in seen]
    assert len(seen_xids) == len(set(seen_xids)), "a row was returned twice"
    assert original <= set(seen_xids), "a row that existed before paging was skipped"
    assert seen == _sorted(query.columns, seen), "pages are not in order"


def next_page_token_values(query: ListQuery, token: str) -> tuple[Any, ...] | None:
    """The last row's values a token carries, read back through the public API: the keyset
    parameters of the query built from it (every row here has non-NULL tiebreaks)."""
    if not token:
        return None
    payload = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    decoded = iter(query.params)
    return tuple(None if raw is None else next(decoded) for raw in payload["v"])
