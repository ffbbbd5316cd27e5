"""Experiment rows and the experiment rollups of SPEC §3.3, applied inside the caller's
transaction.

Counts live in two arrays on the experiment row (per state, per severity) so a batch that
touches a thousand work units of one experiment updates that row once.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from xmc.errors import FailedPreconditionError, NotFoundError
from xmc.masks import apply_update_mask
from xmc.model.read_access import READS_EVERYTHING, ReadScope, experiment_readers
from xmc.model.rollups import (
    compute_active_state,
)
from xmc.model.states import ActiveState, LaunchState, Priority
from xmc.names import experiment_name
from xmc.query import FieldKind, FieldSpec, OrderKey
from xmc.store.codec import optional_bytes
from xmc.store.connection import Connection, fetch_one
from xmc.store.listing import ListRequest, ListResource, fetch_page
from xmc.store.notifications import queue_events
from xmc.store.read_access import readable_experiments_sql
from xmc.store.rollups import (
    FINISHING,
    experiment_change,
    severity_counts_from_array,
    state_counts_from_array,
)
from xmc.store.watch_events import insert_experiment_event
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls

EXPERIMENT_COLUMNS = """xid, title, creator, priority, tags, notes, doc, create_time, update_time,
    complete_time, launch_state, active_state, launch_id, child_state_counts,
    message_severity_counts, last_child_status_update_time, status_update_time,
    structured_status_message"""


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
    if (before, active) == FINISHING:  # the launch ended after its last unit did
        change = experiment_change(row, before, active, states, [])
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
