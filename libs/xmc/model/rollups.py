"""Experiment rollups recomputed with every accepted work-unit change (SPEC §3.3).

The store calls these inside the transaction that changes a work unit or the launch
state, so the experiment row never disagrees with its work units.
"""

from collections.abc import Mapping
from typing import Protocol, TypeVar

from xmc.model.states import (
    EXECUTION_TERMINAL_STATES,
    ActiveState,
    LaunchState,
    Severity,
    WorkUnitState,
)

_K = TypeVar("_K", WorkUnitState, Severity)


def compute_active_state(
    launch_state: LaunchState, child_state_counts: Mapping[WorkUnitState, int]
) -> ActiveState:
    """`update_experiment_active_state`: derive `active_state` from launch and child states.

    FAILED launch → INACTIVE; LAUNCHING → ACTIVE (more work units may come); otherwise
    ACTIVE iff some work unit is not execution-terminal. LAUNCH_STATE_UNSPECIFIED is
    treated like LAUNCHING: until the client declares the launch over, it may still add
    work units, so the experiment must not be reported finished.
    """
    if launch_state == LaunchState.FAILED:
        return ActiveState.INACTIVE
    if launch_state in (LaunchState.LAUNCHING, LaunchState.LAUNCH_STATE_UNSPECIFIED):
        return ActiveState.ACTIVE
    unfinished = any(
        count > 0
        for state, count in child_state_counts.items()
        if state not in EXECUTION_TERMINAL_STATES
    )
    return ActiveState.ACTIVE if unfinished else ActiveState.INACTIVE


update_experiment_active_state = compute_active_state


def _move_count(counts: Mapping[_K, int], old: _K | None, new: _K | None) -> dict[_K, int]:
    """Move one unit from `old` to `new`; zero entries are dropped so equal tallies are equal."""
    moved = dict(counts)
    if old is not None:
        if moved.get(old, 0) <= 0:
            raise ValueError(f"count of {old.name} would go below 0: stored counts are corrupt")
        moved[old] -= 1
    if new is not None:
        moved[new] = moved.get(new, 0) + 1
    if 0 in moved.values():  # rarely: a scan in C spares the copy of every other move
        return {key: count for key, count in moved.items() if count != 0}
    return moved


def apply_child_state_change(
    counts: Mapping[WorkUnitState, int], old: WorkUnitState | None, new: WorkUnitState
) -> dict[WorkUnitState, int]:
    """New `child_state_counts` after one work unit moves from `old` (None: created) to `new`.

    States whose count reaches 0 are left out of the result. Raises ValueError on
    underflow: it means the stored counts disagree with the work units.
    """
    return _move_count(counts, old, new)


class MessageLike(Protocol):
    """Anything with a severity: a `StructuredMessage` or a test double."""

    @property
    def severity(self) -> int: ...


_M = TypeVar("_M", bound=MessageLike)


def get_best_message_from_status(system_message: _M | None, user_message: _M | None) -> _M | None:
    """`GetBestMessageFromStatus`: the higher-severity message; the system's wins ties.

    A present message with severity 0 (unspecified) still counts, so a work unit with any
    message always contributes one.
    """
    if system_message is None:
        return user_message
    if user_message is None or user_message.severity <= system_message.severity:
        return system_message
    return user_message


def best_severity(
    system_message: MessageLike | None, user_message: MessageLike | None
) -> Severity | None:
    """Severity of the best message, or None when the work unit has no message.

    Raises ValueError for a severity outside the contract; the API edge validates it first.
    """
    best = get_best_message_from_status(system_message, user_message)
    return None if best is None else Severity(best.severity)


def apply_severity_change(
    counts: Mapping[Severity, int], old: Severity | None, new: Severity | None
) -> dict[Severity, int]:
    """New `message_severity_counts` after one work unit's best message changes.

    Each work unit contributes one message, its best; None means it contributes nothing.
    Raises ValueError on underflow, as `apply_child_state_change` does.
    """
    return _move_count(counts, old, new)


def should_set_complete_time(old_active: ActiveState, new_active: ActiveState) -> bool:
    """Whether an execution update finishes the experiment (ACTIVE → INACTIVE).

    Call it only for execution updates: a launch-state change alone never sets
    `complete_time` (§3.3).
    """
    return old_active == ActiveState.ACTIVE and new_active == ActiveState.INACTIVE
