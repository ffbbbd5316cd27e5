"""Restricted reads in SQL (decision 0048): the predicate "experiments this caller may
read", over ``experiments.readers`` (migration 0015, a ``text[]`` with a GIN index), so a
listing is filtered by Postgres before it is paged, never trimmed afterwards.

:func:`readable_experiments_sql` is the one hook every reader of experiment data across
experiments uses (the listing, the watch catch-up; usage accounting and the audit log are
meant to adopt it): it returns SQL and parameters to AND into a ``WHERE``.
"""

from __future__ import annotations

from typing import Any

from xmc.model.read_access import ReadScope
from xmc.store.connection import Connection


def readable_experiments_sql(
    scope: ReadScope, *, xid_column: str = "", readers_column: str = "", first_param: int = 1
) -> tuple[str, list[Any]]:
    """``(sql, params)``: a condition true for the rows of experiments ``scope`` may read.

    Give ``readers_column`` (``"e.readers"``) when the query reads ``experiments`` itself,
    else ``xid_column`` (``"w.xid"``): then the condition looks the experiment up by xid.
    The parameter is numbered ``first_param``. A caller who reads everything gets
    ``("TRUE", [])``: no parameter, nothing for the planner to do.
    """
    if scope.everything:
        return "TRUE", []
    param = f"${first_param}::text[]"
    if readers_column:
        return f"{readers_column} && {param}", [scope.sorted_principals()]
    if not xid_column:
        raise ValueError("readable_experiments_sql needs xid_column or readers_column")
    return (
        f"{xid_column} IN (SELECT xid FROM experiments WHERE readers && {param})",
        [scope.sorted_principals()],
    )


async def fetch_readers(conn: Connection, xid: int) -> list[str] | None:
    """The experiment's readers; None when it does not exist (or, written by an ESS older
    than migration 0015, has none yet: it is then readable only to those who read all)."""
    readers: list[str] | None = await conn.fetchval(
        "SELECT readers FROM experiments WHERE xid = $1", xid
    )
    return readers


async def fetch_artifact_parent(conn: Connection, aid: int) -> str | None:
    """The parent name of artifact ``aid`` (None: no such artifact)."""
    parent: str | None = await conn.fetchval("SELECT parent FROM artifacts WHERE aid = $1", aid)
    return parent


async def fetch_webhook_experiment(conn: Connection, webhook_id: int) -> int | None:
    """The experiment a webhook watches (None: no such webhook, or a user's own)."""
    xid: int | None = await conn.fetchval("SELECT xid FROM webhooks WHERE id = $1", webhook_id)
    return xid
