"""Sort keys measured to "now" (``AS_OF``) and sort-only, inverted keys: how the query
builder binds the walk's start and carries it from page to page (decision 0037)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest

from xmc.errors import InvalidArgumentError
from xmc.query import FieldKind, FieldSpec, ListQuery, OrderKey, build_list_query, next_page_token
from xmc.query.fields import AS_OF

FIELDS = {
    "wid": FieldSpec("w.wid", FieldKind.INT),
    "age": FieldSpec(f"({AS_OF} - w.created)", FieldKind.INT, filterable=False),
    "waited": FieldSpec("w.changed", FieldKind.TIMESTAMP, filterable=False, inverted=True),
}
T0 = datetime(2026, 5, 1, 12, tzinfo=UTC)


def build(
    order_by: str, token: str = "", now: datetime | None = T0, filter_text: str = ""
) -> ListQuery:
    return build_list_query(
        filter_text=filter_text,
        order_by=order_by,
        page_size=2,
        page_token=token,
        fields=FIELDS,
        default_order=(OrderKey("wid"),),
        tiebreak=("w.wid",),
        first_param=2,
        now=now,
    )


def test_now_is_the_first_parameter_and_the_filter_follows() -> None:
    query = build("age desc", filter_text="wid > 3")
    assert query.order_by == "($2::timestamptz - w.created) DESC, w.wid"
    assert query.where == "w.wid > $3::bigint"
    assert query.params == [T0, 3]
    assert query.as_of == T0


def test_later_pages_measure_to_the_first_pages_now() -> None:
    token = next_page_token(build("age"), [7, 4])
    later = build("age", token, now=T0 + timedelta(hours=1))
    assert later.params[0] == T0
    assert later.as_of == T0
    # ... and hand it on.
    assert build("age", next_page_token(later, [9, 5]), now=None).as_of == T0


@pytest.mark.parametrize(
    ("order_by", "as_of"),
    [("wid", None), ("waited", None), ("age", T0)],
)
def test_only_a_measured_order_binds_now(order_by: str, as_of: datetime | None) -> None:
    query = build(order_by)
    assert query.as_of == as_of
    assert (T0 in query.params) == (as_of is not None)


def _token(payload: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(payload).encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "as_of",
    [None, "2026-05-01T12:00:00+00:00", {"t": "2026-05-01T12:00:00"}, {"t": "yesterday"}],
    ids=["missing", "not-wrapped", "naive", "not-a-time"],
)
def test_a_forged_now_is_refused(as_of: object) -> None:
    good = json.loads(base64.urlsafe_b64decode(next_page_token(build("age"), [7, 4]) + "=="))
    good["a"] = as_of
    with pytest.raises(InvalidArgumentError, match="page_token: malformed"):
        build("age", _token(good))


def test_a_measured_order_needs_now() -> None:
    with pytest.raises(ValueError, match="needs now"):
        build("age", now=None)


@pytest.mark.parametrize(
    ("order_by", "column"), [("waited", "w.changed DESC"), ("waited desc", "w.changed")]
)
def test_an_inverted_key_sorts_its_column_the_other_way(order_by: str, column: str) -> None:
    assert build(order_by).order_by == f"{column}, w.wid"


@pytest.mark.parametrize("field", ["age", "waited"])
def test_sort_only_fields_refuse_a_filter(field: str) -> None:
    with pytest.raises(
        InvalidArgumentError,
        match=f"filter: field '{field}' can be sorted on, not filtered; known: wid$",
    ):
        build("", filter_text=f"{field} > 1")
