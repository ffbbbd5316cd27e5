"""List/Search requests → SQL: AIP-160 filters, AIP-132 order_by, keyset page tokens.

Every ``List*``/``Search*`` RPC takes the same four fields. This package turns them into a
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

Modules: ``fields`` (the catalogue and limits), ``filter`` (tokenizer and parser),
``sql`` (filter AST → SQL), ``order`` (order_by and the total order), ``keyset`` (the
"after the last row" condition) and ``paging`` (page tokens and ``build_list_query``).
"""

from xmc.query.fields import MAX_FILTER_DEPTH, MAX_FILTER_LENGTH, FieldKind, FieldSpec
from xmc.query.filter import And, Comparison, Node, Not, Op, Or, parse_filter
from xmc.query.keyset import keyset_after, keyset_predicate
from xmc.query.order import OrderKey, SortColumn, parse_order_by
from xmc.query.paging import ListQuery, build_list_query, finish_page, next_page_token, sort_columns
from xmc.query.sql import compile_filter, compile_node

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
