"""Business metrics (issue 29, docs/metrics.md, decision 0050): what an accepted state
change says about the shared cluster, as pure functions of the change.

Kept apart from the Prometheus objects so the rules — which change is a queue wait, which
is an execution's first start, which reason a failure is counted under — are table-tested
without a registry, and the store only hands over facts it already holds.

Clocks. A *queue wait* is the time between two states the Reconciler stamped from the
cluster's evidence (SCHEDULING's ``state_update_time`` and the next state's), so both ends
come from one source. *Create to RUNNING* runs from the execution's ``create_time`` (the
ESS's clock, when the create or restart committed) to the moment the ESS applied RUNNING
(the ESS's clock again), not to the RUNNING ``state_update_time``, which the Reconciler
stamps: a Reconciler host whose clock is behind would otherwise make starts look instant
or negative. Either figure is clamped at zero: two ESS replicas' clocks may differ by a
little, and a histogram has no bucket for a negative time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, NamedTuple

from xmc.model.retries import Failure
from xmc.model.states import WorkUnitState

#: States an execution passes through before its first run: entering RUNNING from one of
#: these may be its first start (the store's history says whether it is).
BEFORE_RUNNING: Final = frozenset(
    {
        WorkUnitState.INITIALIZING,
        WorkUnitState.SCHEDULING,
        WorkUnitState.SCHEDULING_PAUSED,
        WorkUnitState.STARTING,
        WorkUnitState.RESTARTING,
    }
)

#: A wait in Kueue's queue ends when the execution is admitted: STARTING or RUNNING.
_ADMITTED: Final = frozenset({WorkUnitState.STARTING, WorkUnitState.RUNNING})

#: Exit code of a container the kernel killed (SIGKILL: 128 + 9), usually out of memory.
KILLED_EXIT_CODE: Final = 137


class Transition(NamedTuple):
    """One accepted state change of an execution, with the times the rules need."""

    xid: int
    wid: int
    eid: int
    old: WorkUnitState
    new: WorkUnitState
    #: When the old state began (its ``state_update_time``).
    old_since: datetime
    #: The new state's ``state_update_time``.
    new_since: datetime
    #: The execution's ``create_time`` (the create or restart that began it).
    created: datetime


class FailureReason(enum.StrEnum):
    """The bounded label of ``xmc_work_unit_failures_total`` (never an id or a text)."""

    #: A container exited non-zero on its own (the exit code is in the status message).
    EXIT_CODE = "exit_code"
    #: A container was SIGKILLed (exit code 137): out of memory, most often.
    KILLED = "killed"
    #: The pod was disrupted (preempted, evicted, its node gone).
    DISRUPTED = "disrupted"
    #: The run never started its containers (image pull, bad spec at the kubelet).
    STARTUP = "startup"
    #: The Job or JobSet failed without a container's exit code (deadline, backoff limit).
    JOB = "job"
    #: The Actuator could not create the JobSet for good (the cluster refused it).
    REFUSED = "refused"
    #: The ESS could not deliver the create or restart task to the Actuator.
    UNDELIVERABLE = "undeliverable"
    #: FAILED without the Reconciler's facts (a JobSet that vanished, an older Reconciler).
    UNKNOWN = "unknown"


def failure_reason(failure: Failure | None) -> FailureReason:
    """The reason a FAILED execution is counted under, from the Reconciler's facts."""
    if failure is None:
        return FailureReason.UNKNOWN
    if failure.disrupted:
        return FailureReason.DISRUPTED
    if failure.exit_code is not None:
        return (
            FailureReason.KILLED
            if failure.exit_code == KILLED_EXIT_CODE
            else (FailureReason.EXIT_CODE)
        )
    if failure.cause == "startup":
        return FailureReason.STARTUP
    if failure.cause in ("job", "jobset"):
        return FailureReason.JOB
    return FailureReason.UNKNOWN


def queue_wait_seconds(transition: Transition) -> float | None:
    """How long the execution waited in the queue, when this change ends a wait: it
    leaves SCHEDULING for STARTING or RUNNING. Each admission is one wait, so a preempted
    execution that queues again counts its second wait too."""
    if transition.old != WorkUnitState.SCHEDULING or transition.new not in _ADMITTED:
        return None
    return max(0.0, (transition.new_since - transition.old_since).total_seconds())


def may_be_first_start(transition: Transition) -> bool:
    """Whether this change can be the execution's first RUNNING (the history decides)."""
    return transition.new == WorkUnitState.RUNNING and transition.old in BEFORE_RUNNING


@dataclass(frozen=True)
class FirstStart:
    """An execution's first RUNNING: ``seconds`` since its create (or restart)."""

    seconds: float
    #: ``first`` for a work unit's first execution, ``restart`` for a later one.
    execution: str


def first_start(transition: Transition, applied_at: datetime) -> FirstStart:
    """The create-to-RUNNING figure of a change the history confirmed as the first start."""
    seconds = max(0.0, (applied_at - transition.created).total_seconds())
    return FirstStart(seconds, "first" if transition.eid == 1 else "restart")


def first_start_candidates(transitions: Iterable[Transition]) -> list[Transition]:
    return [t for t in transitions if may_be_first_start(t)]
