"""Keyset ("seek") paging: "rows strictly after the last one returned" as data.

The condition is built once as data (``_Keyset``) and rendered to SQL by ``keyset_sql``;
``keyset_predicate`` evaluates the very same data in Python, so tests can check the SQL's
meaning without a database. NULL sorts as Postgres sorts it by default: greater than every
value.
"""

from __future__ import annotations

import enum
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from xmc.query.order import SortColumn
from xmc.query.sql import Params


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


def keyset_sql(
    columns: Sequence[SortColumn], last: Sequence[Any], first_param: int
) -> tuple[str, list[Any]]:
    """The keyset condition as SQL; each non-NULL last value is bound once and reused."""
    params = Params(first_param)
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
