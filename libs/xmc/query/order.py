"""AIP-132 ``order_by`` and the total order a page is sorted in.

The requested keys are extended with unique tiebreak columns so that keyset paging
(``xmc.query.keyset``) always has a strict "after" to seek to.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xmc.errors import InvalidArgumentError
from xmc.query.fields import (
    MAX_ORDER_BY_LENGTH,
    FieldKind,
    FieldSpec,
    describe_fields,
    resolve_field,
)


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
    sortable = describe_fields(fields, sortable_only=True)
    spec = resolve_field(name, fields, _order_error)
    if spec is None:
        raise _order_error(f"unknown field '{name}'; sortable: {sortable}")
    if not spec.sortable:
        raise _order_error(f"field '{name}' cannot be sorted on; sortable: {sortable}")
    return OrderKey(name, descending=len(words) == 2 and words[1].lower() == "desc")


def _spec(key: OrderKey, fields: Mapping[str, FieldSpec]) -> FieldSpec:
    """The spec of a key ``_parse_order_item`` accepted."""
    spec = resolve_field(key.field, fields, _order_error)
    assert spec is not None, f"order key {key.field!r} was validated"
    return spec


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
        column = _spec(key, fields).column
        if column in seen:
            raise _order_error(f"field '{key.field}' repeats an earlier sort key")
        seen.add(column)
    return keys


@dataclass(frozen=True)
class SortColumn:
    """One column of the total order: an order key's column or a tiebreak column."""

    sql: str
    descending: bool = False
    kind: FieldKind = FieldKind.INT
    nullable: bool = False


def total_order(
    order: Sequence[OrderKey],
    fields: Mapping[str, FieldSpec],
    tiebreak: Sequence[str | FieldSpec],
) -> tuple[SortColumn, ...]:
    """Order keys then tiebreaks (ascending, skipping columns already ordered on)."""
    columns = [column for k in order for column in key_columns(_spec(k, fields), k.descending)]
    seen = {c.sql for c in columns}
    for tb in tiebreak:
        column = SortColumn(tb) if isinstance(tb, str) else SortColumn(tb.column, False, tb.kind)
        if column.sql not in seen:
            columns.append(column)
            seen.add(column.sql)
    return tuple(columns)


def key_columns(spec: FieldSpec, descending: bool) -> tuple[SortColumn, ...]:
    """The sort columns of one order key. An arg sorts by two: its numeric reading, then
    its text, so numbers come in numeric order (2 before 10), then the values that are not
    numbers in text order, then units without the key (NULL is greatest in both)."""
    if spec.kind is FieldKind.ARG:
        return (
            SortColumn(spec.numbers, descending, FieldKind.NUMBER, nullable=True),
            SortColumn(spec.column, descending, FieldKind.STRING, nullable=True),
        )
    return (SortColumn(spec.column, descending != spec.inverted, spec.kind, spec.nullable),)


def order_by_sql(columns: Sequence[SortColumn]) -> str:
    """The ORDER BY list; nullable columns spell out where NULL goes (keyset relies on it)."""

    def one(c: SortColumn) -> str:
        sql = f"{c.sql} DESC" if c.descending else c.sql
        if c.nullable:  # Postgres' default, spelled out: NULL is the greatest value.
            sql += " NULLS FIRST" if c.descending else " NULLS LAST"
        return sql

    return ", ".join(one(c) for c in columns)
