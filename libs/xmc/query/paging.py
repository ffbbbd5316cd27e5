"""One List/Search page: page size, page tokens, and ``build_list_query`` tying it together.

A page token carries the sort values of the last row returned, bound by a fingerprint to
the filter, the resolved order and the caller's scope, and is checked value by value
against its columns on the way back in, so a forged token cannot reach Postgres.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from xmc.errors import InvalidArgumentError
from xmc.query.fields import (
    AS_OF,
    INT64_MAX,
    INT64_MIN,
    MAX_PAGE_TOKEN_LENGTH,
    FieldKind,
    FieldSpec,
)
from xmc.query.keyset import keyset_sql
from xmc.query.order import OrderKey, SortColumn, order_by_sql, parse_order_by, total_order
from xmc.query.sql import compile_filter


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
    #: What :data:`~xmc.query.fields.AS_OF` stands for on this walk (None: not used).
    as_of: datetime | None = None


def sort_columns(query: ListQuery) -> list[str]:
    """SQL expressions the caller must SELECT, in order, to build the next page token."""
    return [c.sql for c in query.columns]


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
    if isinstance(value, Decimal):
        return {"n": str(value)}
    raise TypeError(f"cannot put {type(value).__name__} in a page token")


def _decode_value(raw: Any, column: SortColumn) -> Any:
    """A token value checked against its column, so a forged token cannot reach Postgres
    with a value of the wrong type."""
    if raw is None and column.nullable:
        return None
    match column.kind:
        case FieldKind.INT | FieldKind.ENUM:
            if type(raw) is int and INT64_MIN <= raw <= INT64_MAX:
                return raw
        case FieldKind.STRING | FieldKind.STRING_LIST:
            if isinstance(raw, str) and "\x00" not in raw:
                return raw
        case FieldKind.NUMBER:
            if isinstance(raw, dict) and isinstance(raw.get("n"), str):
                return _decode_number(raw["n"])
        case FieldKind.BOOL:
            if isinstance(raw, bool):
                return raw
        case FieldKind.TIMESTAMP:
            return _decode_time(raw)
    raise _token_error("malformed")


def _decode_time(raw: Any) -> datetime:
    if isinstance(raw, dict) and isinstance(raw.get("t"), str):
        try:
            value = datetime.fromisoformat(raw["t"])
        except ValueError:
            raise _token_error("malformed") from None
        if value.tzinfo is not None:
            return value
    raise _token_error("malformed")


def _decode_number(text: str) -> Decimal:
    """A token's numeric sort value: only what an arg's numeric reading can be (a finite
    ``numeric`` of the arg pattern's size), so Postgres is never handed NaN or a huge
    exponent."""
    if len(text) > 200:
        raise _token_error("malformed")
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise _token_error("malformed") from None
    if not value.is_finite() or not -1200 < value.adjusted() < 1200:
        raise _token_error("malformed")
    return value


def _encode_token(fingerprint: str, values: Sequence[Any], as_of: datetime | None) -> str:
    payload = {"f": fingerprint, "v": [_encode_value(v) for v in values]}
    if as_of is not None:
        payload["a"] = _encode_value(as_of)
    data = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]+")


def _decode_token(
    token: str, fingerprint: str, columns: Sequence[SortColumn], *, as_of: bool
) -> tuple[list[Any], datetime | None]:
    """The last row's sort values, and the walk's start when its order measures to it."""
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
    values = [_decode_value(raw, column) for raw, column in zip(payload["v"], columns, strict=True)]
    return values, _decode_time(payload.get("a")) if as_of else None


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
    return _encode_token(query.fingerprint, last_row_values, query.as_of)


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
    now: datetime | None = None,
) -> ListQuery:
    """Validate a List/Search request and build its SQL pieces.

    ``tiebreak`` lists NOT NULL columns that make the order unique (``("w.xid", "w.wid")``);
    a plain string is an integer column, a ``FieldSpec`` gives another kind. ``scope`` (for
    example the parent name) is bound into the token so it cannot page a different parent.
    Parameters are numbered from ``first_param``: the walk's start when a sort column
    measures to it (``AS_OF``: ``now`` on the first page, the token's after), then the
    filter's, then the keyset's.
    """
    if not tiebreak:
        raise ValueError("tiebreak must name the columns that make the order unique")
    # 1. Page size, order, and the total order's columns.
    size = _effective_page_size(page_size, default_page_size, max_page_size)
    order = parse_order_by(order_by, fields, default_order)
    columns = total_order(order, fields, tiebreak)
    measured = any(AS_OF in c.sql for c in columns)
    if measured:
        placeholder = f"${first_param}::timestamptz"
        columns = tuple(replace(c, sql=c.sql.replace(AS_OF, placeholder)) for c in columns)
        first_param += 1
    fingerprint = _fingerprint(filter_text, columns, scope)
    # 2. The filter.
    filter_sql, params = compile_filter(filter_text, fields, first_param=first_param)
    conditions = [] if filter_sql == "TRUE" else [filter_sql]
    # 3. The keyset condition from the token, numbered after the filter's parameters.
    as_of = now
    if page_token:
        last, token_as_of = _decode_token(page_token, fingerprint, columns, as_of=measured)
        after_sql, keyset_params = keyset_sql(columns, last, first_param + len(params))
        conditions.append(after_sql)
        params = params + keyset_params
        as_of = token_as_of or as_of
    if measured:
        if as_of is None:
            raise ValueError("an order measured to now needs now")
        params = [as_of, *params]
    else:
        as_of = None
    return ListQuery(
        where=_conjunction(conditions),
        params=params,
        order_by=order_by_sql(columns),
        limit=size + 1,
        order=order,
        fingerprint=fingerprint,
        columns=columns,
        page_size=size,
        as_of=as_of,
    )
