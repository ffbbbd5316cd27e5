"""``args.<key>`` in List/Search requests (docs/decisions/0035-args-are-filterable.md):
typed comparisons, safe keys, two sort columns per arg key, numeric page-token values."""

from __future__ import annotations

import base64
import json
import re
from decimal import Decimal
from typing import Any

import pytest

from xmc.errors import InvalidArgumentError
from xmc.query import (
    FieldKind,
    FieldSpec,
    OrderKey,
    build_list_query,
    compile_filter,
    finish_page,
    parse_order_by,
    sort_columns,
)
from xmc.query.sql import is_number

FIELDS: dict[str, FieldSpec] = {
    "wid": FieldSpec("w.wid", FieldKind.INT),
    "tags": FieldSpec("w.tags", FieldKind.STRING_LIST, sortable=False),
    "args": FieldSpec("w.args", FieldKind.ARGS, numbers="w.arg_numbers"),
}
LR = "(w.args ->> 'lr')"
LR_NUMBER = "((w.arg_numbers ->> 'lr')::numeric)"


@pytest.mark.parametrize(
    ("text", "sql", "params"),
    [
        pytest.param("args.lr > 0.01", f"{LR_NUMBER} > $1::numeric", [Decimal("0.01")],
                     id="number literal compares numerically"),
        pytest.param("args.layers >= 4", "((w.arg_numbers ->> 'layers')::numeric) >= $1::numeric",
                     [Decimal(4)], id="integer literal is a number"),
        pytest.param("args.lr = -1e-3", f"{LR_NUMBER} = $1::numeric", [Decimal("-0.001")],
                     id="signed exponent"),
        pytest.param('args.lr = "0.01"', f"{LR} = $1", ["0.01"],
                     id="quoted literal compares as text"),
        pytest.param("args.opt = adam", "(w.args ->> 'opt') = $1", ["adam"],
                     id="bare word compares as text"),
        pytest.param("args.opt != adam", "(w.args ->> 'opt') != $1", ["adam"], id="not equal"),
        pytest.param("args.lr = NaN", f"{LR} = $1", ["NaN"], id="NaN is text"),
        pytest.param("args.lr < inf", f"{LR} < $1", ["inf"], id="inf is text"),
        pytest.param("args.lr:0.1", f"{LR_NUMBER} = $1::numeric", [Decimal("0.1")],
                     id="has on an arg is equality"),
        pytest.param("args.lr:*", f"{LR} IS NOT NULL", [], id="presence"),
        pytest.param("-args.lr:*", f"NOT ({LR} IS NOT NULL)", [], id="absence"),
        pytest.param("args.opt = ad*", "(w.args ->> 'opt') LIKE $1", ["ad%"],
                     id="prefix wildcard"),
        pytest.param('args.opt != "a_%*"', "(w.args ->> 'opt') NOT LIKE $1", ["a\\_\\%%"],
                     id="wildcard escapes LIKE characters"),
        pytest.param("args.model.depth = 3",
                     "((w.arg_numbers ->> 'model.depth')::numeric) = $1::numeric", [Decimal(3)],
                     id="dotted key"),
        pytest.param("args.lr > 0.01 AND (wid < 5 OR NOT args.opt = sgd)",
                     f"{LR_NUMBER} > $1::numeric AND (w.wid < $2::bigint OR "
                     "NOT ((w.args ->> 'opt') = $3))",
                     [Decimal("0.01"), 5, "sgd"], id="combined with other fields"),
    ],
)  # fmt: skip
def test_compile_arg_filters(text: str, sql: str, params: list[Any]) -> None:
    assert compile_filter(text, FIELDS, first_param=1) == (sql, params)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("args = 1", "unknown field 'args'", id="the map itself"),
        pytest.param("args.1x = 1", "invalid field name", id="key leading with a digit"),
        pytest.param(f"args.{'k' * 65} = 1", f"key '{'k' * 65}' is not allowed",
                     id="key too long"),
        pytest.param("wid.lr = 1", "unknown field 'wid.lr'", id="not a map"),
        pytest.param("args.lr > 0.*", "only a wildcard in '=' or '!='",
                     id="wildcard on an ordering"),
        pytest.param("argz.lr = 1", "known: args.<key>, tags, wid", id="names the map form"),
    ],
)  # fmt: skip
def test_bad_arg_filters_name_the_field(text: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^filter: ") as caught:
        compile_filter(text, FIELDS, first_param=1)
    assert message in str(caught.value)


@pytest.mark.parametrize("key", ["lr'; DROP TABLE x; --", "a-b", "a b", "a\\", "é"])
def test_keys_outside_the_safe_set_never_reach_sql(key: str) -> None:
    """Keys are spliced into SQL as literals, so anything but the safe set is refused
    (most already by the tokenizer, the rest by the key check)."""
    with pytest.raises(InvalidArgumentError):
        compile_filter(f"args.{key} = 1", FIELDS, first_param=1)
    with pytest.raises(InvalidArgumentError, match="order_by"):
        parse_order_by(f"args.{key}", FIELDS, ())


@pytest.mark.parametrize(
    ("value", "expected"),
    [("0", True), ("-3", True), ("+.5", True), ("5.", True), ("1E+10", True),
     ("9" * 120, True), ("9" * 121, False), ("-" + "9" * 119, True), ("1e999", True),
     ("1e1000", False), ("NaN", False), ("inf", False),
     ("", False), (" 1", False), ("1_000", False), ("0x10", False), ("١٢", False)],
)  # fmt: skip
def test_number_pattern(value: str, expected: bool) -> None:
    assert is_number(value) is expected


@pytest.mark.parametrize(
    ("order_by", "columns", "sql"),
    [
        ("args.lr", [LR_NUMBER, LR, "w.xid", "w.wid"],
         f"{LR_NUMBER} NULLS LAST, {LR} NULLS LAST, w.xid, w.wid"),
        ("args.lr desc, wid", [LR_NUMBER, LR, "w.wid", "w.xid"],
         f"{LR_NUMBER} DESC NULLS FIRST, {LR} DESC NULLS FIRST, w.wid, w.xid"),
        ("wid, args.lr", ["w.wid", LR_NUMBER, LR, "w.xid"],
         f"w.wid, {LR_NUMBER} NULLS LAST, {LR} NULLS LAST, w.xid"),
    ],
)  # fmt: skip
def test_an_arg_sorts_by_its_number_then_its_text(
    order_by: str, columns: list[str], sql: str
) -> None:
    query = build(order_by=order_by)
    assert sort_columns(query) == columns
    assert query.order_by == sql


def test_order_by_args_errors() -> None:
    with pytest.raises(InvalidArgumentError, match="repeats an earlier sort key"):
        parse_order_by("args.lr, args.lr desc", FIELDS, ())
    with pytest.raises(InvalidArgumentError, match=re.escape("sortable: args.<key>, wid")):
        parse_order_by("args", FIELDS, ())
    assert parse_order_by("args.lr desc", FIELDS, ()) == (OrderKey("args.lr", descending=True),)


def build(order_by: str = "", page_token: str = "", filter_text: str = "") -> Any:
    return build_list_query(
        filter_text=filter_text,
        order_by=order_by,
        page_size=2,
        page_token=page_token,
        fields=FIELDS,
        default_order=(OrderKey("wid"),),
        tiebreak=("w.xid", "w.wid"),
    )


@pytest.mark.parametrize(
    "last",
    [
        [Decimal("0.01"), "0.01", 1, 2],
        [Decimal("1E+3"), "1e3", 1, 2],
        [None, "auto", 1, 2],
        [None, None, 1, 2],
    ],
)
def test_numeric_sort_values_round_trip_through_a_page_token(last: list[Any]) -> None:
    query = build(order_by="args.lr", filter_text="args.lr:*")
    rows = [object(), object(), object()]
    _, token = finish_page(query, rows, lambda _row: last)
    following = build(order_by="args.lr", page_token=token, filter_text="args.lr:*")
    assert following.params == [v for v in last if v is not None]


def _token(values: list[Any]) -> str:
    query = build(order_by="args.lr")
    data = json.dumps({"f": query.fingerprint, "v": values}).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "number",
    [{"n": "NaN"}, {"n": "Infinity"}, {"n": "1e5000"}, {"n": "x"}, {"n": 1}, 0.5, "0.5"],
)
def test_forged_numeric_token_values_are_refused(number: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="page_token: malformed"):
        build(order_by="args.lr", page_token=_token([number, "a", 1, 2]))
