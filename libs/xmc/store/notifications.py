"""Webhooks and their deliveries (docs/notifications.md, decision 0044).

``webhook_deliveries`` is a transactional outbox like ``task_outbox``: :func:`queue_events`
runs inside the transaction that changes an experiment's rollups, so a delivery exists iff
the state change that raised it committed — a kill -9 anywhere neither loses nor invents
one. The ESS's delivery worker claims due rows (:func:`claim_due_deliveries`, ``FOR UPDATE
SKIP LOCKED`` and a lease), sends them outside any transaction, and records each attempt
(:func:`record_attempt`).
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from xmc.errors import NotFoundError
from xmc.model.notifications import (
    Event,
    ExperimentChange,
    Subscription,
    Threshold,
    UnitFailure,
    plan_notifications,
)
from xmc.model.states import ActiveState, WorkUnitState
from xmc.model.webhooks import AttemptOutcome, Decision, Verdict
from xmc.store.connection import Connection

#: Delivered and failed deliveries (with their log) are kept this long, then dropped.
DELIVERY_RETENTION = timedelta(days=30)

#: ``next_attempt`` of a new delivery (as ``xmc.store.outbox.DUE_AT_ONCE``).
DUE_AT_ONCE = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class StoredWebhook:
    id: int
    xid: int | None
    owner: str | None
    url: str
    events: tuple[Event, ...]
    threshold: Threshold
    creator: str
    create_time: datetime


_WEBHOOK_COLUMNS = (
    "id, xid, owner, url, events, failed_count, failed_fraction, creator, create_time"
)


def _webhook(row: Mapping[str, Any]) -> StoredWebhook:
    return StoredWebhook(
        id=row["id"],
        xid=row["xid"],
        owner=row["owner"],
        url=row["url"],
        events=tuple(Event(e) for e in row["events"]),
        threshold=Threshold(row["failed_count"], row["failed_fraction"]),
        creator=row["creator"],
        create_time=row["create_time"],
    )


async def queue_events(
    conn: Connection, changes: Sequence[ExperimentChange], creators: Mapping[int, str], *,
    now: datetime,
) -> int:  # fmt: skip
    """Queue the deliveries ``changes`` raise, in the caller's transaction. Looks webhooks
    up only for changes that may raise an event (a unit newly FAILED, an experiment newly
    INACTIVE), so an observation batch without either costs nothing here. Returns how
    many deliveries were queued."""
    candidates = [change for change in changes if change.may_notify()]
    if not candidates:
        return 0
    xids = [change.xid for change in candidates]
    owners = sorted({creators[xid].lower() for xid in xids if creators.get(xid)})
    rows = await conn.fetch(
        f"""SELECT {_WEBHOOK_COLUMNS} FROM webhooks
            WHERE xid = ANY($1::bigint[]) OR owner = ANY($2::text[]) ORDER BY id""",
        xids,
        owners,
    )
    if not rows:
        return 0
    by_xid: dict[int, list[Subscription]] = defaultdict(list)
    by_owner: dict[str, list[Subscription]] = defaultdict(list)
    for hook in map(_webhook, rows):
        sub = Subscription(hook.id, frozenset(hook.events), hook.threshold)
        if hook.xid is not None:
            by_xid[hook.xid].append(sub)
        elif hook.owner is not None:
            by_owner[hook.owner].append(sub)
    queued: list[tuple[Any, ...]] = []
    for change in candidates:
        owner = creators.get(change.xid, "").lower()
        subs = by_xid.get(change.xid, []) + by_owner.get(owner, [])
        for note in plan_notifications(change, subs):
            facts = json.dumps(note.facts, sort_keys=True)
            queued.append((uuid.uuid4(), note.webhook_id, change.xid, str(note.event), facts))
    if queued:
        # Due at once, whatever the worker's clock says (the outbox's DUE_AT_ONCE).
        await conn.execute(
            """INSERT INTO webhook_deliveries
                   (delivery_id, webhook_id, xid, event, facts, next_attempt, create_time)
               SELECT d, w, x, e, f::jsonb, $7, $6
               FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::text[], $5::text[])
                    AS u(d, w, x, e, f)""",
            *zip(*queued, strict=True),
            now,
            DUE_AT_ONCE,
        )
    return len(queued)


async def queue_settled_events(
    conn: Connection,
    changes: Sequence[ExperimentChange],
    retried: Set[tuple[int, int, int]],
    *,
    now: datetime,
    notes: Mapping[tuple[int, int, int], str] | None = None,
) -> int:
    """Queue the deliveries of ``changes`` (collected by ``apply_rollups(events=...)``) on
    the transaction's net effect, at its end: an automatic retry, decided after the FAILED
    write, turned the unit RESTARTING again and may have made the experiment ACTIVE again,
    so each experiment's state and counts are read back now, and a failure in ``retried``
    ((xid, wid, eid)) is not final, and ``notes`` says why a policy left one failed.
    Without this, a retried unit's failure would announce
    "failed for good", "experiment finished" or a threshold crossing that never happened.
    """
    if not changes:
        return 0
    first: dict[int, ExperimentChange] = {}
    failures: dict[int, list[UnitFailure]] = defaultdict(list)
    for change in changes:
        first.setdefault(change.xid, change)
        for f in change.failures:
            key = (change.xid, f.wid, f.eid)
            note = (notes or {}).get(key, "")
            failures[change.xid].append(replace(f, retried=key in retried, retry_note=note))
    rows = await conn.fetch(
        """SELECT xid, active_state, child_state_counts, title, creator FROM experiments
           WHERE xid = ANY($1::bigint[])""",
        sorted(first),
    )
    settled = [
        ExperimentChange(
            xid=row["xid"],
            title=row["title"],
            before=first[row["xid"]].before,
            after=ActiveState(row["active_state"]),
            counts_before=first[row["xid"]].counts_before,
            counts_after={
                WorkUnitState(i): n for i, n in enumerate(row["child_state_counts"]) if n
            },
            failures=tuple(failures[row["xid"]]),
        )
        for row in rows
    ]
    creators = {row["xid"]: row["creator"] for row in rows}
    return await queue_events(conn, settled, creators, now=now)


# --- configuration ---------------------------------------------------------------------


async def insert_webhook(
    conn: Connection, *, xid: int | None, owner: str | None, url: str, secret: str,
    events: Sequence[Event], threshold: Threshold, creator: str, now: datetime,
) -> StoredWebhook:  # fmt: skip
    row = await conn.fetchrow(
        f"""INSERT INTO webhooks (xid, owner, url, secret, events, failed_count,
                failed_fraction, creator, create_time)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING {_WEBHOOK_COLUMNS}""",
        xid, owner, url, secret, [str(e) for e in events], threshold.failed_count,
        threshold.failed_fraction, creator, now,
    )  # fmt: skip
    assert row is not None
    return _webhook(row)


async def list_webhooks(
    conn: Connection, *, xid: int | None = None, owner: str | None = None
) -> list[StoredWebhook]:
    """An experiment's webhooks, or a user's own (never the secrets)."""
    if xid is not None:
        rows = await conn.fetch(
            f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE xid = $1 ORDER BY id", xid
        )
    else:
        rows = await conn.fetch(
            f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE owner = $1 ORDER BY id", owner
        )
    return [_webhook(row) for row in rows]


async def fetch_webhook(conn: Connection, webhook_id: int) -> StoredWebhook:
    row = await conn.fetchrow(f"SELECT {_WEBHOOK_COLUMNS} FROM webhooks WHERE id = $1", webhook_id)
    if row is None:
        raise NotFoundError(f"name: webhooks/{webhook_id} does not exist")
    return _webhook(row)


async def delete_webhook(conn: Connection, webhook_id: int) -> None:
    """Drop the webhook with its queued deliveries and their log."""
    await conn.execute("DELETE FROM webhooks WHERE id = $1", webhook_id)


# --- delivery --------------------------------------------------------------------------


@dataclass(frozen=True)
class DueDelivery:
    """A claimed delivery: what the worker needs to send attempt ``attempt``."""

    id: int
    delivery_id: str
    webhook_id: int
    url: str
    secret: str
    event: Event
    facts: dict[str, Any]
    attempt: int
    create_time: datetime


async def claim_due_deliveries(
    conn: Connection, *, now: datetime, limit: int, lease: timedelta
) -> list[DueDelivery]:
    """Claim up to ``limit`` due deliveries: locked ``SKIP LOCKED`` (two workers never
    take one row), their attempt counted and their next attempt pushed ``lease`` ahead, so
    after the commit no other worker starts them while this one sends; a worker that dies
    mid-send leaves them due again when the lease runs out (at least once)."""
    rows = await conn.fetch(
        """WITH due AS (
               SELECT id FROM webhook_deliveries
               WHERE status = 'pending' AND next_attempt <= $1
               ORDER BY next_attempt, id LIMIT $2 FOR UPDATE SKIP LOCKED)
           UPDATE webhook_deliveries d SET attempts = d.attempts + 1, next_attempt = $3
           FROM due, webhooks w
           WHERE d.id = due.id AND w.id = d.webhook_id
           RETURNING d.id, d.delivery_id, d.webhook_id, w.url, w.secret, d.event, d.facts,
                     d.attempts, d.create_time""",
        now,
        limit,
        now + lease,
    )
    return [
        DueDelivery(
            id=row["id"],
            delivery_id=str(row["delivery_id"]),
            webhook_id=row["webhook_id"],
            url=row["url"],
            secret=row["secret"],
            event=Event(row["event"]),
            facts=json.loads(row["facts"]),
            attempt=row["attempts"],
            create_time=row["create_time"],
        )
        for row in sorted(rows, key=lambda r: r["id"])
    ]


async def record_attempt(
    conn: Connection, due: DueDelivery, outcome: AttemptOutcome, decision: Decision, *,
    start: datetime, latency_ms: int, response: str, now: datetime,
) -> bool:  # fmt: skip
    """Log the attempt and move the delivery on (delivered, failed, or due again later).
    False when the claim was lost (the lease ran out and another worker took the row):
    the attempt is still logged, the row left to its new holder."""
    await conn.execute(
        """INSERT INTO webhook_attempts (delivery, attempt, start_time, http_status, error,
               latency_ms, response)
           VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING""",
        due.id, due.attempt, start, outcome.http_status, outcome.error, latency_ms, response,
    )  # fmt: skip
    if decision.verdict == Verdict.RETRY:
        status, next_attempt, finish = "pending", decision.next_attempt, None
    else:
        status, next_attempt, finish = str(decision.verdict), now, now
    done = await conn.fetchval(
        """UPDATE webhook_deliveries SET status = $3, next_attempt = $4, finish_time = $5
           WHERE id = $1 AND attempts = $2 AND status = 'pending' RETURNING true""",
        due.id, due.attempt, status, next_attempt, finish,
    )  # fmt: skip
    return bool(done)


async def delete_expired_deliveries(conn: Connection, *, now: datetime) -> int:
    """Drop deliveries finished more than ``DELIVERY_RETENTION`` ago; how many."""
    dropped: int = await conn.fetchval(
        """WITH gone AS (DELETE FROM webhook_deliveries
                         WHERE status <> 'pending' AND finish_time < $1 RETURNING 1)
           SELECT count(*) FROM gone""",
        now - DELIVERY_RETENTION,
    )
    return dropped


@dataclass(frozen=True)
class StoredAttempt:
    attempt: int
    start_time: datetime
    http_status: int | None
    error: str
    latency_ms: int
    response: str


@dataclass(frozen=True)
class StoredDelivery:
    id: int
    delivery_id: str
    webhook_id: int
    event: Event
    status: str
    attempts: int
    create_time: datetime
    next_attempt: datetime | None
    finish_time: datetime | None
    log: tuple[StoredAttempt, ...]


async def list_deliveries(
    conn: Connection, xid: int, *, limit: int, before: int | None = None
) -> list[StoredDelivery]:
    """An experiment's deliveries, newest first, each with its attempts."""
    rows = await conn.fetch(
        """SELECT id, delivery_id, webhook_id, event, status, attempts, create_time,
                  next_attempt, finish_time
           FROM webhook_deliveries WHERE xid = $1 AND id < $2 ORDER BY id DESC LIMIT $3""",
        xid,
        before if before is not None else 2**63 - 1,
        limit,
    )
    attempts: dict[int, list[StoredAttempt]] = defaultdict(list)
    for row in await conn.fetch(
        """SELECT delivery, attempt, start_time, http_status, error, latency_ms, response
           FROM webhook_attempts WHERE delivery = ANY($1::bigint[]) ORDER BY delivery, attempt""",
        [row["id"] for row in rows],
    ):
        attempts[row["delivery"]].append(
            StoredAttempt(
                row["attempt"],
                row["start_time"],
                row["http_status"],
                row["error"],
                row["latency_ms"],
                row["response"],
            )
        )
    return [
        StoredDelivery(
            id=row["id"],
            delivery_id=str(row["delivery_id"]),
            webhook_id=row["webhook_id"],
            event=Event(row["event"]),
            status=row["status"],
            attempts=row["attempts"],
            create_time=row["create_time"],
            next_attempt=row["next_attempt"]
            if row["status"] == "pending" and row["next_attempt"] != DUE_AT_ONCE
            else None,
            finish_time=row["finish_time"],
            log=tuple(attempts[row["id"]]),
        )
        for row in rows
    ]
