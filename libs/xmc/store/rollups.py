"""Experiment rollups (SPEC §3.3): the per-state work-unit counts, the best-message
severity counts, ``active_state`` and ``complete_time`` of an experiment, folded from what a
transaction did to its work units and written once per experiment, and the notifications a
rollup change raises (docs/notifications.md). Every writer of work units ends here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from xmc.model.notifications import ExperimentChange, UnitFailure
from xmc.model.rollups import (
    apply_child_state_change,
    apply_severity_change,
    compute_active_state,
    should_set_complete_time,
)
from xmc.model.states import ActiveState, LaunchState, Severity, WorkUnitState
from xmc.store.connection import Connection, Record
from xmc.store.notifications import queue_events
from xmc.store.watch_events import insert_experiment_event

#: Elements of ``child_state_counts`` (every WorkUnitState) and of
#: ``message_severity_counts`` (every Severity / 10), as the table's CHECKs say.
N_STATES = 13
N_SEVERITIES = 6
#: The experiment columns a rollup reads, for a caller that reads them itself under its
#: own row lock (:func:`apply_rollups` ``locked``).
ROLLUP_COLUMNS = (
    "xid, launch_state, active_state, child_state_counts, message_severity_counts, "
    "complete_time, last_child_status_update_time, title, creator"
)


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
    locked: Sequence[Record] | None = None,
) -> None:
    """Recompute counts, ``active_state`` and ``complete_time`` of the touched experiments
    (``DenormalizeWorkUnitStatus`` + ``updateExperimentFromExecutions`` of the reference).

    The notifications the change raises are queued here, unless ``events`` is given: then
    they are appended to it, for a caller that changes more in the same transaction (an
    automatic retry turns a unit that failed RESTARTING again) to queue them once, on the
    transaction's net effect (``xmc.store.notifications.queue_settled_events``).

    ``locked``: the experiments' :data:`ROLLUP_COLUMNS`, read by the caller ``FOR UPDATE``
    in this transaction and not written since (a create group reads them with the lock
    it takes to plan ids), which saves this function its read: one round trip less.

    Called after the work-unit rows are locked, so the lock order is always work units
    first, then experiments in xid order. ``complete_time`` is set only when an execution
    update (``execution_update``) turns the experiment INACTIVE (SPEC §3.3); a restart that
    reactivates it clears the stale value.
    """
    xids = sorted(xid for xid, delta in deltas.items() if delta)
    if not xids:
        return
    if locked is None:
        rows = await conn.fetch(
            f"SELECT {ROLLUP_COLUMNS} FROM experiments WHERE xid = ANY($1::bigint[]) "
            "ORDER BY xid FOR UPDATE",
            xids,
        )
    else:
        rows = [row for row in locked if row["xid"] in deltas and deltas[row["xid"]]]
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
        if delta.failures or (old_active, new_active) == FINISHING:
            changes.append(experiment_change(row, old_active, new_active, states, delta.failures))
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


FINISHING = (ActiveState.ACTIVE, ActiveState.INACTIVE)


def experiment_change(
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
