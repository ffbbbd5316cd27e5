"""One paginated SELECT for every List/Search RPC: filter (AIP-160), order (AIP-132),
keyset page tokens that stay stable while rows are inserted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from xmc.query import FieldSpec, OrderKey, build_list_query, finish_page, sort_columns
from xmc.store.connection import Connection, Record
from xmc.timestamps import utc_now


@dataclass(frozen=True)
class ListRequest:
    """The list parameters every List/Search request carries."""

    filter: str = ""
    order_by: str = ""
    page_size: int = 0
    page_token: str = ""
    #: What a sort measured to now (``runtime``) measures to on a walk's first page; later
    #: pages take it from their token, so the order holds still while the walk goes on.
    now: datetime | None = None


@dataclass(frozen=True)
class ListResource:
    """How one resource is listed: its table, filterable fields and default order."""

    #: ``FROM`` clause with the alias the field specs use, e.g. ``"experiments e"``.
    source: str
    #: Columns selected for each row (the row codec reads these names).
    columns: str
    fields: Mapping[str, FieldSpec]
    default_order: tuple[OrderKey, ...]
    #: Columns that make the order unique (the primary key); a plain string is an integer
    #: column, a ``FieldSpec`` says its kind.
    tiebreak: tuple[str | FieldSpec, ...]


async def fetch_page(
    conn: Connection,
    resource: ListResource,
    request: ListRequest,
    *,
    where: str = "TRUE",
    params: Sequence[Any] = (),
    scope: str = "",
) -> tuple[list[Record], str]:
    """Rows of one page and the token of the next ('' on the last page). ``where`` and
    ``params`` scope the listing (e.g. to one experiment) before the user's filter;
    ``scope`` names that parent so a page token cannot be replayed on another one."""
    query = build_list_query(
        filter_text=request.filter,
        order_by=request.order_by,
        page_size=request.page_size,
        page_token=request.page_token,
        fields=resource.fields,
        default_order=resource.default_order,
        tiebreak=resource.tiebreak,
        first_param=len(params) + 1,
        scope=scope,
        now=request.now or utc_now(),
    )
    keys = sort_columns(query)
    key_columns = ", ".join(f"{column} AS _key{i}" for i, column in enumerate(keys))
    rows = await conn.fetch(
        f"""SELECT {resource.columns}, {key_columns} FROM {resource.source}
            WHERE ({where}) AND ({query.where})
            ORDER BY {query.order_by} LIMIT {query.limit}""",
        *params,
        *query.params,
    )
    return finish_page(query, list(rows), lambda row: [row[f"_key{i}"] for i in range(len(keys))])
