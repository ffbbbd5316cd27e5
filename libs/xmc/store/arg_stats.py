"""Which args tell an experiment's work units apart, counted in Postgres.

A sweep's table shows the args that vary as its columns (``xmc.model.args.varying_first``);
the counts come from one aggregate over the experiment's ``args`` objects, so an experiment
of 10,000 units answers with one row per key instead of 10,000 rows for Python to count.
"""

from __future__ import annotations

from xmc.model.args import KeySpread, varying_first
from xmc.store.connection import Connection
from xmc.store.experiments import require_experiment

_SPREADS = """
    SELECT a.key, count(DISTINCT a.value) AS distinct_values, count(*) AS present
    FROM work_units w CROSS JOIN LATERAL jsonb_each_text(w.args) AS a(key, value)
    WHERE w.xid = $1
    GROUP BY a.key"""


async def arg_spreads(conn: Connection, xid: int) -> tuple[list[KeySpread], int]:
    """Each arg key's spread over the experiment's work units, and how many units it has.
    NOT_FOUND when the experiment does not exist."""
    await require_experiment(conn, xid)
    rows = await conn.fetch(_SPREADS, xid)
    total = await conn.fetchval("SELECT count(*) FROM work_units WHERE xid = $1", xid)
    spreads = [KeySpread(r["key"], r["distinct_values"], r["present"]) for r in rows]
    return spreads, int(total)


async def arg_key_order(conn: Connection, xid: int) -> list[str]:
    """The experiment's arg keys, varying keys first (most distinct values first), then
    constant keys: the columns of its sweep table, in order."""
    spreads, total = await arg_spreads(conn, xid)
    return varying_first(spreads, total)
