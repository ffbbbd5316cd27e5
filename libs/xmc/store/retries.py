"""Retry decisions, the cluster's retry slots and experiments' default policies (schema in
``0009_retries.sql``; the decision itself is ``xmc.model.retries``, the ESS's
``ess.retries`` puts the two together in the transaction that records a FAILED state)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from xmc.model.retries import FIRST_ATTEMPT, Attempt, RetryDecision, take_slot
from xmc.store.connection import Connection, Record


@dataclass(frozen=True)
class StoredDecision:
    """One row of ``retry_decisions``: the verdict on one failed execution."""

    eid: int
    verdict: str
    attempt: int
    max_attempts: int
    exit_code: int | None
    disrupted: bool
    reason: str
    decided_time: datetime
    retry_eid: int | None = None
    retry_attempt: int | None = None
    counted: bool | None = None
    disruptions: int = 0
    due_time: datetime | None = None
    operation: str | None = None


_COLUMNS = """eid, verdict, attempt, max_attempts, exit_code, disrupted, reason, decided_time,
    retry_eid, retry_attempt, counted, disruptions, due_time, operation"""


def _decision(row: Record) -> StoredDecision:
    return StoredDecision(**dict(row.items()))


async def attempt_of(conn: Connection, xid: int, wid: int, eid: int) -> Attempt:
    """Where execution ``eid`` stands in its chain: what the retry that made it recorded,
    else the first attempt (it was created, or restarted by a person)."""
    row = await conn.fetchrow(
        """SELECT retry_attempt, disruptions FROM retry_decisions
           WHERE xid = $1 AND wid = $2 AND retry_eid = $3""",
        xid,
        wid,
        eid,
    )
    if row is None:
        return FIRST_ATTEMPT
    return Attempt(row["retry_attempt"], row["disruptions"])


async def record_decision(
    conn: Connection,
    xid: int,
    wid: int,
    decision: StoredDecision,
) -> bool:
    """Insert the verdict on a failed execution; False when one is already recorded (the
    primary key on the failed execution: one failure is judged once)."""
    inserted = await conn.fetchval(
        """INSERT INTO retry_decisions (xid, wid, eid, verdict, attempt, max_attempts,
               exit_code, disrupted, reason, decided_time, retry_eid, retry_attempt, counted,
               disruptions, due_time, operation)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
           ON CONFLICT (xid, wid, eid) DO NOTHING
           RETURNING 1""",
        xid,
        wid,
        decision.eid,
        decision.verdict,
        decision.attempt,
        decision.max_attempts,
        decision.exit_code,
        decision.disrupted,
        decision.reason,
        decision.decided_time,
        decision.retry_eid,
        decision.retry_attempt,
        decision.counted,
        decision.disruptions,
        decision.due_time,
        decision.operation,
    )
    return inserted is not None


def retry_row(
    eid: int,
    decision: RetryDecision,
    *,
    attempt: Attempt,
    max_attempts: int,
    exit_code: int | None,
    disrupted: bool,
    now: datetime,
) -> StoredDecision:
    """The row of a verdict (a retry's own columns are filled in by the caller)."""
    return StoredDecision(
        eid=eid,
        verdict=decision.verdict.value,
        attempt=attempt.number,
        max_attempts=max_attempts,
        exit_code=exit_code,
        disrupted=disrupted,
        reason=decision.reason,
        decided_time=now,
        disruptions=(decision.next or attempt).disruptions,
    )


async def take_retry_slot(conn: Connection, *, due: datetime, per_minute: int) -> datetime:
    """When a retry wanted at ``due`` may start under the cluster's cap; the slot row is
    locked until the caller's transaction ends, so concurrent retries queue behind it."""
    next_free = await conn.fetchval("SELECT next_free FROM retry_slots WHERE id = 1 FOR UPDATE")
    start, after = take_slot(next_free, due, per_minute)
    await conn.execute(
        """INSERT INTO retry_slots (id, next_free) VALUES (1, $1)
           ON CONFLICT (id) DO UPDATE SET next_free = EXCLUDED.next_free""",
        after,
    )
    return start


async def fetch_decisions(conn: Connection, xid: int, wid: int) -> list[StoredDecision]:
    """Every verdict on the unit's failed executions, oldest first."""
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM retry_decisions WHERE xid = $1 AND wid = $2 ORDER BY eid",
        xid,
        wid,
    )
    return [_decision(r) for r in rows]


async def fetch_experiment_retry_policy(conn: Connection, xid: int) -> str | None:
    """The experiment's default policy (JSON), None when it has none."""
    text: str | None = await conn.fetchval(
        "SELECT retry_policy FROM experiments WHERE xid = $1", xid
    )
    return text


async def set_experiment_retry_policy(conn: Connection, xid: int, text: str | None) -> bool:
    """Set (None: clear) the experiment's default policy; False when it does not exist."""
    found = await conn.fetchval(
        "UPDATE experiments SET retry_policy = $2 WHERE xid = $1 RETURNING 1", xid, text
    )
    return found is not None
