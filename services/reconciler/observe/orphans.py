"""Orphaned JobSets (SPEC §8.6): which JobSets the resync deletes, and why."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Final

from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState


@dataclass(frozen=True)
class WorkUnitSnapshot:
    """The store's view of a work unit, enough to judge a JobSet."""

    eid: int
    state: WorkUnitState


class OrphanReason(enum.StrEnum):
    """Why a JobSet is, or is not, deleted by the resync; also the metric label."""

    CURRENT = "current"
    ALREADY_DELETING = "already_deleting"
    #: The JobSet names a newer execution than the store knows: a stale read, not an orphan.
    AHEAD_OF_STORE = "ahead_of_store"
    WORK_UNIT_GONE = "work_unit_gone"
    SUPERSEDED = "superseded"
    WORK_UNIT_TERMINAL = "work_unit_terminal"


_ORPHAN_REASONS: Final = frozenset(
    {OrphanReason.WORK_UNIT_GONE, OrphanReason.SUPERSEDED, OrphanReason.WORK_UNIT_TERMINAL}
)


@dataclass(frozen=True)
class OrphanDecision:
    reason: OrphanReason

    @property
    def orphan(self) -> bool:
        """Delete the JobSet (with a UID precondition)."""
        return self.reason in _ORPHAN_REASONS


def decide_orphan(
    jobset_ids: tuple[int, int, int],
    work_unit: WorkUnitSnapshot | None,
    *,
    deleting: bool = False,
) -> OrphanDecision:
    """A JobSet nobody will ever stop is deleted, so a race between tasks never leaves a job
    running unseen (§8.6). A JobSet already being deleted is left to its finalizer."""
    _, _, eid = jobset_ids
    if deleting:
        return OrphanDecision(OrphanReason.ALREADY_DELETING)
    if work_unit is None:
        return OrphanDecision(OrphanReason.WORK_UNIT_GONE)
    if eid < work_unit.eid:
        return OrphanDecision(OrphanReason.SUPERSEDED)
    if eid > work_unit.eid:
        return OrphanDecision(OrphanReason.AHEAD_OF_STORE)
    if work_unit.state in EXECUTION_TERMINAL_STATES:
        return OrphanDecision(OrphanReason.WORK_UNIT_TERMINAL)
    return OrphanDecision(OrphanReason.CURRENT)
