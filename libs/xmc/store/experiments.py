"""Experiment rows and the experiment rollups of SPEC §3.3, applied inside the caller's
transaction.

Counts live in two arrays on the experiment row (per state, per severity) so a batch that
touches a thousand work units of one experiment updates that row once.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from xmc.errors import FailedPreconditionError, NotFoundError
from xmc.masks import apply_update_mask
from xmc.model.notifications import ExperimentChange, UnitFailure
from xmc.model.read_access import READS_EVERYTHING, ReadScope, experiment_readers
from xmc.model.rollups import (
    apply_child_state_change,
    apply_severity_change,
    compute_active_state,
    should_set_complete_time,
)
from xmc.model.states import ActiveState, LaunchState, Priority, Severity, WorkUnitState
from xmc.names import experiment_name
from xmc.query import FieldKind, FieldSpec, OrderKey
from xmc.store.codec import optional_bytes
from xmc.store.connection import Connection, fetch_one
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc.store.notifications import queue_events
from xmc.store.read_access import readable_experiments_sql
from xmc.store.watch_events import insert_experiment_event
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

N_STATES = 13
N_SEVERITIES = 6

EXPERIMENT_COLUMNS = """xid, title, creator, priority, tags, notes, doc, create_time, update_time,
    complete_time, launch_state, active_state, launch_id, child_state_counts,
    message_severity_counts, last_child_status_update_time, status_update_time,
    structured_status_message"""


def _severity_index(severity: Severity) -> int:
    return int(severity) // 10


def state_counts_from_array(values: list[int]) -> dict[WorkUnitState, int]:
    return {WorkUnitState(i): n for i, n in enumerate(values) if n}


def state_counts_to_array(counts: Mapping[WorkUnitState, int]) -> list[int]:
    values = [0] * N_STATES
    for state, n in counts.items():
        values[int(state)] = n
    return values


def severity_counts_from_array(values: list[int]) -> dict[Severity, int]:
    return {Severity(i * 10): n for i, n in enumerate(values) if n}


def severity_counts_to_array(counts: Mapping[Severity, int]) -> list[int]:
    values = [0] * N_SEVERITIES
    for severity, n in counts.items():
        values[_severity_index(severity)] = n
    return values


def experiment_doc(experiment: Experiment) -> bytes:
    """The parts of an Experiment that are stored as bytes (never filtered on)."""
    doc = Experiment()
    doc.acls.CopyFrom(experiment.acls)
    doc.urls.extend(experiment.urls)
    doc.resources.extend(experiment.resources)
    if not experiment.HasField("acls"):
        doc.ClearField("acls")
    return doc.SerializeToString()


def experiment_doc_acls(doc: bytes | None) -> XidAcls:
    """The ACL stored in an experiment's ``doc`` column."""
    return Experiment.FromString(doc or b"").acls


def experiment_from_row(row: Mapping[str, Any]) -> Experiment:
    experiment = Experiment(
        name=experiment_name(row["xid"]),
        title=row["title"],
        creator=row["creator"],
        priority=row["priority"],
        tags=row["tags"],
        notes=row["notes"],
    )
    if row["doc"]:
        experiment.MergeFromString(row["doc"])
    set_timestamp(experiment.create_time, row["create_time"])
    set_timestamp(experiment.update_time, row["update_time"])
    set_timestamp(experiment.complete_time, row["complete_time"])
    status = experiment.status
    status.active_state = row["active_state"]
    status.launch_state = row["launch_state"]
    status.launch_id = row["launch_id"]
    for state, n in sorted(state_counts_from_array(row["child_state_counts"]).items()):
        status.child_state_counts.add(state=int(state), count=n)
    for severity, n in sorted(severity_counts_from_array(row["message_severity_counts"]).items()):
        status.message_severity_counts.add(severity=int(severity), count=n)
    set_timestamp(status.last_child_status_update_time, row["last_child_status_update_time"])
    set_timestamp(status.update_time, row["status_update_time"])
    if row["structured_status_message"] is not None:
        status.structured_status_message.ParseFromString(row["structured_status_message"])
    return experiment


async def insert_experiment(
    conn: Connection,
    experiment: Experiment,
    *,
    creator: str,
    now: datetime,
    principals: Sequence[str] = (),
) -> Experiment:
    launch = LaunchState(experiment.status.launch_state or LaunchState.LAUNCHING)
    active = compute_active_state(launch, {})
    row = await fetch_one(
        conn,
        f"""INSERT INTO experiments (title, creator, priority, tags, notes, doc, create_time,
                update_time, launch_state, active_state, launch_id, status_update_time,
                structured_status_message, quota_principals, readers)
            VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9, $10, $7, $11, $12, $13)
            RETURNING {EXPERIMENT_COLUMNS}""",
        experiment.title,
        creator,
        int(experiment.priority),
        list(experiment.tags),
        experiment.notes,
        experiment_doc(experiment),
        now,
        int(launch),
        int(active),
        experiment.status.launch_id,
        optional_bytes(experiment.status, "structured_status_message"),
        list(principals),
        experiment_readers(creator, experiment.acls),
    )
    await insert_experiment_event(
        conn, row["xid"], "created", active_state=int(active), launch_state=int(launch), now=now
    )
    return experiment_from_row(row)


async def fetch_experiment(conn: Connection, xid: int, *, for_update: bool = False) -> Experiment:
    lock = " FOR UPDATE" if for_update else ""
    row = await conn.fetchrow(
        f"SELECT {EXPERIMENT_COLUMNS} FROM experiments WHERE xid = $1{lock}", xid
    )
    if row is None:
        raise NotFoundError(f"name: {experiment_name(xid)} does not exist")
    return experiment_from_row(row)


async def fetch_experiment_priority(conn: Connection, xid: int) -> int | None:
    """The experiment's priority, which its tasks carry; None when it does not exist."""
    priority: int | None = await conn.fetchval(
        "SELECT priority FROM experiments WHERE xid = $1", xid
    )
    return priority


async def require_experiment(conn: Connection, xid: int) -> None:
    """NOT_FOUND unless the experiment exists (an existence check that builds nothing)."""
    if await conn.fetchval("SELECT 1 FROM experiments WHERE xid = $1", xid) is None:
        raise NotFoundError(f"name: {experiment_name(xid)} does not exist")


@dataclass
class RollupDelta:
    """What a transaction did to one experiment's work units, folded before the write."""

    #: (state before, state after) per work unit whose state changed; None = new work unit.
    state_changes: list[tuple[WorkUnitState | None, WorkUnitState]] = field(default_factory=list)
    #: (best severity before, after) per work unit whose best message changed.
    severity_changes: list[tuple[Severity | None, Severity | None]] = field(default_factory=list)
    #: The experiment's next free work-unit id must be at least this (creates).
    min_next_wid: int | None = None
    #: Units that became FAILED (for notifications; docs/notifications.md).
    failures: list[UnitFailure] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.state_changes or self.severity_changes or self.min_next_wid)


def _fold_state_counts(
    counts: Mapping[WorkUnitState, int],
    changes: Iterable[tuple[WorkUnitState | None, WorkUnitState]],
) -> dict[WorkUnitState, int]:
    result = dict(counts)
    for old, new in changes:
        result = apply_child_state_change(result, old, new)
    return result


async def apply_rollups(
    conn: Connection,
    deltas: Mapping[int, RollupDelta],
    *,
    now: datetime,
    execution_update: bool,
    events: list[ExperimentChange] | None = None,
) -> None:
    """Recompute counts, ``active_state`` and ``complete_time`` of the touched experiments
    (``DenormalizeWorkUnitStatus`` + ``updateExperimentFromExecutions`` of the reference).

    The notifications the change raises are queued here, unless ``events`` is given: then
    they are appended to it, for a caller that changes more in the same transaction (an
    automatic retry turns a unit that failed RESTARTING again) to queue them once, on the
    transaction's net effect (``xmc.store.notifications.queue_settled_events``).

    Called after the work-unit rows are locked, so the lock order is always work units
    first, then experiments in xid order. ``complete_time`` is set only when an execution
    update (``execution_update``) turns the experiment INACTIVE (SPEC §3.3); a restart that
    reactivates it clears the stale value.
    """
    xids = sorted(xid for xid, delta in deltas.items() if delta)
    if not xids:
        return
    rows = await conn.fetch(
        """SELECT xid, launch_state, active_state, child_state_counts, message_severity_counts,
                  complete_time, last_child_status_update_time, title, creator
           FROM experiments WHERE xid = ANY($1::bigint[]) ORDER BY xid FOR UPDATE""",
        xids,
    )
    updates = []
    moved: list[tuple[int, int, int]] = []  # (xid, active, launch): rare, one event row each
    changes: list[ExperimentChange] = []
    for row in rows:
        delta = deltas[row["xid"]]
        states = _fold_state_counts(
            state_counts_from_array(row["child_state_counts"]), delta.state_changes
        )
        severities = severity_counts_from_array(row["message_severity_counts"])
        for old_severity, new_severity in delta.severity_changes:
            severities = apply_severity_change(severities, old_severity, new_severity)
        old_active = ActiveState(row["active_state"])
        new_active = compute_active_state(LaunchState(row["launch_state"]), states)
        complete_time = row["complete_time"]
        if execution_update and should_set_complete_time(old_active, new_active):
            complete_time = now
        elif new_active == ActiveState.ACTIVE:
            complete_time = None
        child_time = now if delta.state_changes else row["last_child_status_update_time"]
        if new_active != old_active:
            moved.append((row["xid"], int(new_active), row["launch_state"]))
        if delta.failures or (old_active, new_active) == _FINISHING:
            changes.append(_change(row, old_active, new_active, states, delta.failures))
        updates.append(
            (
                row["xid"],
                state_counts_to_array(states),
                severity_counts_to_array(severities),
                int(new_active),
                complete_time,
                child_time,
                now,
                delta.min_next_wid,
            )
        )
    await conn.executemany(
        """UPDATE experiments SET child_state_counts = $2, message_severity_counts = $3,
               active_state = $4, complete_time = $5, last_child_status_update_time = $6,
               status_update_time = $7, next_wid = greatest(next_wid, $8::bigint)
           WHERE xid = $1""",
        updates,
    )
    for xid, active, launch in moved:
        await insert_experiment_event(
            conn, xid, "state", active_state=active, launch_state=launch, now=now
        )
    if changes and events is not None:
        events.extend(changes)
    elif changes:
        await queue_events(conn, changes, {r["xid"]: r["creator"] for r in rows}, now=now)


_FINISHING = (ActiveState.ACTIVE, ActiveState.INACTIVE)


def _change(
    row: Mapping[str, Any],
    before: ActiveState,
    after: ActiveState,
    states: Mapping[WorkUnitState, int],
    failures: list[UnitFailure],
) -> ExperimentChange:
    """What notifications need of one experiment's rollup change (built only when a unit
    failed or the experiment finished: the observation path's common case skips it)."""
    return ExperimentChange(
        xid=row["xid"],
        title=row["title"],
        before=before,
        after=after,
        counts_before=state_counts_from_array(row["child_state_counts"]),
        counts_after=states,
        failures=tuple(failures),
    )


#: ``UpdateExperimentLaunchState`` may only end a launch (SPEC §2.1).
LAUNCH_TRANSITIONS = {LaunchState.LAUNCHING: {LaunchState.COMPLETED, LaunchState.FAILED}}


class LaunchMove(enum.Enum):
    MOVE = "move"
    #: A repeat of the current state: the published client sets COMPLETED at the end of
    #: every ``with experiment:`` block, re-entries of a launched experiment included.
    NO_OP = "no_op"
    REFUSE = "refuse"


def decide_launch_move(current: LaunchState, requested: LaunchState) -> LaunchMove:
    """What ``UpdateExperimentLaunchState`` does from ``current`` (pure, SPEC §2.1)."""
    if requested == current:
        return LaunchMove.NO_OP
    if requested in LAUNCH_TRANSITIONS.get(current, set()):
        return LaunchMove.MOVE
    return LaunchMove.REFUSE


async def update_launch_state(
    conn: Connection, xid: int, launch_state: LaunchState, *, now: datetime
) -> Experiment:
    """Move LAUNCHING → COMPLETED | FAILED and recompute ``active_state`` in the same
    transaction; a repeat of the current state changes nothing (not even ``update_time``);
    a launch-state change alone never sets ``complete_time`` (SPEC §3.3)."""
    row = await conn.fetchrow(
        """SELECT xid, launch_state, active_state, child_state_counts, title, creator
           FROM experiments WHERE xid = $1 FOR UPDATE""",
        xid,
    )
    if row is None:
        raise NotFoundError(f"name: {experiment_name(xid)} does not exist")
    current = LaunchState(row["launch_state"])
    move = decide_launch_move(current, launch_state)
    if move is LaunchMove.NO_OP:
        return await fetch_experiment(conn, xid)
    if move is LaunchMove.REFUSE:
        raise FailedPreconditionError(
            f"launch_state: cannot move {current.name} → {launch_state.name}; "
            "only LAUNCHING → COMPLETED or FAILED is allowed"
        )
    states = state_counts_from_array(row["child_state_counts"])
    active = compute_active_state(launch_state, states)
    await conn.execute(
        """UPDATE experiments SET launch_state = $2, active_state = $3, update_time = $4,
               status_update_time = $4
           WHERE xid = $1""",
        xid,
        int(launch_state),
        int(active),
        now,
    )
    await insert_experiment_event(
        conn, xid, "state", active_state=int(active), launch_state=int(launch_state), now=now
    )
    before = ActiveState(row["active_state"])
    if (before, active) == _FINISHING:  # the launch ended after its last unit did
        change = _change(row, before, active, states, [])
        await queue_events(conn, [change], {xid: row["creator"]}, now=now)
    return await fetch_experiment(conn, xid)


EXPERIMENT_LISTING = ListResource(
    source="experiments e",
    columns=", ".join(f"e.{c.strip()}" for c in EXPERIMENT_COLUMNS.split(",")),
    fields={
        "title": FieldSpec("e.title", FieldKind.STRING),
        "creator": FieldSpec("e.creator", FieldKind.STRING),
        "notes": FieldSpec("e.notes", FieldKind.STRING, sortable=False),
        "tags": FieldSpec("e.tags", FieldKind.STRING_LIST, sortable=False),
        "priority": FieldSpec("e.priority", FieldKind.ENUM, enum=Priority),
        "create_time": FieldSpec("e.create_time", FieldKind.TIMESTAMP),
        "update_time": FieldSpec("e.update_time", FieldKind.TIMESTAMP),
        "active_state": FieldSpec("e.active_state", FieldKind.ENUM, enum=ActiveState),
        "status.active_state": FieldSpec("e.active_state", FieldKind.ENUM, enum=ActiveState),
        "launch_state": FieldSpec("e.launch_state", FieldKind.ENUM, enum=LaunchState),
        "status.launch_state": FieldSpec("e.launch_state", FieldKind.ENUM, enum=LaunchState),
    },
    default_order=(OrderKey("create_time", descending=True),),
    tiebreak=("e.xid",),
)

#: What ``UpdateExperiment`` may change (everything else is owned by the server).
EXPERIMENT_UPDATABLE = frozenset(
    {"title", "tags", "notes", "urls", "acls", "priority", "resources"}
)


async def list_experiments(
    conn: Connection, request: ListRequest, reads: ReadScope = READS_EVERYTHING
) -> tuple[list[Experiment], str]:
    """A page of the experiments ``reads`` allows, filtered by Postgres before the page is
    cut (so pages are never short); the page token is bound to the caller's principals,
    and the next page is filtered again, so nobody else's token reveals a row."""
    where, params = readable_experiments_sql(reads, readers_column="e.readers")
    rows, token = await fetch_page(
        conn, EXPERIMENT_LISTING, request, where=where, params=params, scope=reads.binding()
    )
    return [experiment_from_row(r) for r in rows], token


async def update_experiment(
    conn: Connection, xid: int, source: Experiment, paths: tuple[str, ...], *, now: datetime
) -> Experiment:
    """Apply a validated update mask to the stored experiment; its readers follow its ACL
    (decision 0048)."""
    experiment = await fetch_experiment(conn, xid, for_update=True)
    apply_update_mask(experiment, source, paths)
    row = await fetch_one(
        conn,
        f"""UPDATE experiments SET title = $2, tags = $3, notes = $4, priority = $5, doc = $6,
                update_time = $7, readers = $8
            WHERE xid = $1 RETURNING {EXPERIMENT_COLUMNS}""",
        xid,
        experiment.title,
        list(experiment.tags),
        experiment.notes,
        int(experiment.priority),
        experiment_doc(experiment),
        now,
        experiment_readers(experiment.creator, experiment.acls),
    )
    return experiment_from_row(row)
