"""Which runs a batch of history rows opens and closes (docs/usage.md, decision 0045).

A run is a stretch an execution spent RUNNING or PARTIALLY_FAILED (its pods hold their
resources in both). A history row that enters those states opens one; a row that leaves
them (a stop, a failure, a preemption, a restart's row of the next execution) closes the
unit's open run at its time. Worked out here, per batch, so the store writes all of a
batch's runs in one statement instead of a trigger's statement per row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from xmc.model.timeline import RUN_STATES


@dataclass
class RunChanges:
    #: (xid, wid, time): close the unit's run left open by an earlier batch.
    closes: list[tuple[int, int, datetime]] = field(default_factory=list)
    #: (xid, wid, eid, start, end or None): runs this batch begins (ended too, when the
    #: batch also left the run states).
    runs: list[tuple[int, int, int, datetime, datetime | None]] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.closes or self.runs)


def run_changes(rows: Iterable[tuple[Any, ...]]) -> RunChanges:
    """History rows (xid, wid, eid, old, new, state_update_time, …) in write order → the
    runs to close and write. An end that a skewed clock puts before its start is the start."""
    changes = RunChanges()
    opened: dict[tuple[int, int], int] = {}  # unit → index in changes.runs, still open
    for xid, wid, eid, old, new, at, *_ in rows:
        was, now = old in RUN_STATES, new in RUN_STATES
        if was == now:
            continue
        unit = (xid, wid)
        if now:
            opened[unit] = len(changes.runs)
            changes.runs.append((xid, wid, eid, at, None))
        elif unit in opened:
            index = opened.pop(unit)
            x, w, e, start, _ = changes.runs[index]
            changes.runs[index] = (x, w, e, start, max(at, start))
        else:
            changes.closes.append((xid, wid, at))
    return changes
