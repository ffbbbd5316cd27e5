"""Which args tell an experiment's work units apart, and how its units fall into the
values of one arg, counted in Postgres.

A sweep's table shows the args that vary as its columns (``xmc.model.args.varying_first``);
the counts come from one aggregate over the experiment's ``args`` objects, so an experiment
of 10,000 units answers with one row per key (or per group) instead of 10,000 rows for
Python to count (docs/decisions/0037-the-sweep-table.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from xmc.errors import InvalidArgumentError
from xmc.model.args import KeySpread, varying_first
from xmc.model.states import WorkUnitState
from xmc.query import compile_filter
from xmc.query.fields import resolve_field
from xmc.store.connection import Connection
from xmc.store.experiments import require_experiment
from xmc.store.work_units import WORK_UNIT_LISTING

#: The most groups ``arg_groups`` returns: a grouping by a key every unit gives its own
#: value (a seed) is a list of units, which ListWorkUnits pages.
MAX_ARG_GROUPS = 1000

_SPREADS = """
    SELECT a.key, count(DISTINCT a.value) AS distinct_values, count(*) AS present,
           min(a.value) AS sample
    FROM work_units w CROSS JOIN LATERAL jsonb_each_text(w.args) AS a(key, value)
    WHERE w.xid = $1
    GROUP BY a.key"""


@dataclass(frozen=True)
class ArgKeys:
    """An experiment's arg keys: their spreads in ``varying_first`` order, the number of
    units, and one value of each key (its value, for a constant key)."""

    spreads: list[KeySpread]
    total: int
    samples: dict[str, str] = field(default_factory=dict)


async def arg_keys(conn: Connection, xid: int) -> ArgKeys:
    """Each arg key's spread over the experiment's work units, varying keys first.
    NOT_FOUND when the experiment does not exist."""
    await require_experiment(conn, xid)
    rows = await conn.fetch(_SPREADS, xid)
    total = int(await conn.fetchval("SELECT count(*) FROM work_units WHERE xid = $1", xid))
    spreads = {r["key"]: KeySpread(r["key"], r["distinct_values"], r["present"]) for r in rows}
    ordered = [spreads[key] for key in varying_first(spreads.values(), total)]
    return ArgKeys(ordered, total, {r["key"]: r["sample"] for r in rows})


async def arg_spreads(conn: Connection, xid: int) -> tuple[list[KeySpread], int]:
    """Each arg key's spread over the experiment's work units, and how many units it has.
    NOT_FOUND when the experiment does not exist."""
    keys = await arg_keys(conn, xid)
    return keys.spreads, keys.total


async def arg_key_order(conn: Connection, xid: int) -> list[str]:
    """The experiment's arg keys, varying keys first (most distinct values first), then
    constant keys: the columns of its sweep table, in order."""
    return [s.key for s in (await arg_keys(conn, xid)).spreads]


@dataclass(frozen=True)
class StoredArgGroup:
    """The units sharing one value of the grouped key (``value`` None: units without it)."""

    value: str | None
    count: int
    states: dict[WorkUnitState, int]


def _key_error(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"key: {message}")


def _group_sql(key: str, where: str) -> str:
    spec = resolve_field(f"args.{key}", WORK_UNIT_LISTING.fields, _key_error)
    if spec is None or not key:
        raise _key_error(f"expected an arg key such as 'lr', got {key!r}")
    # Ordered as order_by="args.<key>" sorts units: the numeric reading, then the text;
    # NULL (no number / no key) last in both.
    return f"""
        WITH g AS (
            SELECT {spec.column} AS value, {spec.numbers} AS number, w.state, count(*) AS n
            FROM work_units w WHERE w.xid = $1 AND ({where})
            GROUP BY 1, 2, 3)
        SELECT value, number, sum(n) AS count, jsonb_object_agg(state, n)::text AS states
        FROM g GROUP BY value, number
        ORDER BY number NULLS LAST, value NULLS LAST
        LIMIT {MAX_ARG_GROUPS + 1}"""


def _state_counts(states: dict[str, int]) -> dict[WorkUnitState, int]:
    """``{"5": 3}`` (jsonb keys are text) → ``{RUNNING: 3}``, in state number order."""
    return {
        WorkUnitState(int(s)): int(n) for s, n in sorted(states.items(), key=lambda i: int(i[0]))
    }


async def arg_groups(
    conn: Connection, xid: int, key: str, filter_text: str
) -> tuple[list[StoredArgGroup], bool]:
    """The experiment's units matching ``filter_text`` grouped by the value of arg
    ``key``, each with its state counts, in ``args.<key>`` order; and whether more than
    :data:`MAX_ARG_GROUPS` groups exist. NOT_FOUND before any complaint about the key or
    the filter when the experiment does not exist."""
    await require_experiment(conn, xid)
    where, params = compile_filter(filter_text, WORK_UNIT_LISTING.fields, first_param=2)
    rows = await conn.fetch(_group_sql(key, where), xid, *params)
    groups = [
        StoredArgGroup(
            row["value"],
            int(row["count"]),
            _state_counts(json.loads(row["states"])),
        )
        for row in rows[:MAX_ARG_GROUPS]
    ]
    return groups, len(rows) > MAX_ARG_GROUPS
