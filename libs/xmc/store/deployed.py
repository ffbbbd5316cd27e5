"""Executions that should have a JobSet in the cluster: what the Reconciler's
vanished-JobSet sweep compares its JobSet cache with (``ListDeployedExecutions``,
docs/decisions/0028-vanished-jobsets-fail.md).

An execution is *deployed* when

- its experiment is ACTIVE and it is in a state the Reconciler derived from its JobSet
  (``CLUSTER_OBSERVED_STATES``): INITIALIZING and RESTARTING belong to the Actuator's
  repair sweep, which re-drives a create whose JobSet is missing, and STOPPING to the
  stop path;
- the Actuator finished its Create or Restart with outcome ``done`` (it made the JobSet),
  or its outbox rows have all expired (7 days after finishing: a state the Reconciler
  derived from the JobSet is then the only record that one existed);
- no task of it is pending, published or parked (waiting for the Actuator, or for a
  resume), and no stop was ever written for it (a DELETE row: XMC itself is removing the
  JobSet, and the finalizer path or the repair sweep ends the execution).

A page reads the next ``limit`` ACTIVE experiments and the next ``limit`` of their work
units, both in primary-key order, and returns the deployed ones plus the key to go on
from: its cost is bounded by ``limit`` (and the outbox rows of those work units) however
many work units exist, and a full pass costs O(work units of active experiments), never
O(all of them) (measured in docs/reconciler.md).
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from xmc.errors import InvalidArgumentError
from xmc.model.deployed import DeployedExecution
from xmc.model.states import CLUSTER_OBSERVED_STATES, ActiveState, WorkUnitState
from xmc.store.connection import Connection, Record
from xmc_api.internal.v1.tasks_pb2 import Task

#: Work units one page reads when the caller does not say.
DEFAULT_PAGE: Final = 1000
MAX_PAGE: Final = 5000

_DEPLOYED_STATES: Final = sorted(int(s) for s in CLUSTER_OBSERVED_STATES)

#: The next ACTIVE experiments from an id on (a primary-key range read).
_ACTIVE_EXPERIMENTS = """
    SELECT xid FROM experiments WHERE xid >= $1 AND active_state = $2 ORDER BY xid LIMIT $3"""

#: The next work units of those experiments, with what their outbox says. ``xid = ANY``
#: on the key's leading column keeps the read an ordered index scan that stops at the
#: LIMIT (no sort of every work unit of every active experiment).
_PAGE = """
    WITH page AS (
        SELECT u.xid, u.wid, u.eid, u.state, u.state_update_time FROM work_units u
        WHERE u.xid = ANY($1::bigint[]) AND (u.xid, u.wid) > ($2, $3)
        ORDER BY u.xid, u.wid
        LIMIT $4)
    SELECT p.xid, p.wid, p.eid, p.state, p.state_update_time,
           t.deploy_time, coalesce(t.tasks, 0) AS tasks, coalesce(t.blocking, 0) AS blocking
    FROM page p
    LEFT JOIN LATERAL (
        SELECT max(o.finished_time) FILTER (
                   WHERE o.kind = ANY($6::smallint[]) AND o.outcome = 'done') AS deploy_time,
               count(*) AS tasks,
               count(*) FILTER (WHERE o.status <> 'finished' OR o.kind = $7) AS blocking
        FROM task_outbox o
        WHERE p.state = ANY($5::smallint[])
          AND o.xid = p.xid AND o.wid = p.wid AND o.eid = p.eid
    ) t ON true
    ORDER BY p.xid, p.wid"""

#: A work unit id past every real one: "after the whole experiment".
_LAST_WID: Final = 2**63 - 1


def is_deployed(state: int, *, tasks: int, blocking: int, deploy_time: datetime | None) -> bool:
    """The rule of the module docstring for one execution and its outbox rows (pure)."""
    if state not in _DEPLOYED_STATES or blocking:
        return False
    return deploy_time is not None or tasks == 0


def encode_page_token(key: tuple[int, int] | None) -> str:
    return "" if key is None else f"{key[0]}/{key[1]}"


def decode_page_token(token: str, *, field: str = "page_token") -> tuple[int, int]:
    """The key to continue after; a token this module did not make is INVALID_ARGUMENT."""
    if not token:
        return (0, 0)
    xid, sep, wid = token.partition("/")
    ok = sep and xid.isascii() and xid.isdigit() and wid.isascii() and wid.isdigit()
    if not ok or int(xid) > _LAST_WID or int(wid) > _LAST_WID:
        raise InvalidArgumentError(f"{field}: {token[:40]!r} is not a token this server made")
    return (int(xid), int(wid))


def page_size(requested: int, *, field: str = "page_size") -> int:
    if requested < 0:
        raise InvalidArgumentError(f"{field}: must not be negative, got {requested}")
    return min(requested or DEFAULT_PAGE, MAX_PAGE)


async def list_deployed(
    conn: Connection, *, after: tuple[int, int], limit: int
) -> tuple[list[DeployedExecution], tuple[int, int] | None]:
    """One page (see the module docstring): the deployed executions among the next
    ``limit`` work units of the next ``limit`` active experiments after ``after``, and the
    key to continue after (None: the listing is complete). Two ordered range reads."""
    first = after[0] + 1 if after[1] == _LAST_WID else after[0]
    xids = [
        r["xid"]
        for r in await conn.fetch(_ACTIVE_EXPERIMENTS, first, int(ActiveState.ACTIVE), limit)
    ]
    if not xids:
        return [], None
    rows = await conn.fetch(
        _PAGE,
        xids,
        after[0],
        after[1],
        limit,
        _DEPLOYED_STATES,
        [int(Task.CREATE), int(Task.RESTART)],
        int(Task.DELETE),
    )
    found = [
        DeployedExecution(
            xid=r["xid"],
            wid=r["wid"],
            eid=r["eid"],
            state=WorkUnitState(r["state"]),
            state_update_time=r["state_update_time"],
            deploy_time=r["deploy_time"],
        )
        for r in rows
        if is_deployed(
            r["state"], tasks=r["tasks"], blocking=r["blocking"], deploy_time=r["deploy_time"]
        )
    ]
    return found, _next_key(rows, xids, limit)


def _next_key(rows: list[Record], xids: list[int], limit: int) -> tuple[int, int] | None:
    """Where the next page starts: after the last work unit read when the page is full;
    after the last experiment read when more experiments may follow; else nowhere."""
    if len(rows) == limit:
        return (rows[-1]["xid"], rows[-1]["wid"])
    if len(xids) == limit:
        return (xids[-1], _LAST_WID)
    return None
