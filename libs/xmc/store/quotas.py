"""Quotas in Postgres (migration 0014, docs/quotas.md): the limits admins set, and the
per-principal counter rows a create locks to decide exactly.

Live counts are kept by triggers, which append to ``quota_deltas`` whenever a unit or an
experiment becomes live or stops being live; :func:`lock_usage` folds a principal's
deltas into its row under the row lock, so what it returns is the count, and nothing
grows per create. :func:`reconcile_usage` recounts from the rows themselves (the repair
path: a count can only drift through a hand-written UPDATE of ``quota_principals``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from xmc.model.quotas import Limits, Usage
from xmc.store.connection import Connection

_LIMIT_COLUMNS = "principal, creates_per_second, creates_burst, live_work_units, live_experiments"

_FOLD = """
    WITH d AS (
        DELETE FROM quota_deltas WHERE principal = ANY($1::text[])
        RETURNING principal, work_units, experiments
    ), s AS (
        SELECT principal, sum(work_units)::bigint AS w, sum(experiments)::bigint AS e
        FROM d GROUP BY principal
    ), u AS (
        UPDATE quota_usage q
        SET live_work_units = q.live_work_units + s.w,
            live_experiments = q.live_experiments + s.e
        FROM s WHERE q.principal = s.principal
    )
    SELECT q.principal, q.live_work_units + coalesce(s.w, 0) AS live_work_units,
           q.live_experiments + coalesce(s.e, 0) AS live_experiments, q.tokens, q.tokens_time
    FROM quota_usage q LEFT JOIN s USING (principal)
    WHERE q.principal = ANY($1::text[])"""


def _limits(row: Mapping[str, object]) -> Limits:
    return Limits(
        creates_per_second=row["creates_per_second"],  # type: ignore[arg-type]
        creates_burst=row["creates_burst"],  # type: ignore[arg-type]
        live_work_units=row["live_work_units"],  # type: ignore[arg-type]
        live_experiments=row["live_experiments"],  # type: ignore[arg-type]
    )


@dataclass(frozen=True)
class StoredQuota:
    principal: str
    limits: Limits
    update_time: datetime
    updated_by: str


async def fetch_quotas(conn: Connection) -> list[StoredQuota]:
    """Every quota row, in principal order (a few per team: each ESS reads them whole)."""
    rows = await conn.fetch(
        f"SELECT {_LIMIT_COLUMNS}, update_time, updated_by FROM quota_limits ORDER BY principal"
    )
    return [
        StoredQuota(row["principal"], _limits(row), row["update_time"], row["updated_by"])
        for row in rows
    ]


async def set_quota_limits(
    conn: Connection, principal: str, limits: Limits, *, by: str, now: datetime
) -> None:
    await conn.execute(
        f"""INSERT INTO quota_limits ({_LIMIT_COLUMNS}, update_time, updated_by)
            VALUES ($1, $2, $3, $4, $5, $6, $7)
            ON CONFLICT (principal) DO UPDATE SET
                creates_per_second = EXCLUDED.creates_per_second,
                creates_burst = EXCLUDED.creates_burst,
                live_work_units = EXCLUDED.live_work_units,
                live_experiments = EXCLUDED.live_experiments,
                update_time = EXCLUDED.update_time, updated_by = EXCLUDED.updated_by""",
        principal,
        limits.creates_per_second,
        limits.creates_burst,
        limits.live_work_units,
        limits.live_experiments,
        now,
        by,
    )


async def delete_quota_limits(conn: Connection, principal: str) -> bool:
    """Whether there was a row to delete."""
    status: str = await conn.execute("DELETE FROM quota_limits WHERE principal = $1", principal)
    return status != "DELETE 0"


async def lock_usage(conn: Connection, principals: Sequence[str]) -> dict[str, Usage]:
    """Lock the counter rows of ``principals`` (made when missing) in principal order for
    the rest of the transaction, fold their pending deltas in, and return them."""
    ordered = sorted(set(principals))
    await conn.execute(
        "INSERT INTO quota_usage (principal) SELECT unnest($1::text[]) ON CONFLICT DO NOTHING",
        ordered,
    )
    await conn.execute(
        "SELECT 1 FROM quota_usage WHERE principal = ANY($1::text[]) ORDER BY principal FOR UPDATE",
        ordered,
    )
    rows = await conn.fetch(_FOLD, ordered)
    return {
        row["principal"]: Usage(
            row["live_work_units"], row["live_experiments"], row["tokens"], row["tokens_time"]
        )
        for row in rows
    }


async def fetch_usage(conn: Connection, principals: Sequence[str]) -> dict[str, Usage]:
    """The counts of ``principals`` with their pending deltas added, without locking."""
    rows = await conn.fetch(
        """SELECT q.principal,
                  q.live_work_units + coalesce(sum(d.work_units), 0) AS live_work_units,
                  q.live_experiments + coalesce(sum(d.experiments), 0) AS live_experiments,
                  q.tokens, q.tokens_time
           FROM quota_usage q LEFT JOIN quota_deltas d USING (principal)
           WHERE q.principal = ANY($1::text[])
           GROUP BY q.principal""",
        list(principals),
    )
    return {
        row["principal"]: Usage(
            row["live_work_units"], row["live_experiments"], row["tokens"], row["tokens_time"]
        )
        for row in rows
    }


async def save_tokens(conn: Connection, usage: Mapping[str, Usage]) -> None:
    """Write back the buckets an admission spent from (rows locked by :func:`lock_usage`)."""
    if not usage:
        return
    names = sorted(usage)
    await conn.execute(
        """UPDATE quota_usage q SET tokens = v.tokens, tokens_time = v.at
           FROM unnest($1::text[], $2::float8[], $3::timestamptz[]) AS v(principal, tokens, at)
           WHERE q.principal = v.principal""",
        names,
        [usage[n].tokens for n in names],
        [usage[n].tokens_time for n in names],
    )


async def fold_all_quota_deltas(conn: Connection, *, most: int = 1000) -> int:
    """Fold the pending deltas of up to ``most`` principals (each ESS, every few
    seconds), so ``quota_deltas`` holds only what changed since; how many were folded."""
    rows = await conn.fetch("SELECT DISTINCT principal FROM quota_deltas LIMIT $1", most)
    if rows:
        await lock_usage(conn, [row["principal"] for row in rows])
    return len(rows)


_TRUTH = """
    WITH units AS (
        SELECT p AS principal, count(*) AS n FROM work_units, unnest(quota_principals) AS p
        WHERE state NOT IN (8, 10, 11) GROUP BY p
    ), exps AS (
        SELECT p AS principal, count(*) AS n FROM experiments, unnest(quota_principals) AS p
        WHERE active_state = 1 GROUP BY p
    )
    SELECT principal, coalesce(units.n, 0) AS w, coalesce(exps.n, 0) AS e
    FROM units FULL JOIN exps USING (principal)"""


async def reconcile_usage(conn: Connection) -> int:
    """Recount every principal's live work units and experiments from the rows (the
    repair path: one pass over the rows, run by an admin, never per create). It holds
    off creates and liveness changes for its length (a table lock on the counters and
    the deltas), so neither can slip between the recount and the write. Returns how
    many counter rows it corrected (pending deltas folded in first: a count they complete
    is not a correction)."""
    await conn.execute("LOCK TABLE quota_usage, quota_deltas IN EXCLUSIVE MODE")
    pending = await conn.fetch("SELECT DISTINCT principal FROM quota_deltas")
    await lock_usage(conn, [row["principal"] for row in pending])
    await conn.execute(f"CREATE TEMP TABLE quota_truth ON COMMIT DROP AS {_TRUTH}")
    await conn.execute(
        "INSERT INTO quota_usage (principal) SELECT principal FROM quota_truth "
        "ON CONFLICT DO NOTHING"
    )
    status: str = await conn.execute(
        """UPDATE quota_usage q
           SET live_work_units = coalesce(t.w, 0), live_experiments = coalesce(t.e, 0)
           FROM quota_usage q2 LEFT JOIN quota_truth t USING (principal)
           WHERE q.principal = q2.principal
             AND (q.live_work_units, q.live_experiments)
                 IS DISTINCT FROM (coalesce(t.w, 0), coalesce(t.e, 0))"""
    )
    return int(status.split()[-1])
