"""State guard of the masked write path (SPEC §5.2, `ShouldUpdateWorkUnitExecutionState`).

Several writers (ESS, Actuator, Reconciler replicas with their own clocks) race to set an
execution's state. The guard decides, from the stored and proposed states and times alone,
whether a proposed state may replace the stored one; the checks run in the SPEC's order and
the first that decides wins.
"""

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType

from xmc.model.states import (
    CLUSTER_OBSERVED_STATES,
    EXECUTION_TERMINAL_STATES,
    WORK_UNIT_TIME_IGNORED_STATES,
    WorkUnitState,
)
from xmc.timestamps import as_utc

UNIX_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
"""A zero protobuf Timestamp: set but meaningless, so the state change is dropped."""

# Where a live execution may go next: the cluster's view, a stop, or an end.
_ONWARD = CLUSTER_OBSERVED_STATES | {WorkUnitState.STOPPING} | EXECUTION_TERMINAL_STATES

ALLOWED_TRANSITIONS: Mapping[WorkUnitState, frozenset[WorkUnitState]] = MappingProxyType(
    {
        WorkUnitState.WORK_UNIT_STATE_UNSPECIFIED: frozenset(),
        WorkUnitState.INITIALIZING: _ONWARD | {WorkUnitState.SCHEDULING_PAUSED},
        WorkUnitState.RESTARTING: _ONWARD | {WorkUnitState.SCHEDULING_PAUSED},
        WorkUnitState.SCHEDULING_PAUSED: _ONWARD,
        # Preemption moves RUNNING or STARTING back to SCHEDULING on the same execution.
        **{s: _ONWARD - {s} for s in CLUSTER_OBSERVED_STATES},
        WorkUnitState.STOPPING: EXECUTION_TERMINAL_STATES,
        **{s: frozenset() for s in EXECUTION_TERMINAL_STATES},
    }
)
"""Step 6 of §5.2: the states each state may move to. Nothing moves into INITIALIZING,
RESTARTING or UNSPECIFIED here: those are written only when an execution is created."""


INTENT_STATES: frozenset[WorkUnitState] = frozenset(
    {
        WorkUnitState.INITIALIZING,
        WorkUnitState.RESTARTING,
        WorkUnitState.SCHEDULING_PAUSED,
        WorkUnitState.STOPPING,
    }
)
"""States XMC itself writes (ESS, Actuator), stamped by an XMC clock to the microsecond.
Every other state comes from the cluster: a condition's ``lastTransitionTime``, the
``deletionTimestamp`` or the ``creationTimestamp``, whole seconds from the API server's
clock, which may be skewed against XMC's. Comparing a time of one clock with a time of the
other says nothing, so leaving one of these states skips the time order: the cluster's
first report after a create, a restart or a resume, and its terminal report after a stop
(the JobSet deleted within the same second as the stop) are never "older" than the intent.
Nothing stale can slip through: the EID fence keeps older executions out, and the
transition table lets STOPPING move only to a terminal state (docs/decisions/0011)."""


class GuardReason(enum.StrEnum):
    """Why the guard decided as it did; low-cardinality, fit for a metric label."""

    ACCEPTED = "accepted"
    ZERO_TIME = "zero_time"
    TERMINAL = "terminal"
    SAME_STATE = "same_state"
    STALE_TIME = "stale_time"
    TRANSITION_NOT_ALLOWED = "transition_not_allowed"


@dataclass(frozen=True)
class StateUpdateDecision:
    """Whether the proposed state replaces the stored one, and why."""

    allowed: bool
    reason: GuardReason


#: The six decisions there are, made once: the guard runs for every observed item.
_DECIDED = {
    reason: StateUpdateDecision(allowed=reason is GuardReason.ACCEPTED, reason=reason)
    for reason in GuardReason
}
_ZERO_TIME = _DECIDED[GuardReason.ZERO_TIME]
_TERMINAL = _DECIDED[GuardReason.TERMINAL]
_SAME_STATE = _DECIDED[GuardReason.SAME_STATE]
_STALE_TIME = _DECIDED[GuardReason.STALE_TIME]
_NOT_ALLOWED = _DECIDED[GuardReason.TRANSITION_NOT_ALLOWED]
_ACCEPTED = _DECIDED[GuardReason.ACCEPTED]
_NOWHERE: frozenset[WorkUnitState] = frozenset()


def decide_state_update(
    current_state: WorkUnitState,
    current_state_update_time: datetime | None,
    new_state: WorkUnitState,
    new_state_update_time: datetime | None,
) -> StateUpdateDecision:
    """Run the §5.2 checks in order and report the first that decides.

    Raises ValueError when the new time is missing: that is a malformed request, and the
    caller fails the whole batch with INVALID_ARGUMENT rather than dropping one item.
    """
    # 1. A missing time is the caller's error, not a rejected transition.
    if new_state_update_time is None:
        raise ValueError("status.state_update_time is required when status.state is updated")
    new_time = as_utc(new_state_update_time)
    # 2. A zero timestamp is set but meaningless: drop the state change quietly.
    if new_time == UNIX_EPOCH:
        return _ZERO_TIME
    # 3. A finished execution is immutable.
    if current_state in EXECUTION_TERMINAL_STATES:
        return _TERMINAL
    # 4. Same state: nothing changes, not even the time.
    if new_state == current_state:
        return _SAME_STATE
    # 5. Older news loses, but only between two times of the same clock: a user's stop
    #    must survive a cluster clock running ahead, and an intent state's time is XMC's
    #    clock, not the cluster's (see INTENT_STATES).
    if (
        current_state_update_time is not None
        and as_utc(current_state_update_time) > new_time
        and new_state not in WORK_UNIT_TIME_IGNORED_STATES
        and current_state not in INTENT_STATES
    ):
        return _STALE_TIME
    # 6. Only the listed transitions.
    if new_state not in ALLOWED_TRANSITIONS.get(current_state, _NOWHERE):
        return _NOT_ALLOWED
    return _ACCEPTED


def should_update_work_unit_execution_state(
    current_state: WorkUnitState,
    current_state_update_time: datetime | None,
    new_state: WorkUnitState,
    new_state_update_time: datetime | None,
) -> bool:
    """`ShouldUpdateWorkUnitExecutionState`: `decide_state_update` without the reason."""
    return decide_state_update(
        current_state, current_state_update_time, new_state, new_state_update_time
    ).allowed
