"""The connection type every store function takes.

asyncpg ships no type information, so ``asyncpg.Connection`` (and the
``asyncpg.pool.PoolConnectionProxy`` a pool hands out) is ``Any`` to mypy: a parameter
typed with it accepts anything and checks nothing. This Protocol names the calls XMC
makes, with their argument and result types, so mypy strict checks every call site; both
asyncpg classes satisfy it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol

#: A row as XMC reads it: columns by name. The values are whatever asyncpg decoded the
#: column's Postgres type to, which only the query knows.
Record = Mapping[str, Any]


class Connection(Protocol):
    """The part of ``asyncpg.Connection`` XMC uses."""

    async def execute(self, query: str, *args: object) -> str:
        """The command's status tag, e.g. ``"UPDATE 1"``."""

    async def executemany(self, command: str, args: Iterable[Sequence[object]]) -> None: ...

    async def fetch(self, query: str, *args: object) -> list[Record]: ...

    async def fetchrow(self, query: str, *args: object) -> Record | None: ...

    async def fetchval(self, query: str, *args: object, column: int = 0) -> Any:
        """The first row's ``column``: its type is the query's."""

    async def copy_records_to_table(
        self,
        table_name: str,
        *,
        records: Iterable[Sequence[object]],
        columns: Sequence[str] | None = None,
    ) -> str: ...

    def transaction(self) -> AbstractAsyncContextManager[object]:
        """A transaction (a savepoint inside one) for the ``async with`` block."""


async def try_transaction_lock(conn: Connection, key: int) -> bool:
    """Take the advisory lock ``key`` for the rest of the transaction, if no other
    transaction holds it: how one replica of a singleton loop (the relay, the repair
    sweep) works at a time per database, while the others skip their turn."""
    taken: bool = await conn.fetchval("SELECT pg_try_advisory_xact_lock($1)", key)
    return taken


async def fetch_one(conn: Connection, query: str, *args: object) -> Record:
    """The row of a query that always returns one: an INSERT … RETURNING, an UPDATE of a
    row the transaction holds locked, a read of the one-row ``scheduling_control``. None
    there is a broken invariant, raised as one rather than typed away."""
    row = await conn.fetchrow(query, *args)
    if row is None:
        raise RuntimeError(f"no row from a query that always returns one: {query[:60]!r}")
    return row
