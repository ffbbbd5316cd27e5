"""What a fault run observed, judged: which intents and retries were lost, which units
are stuck or went past their execution (bench/faults.py). Pure: an observation in,
counts and notes out."""

from __future__ import annotations

from dataclasses import dataclass, field

from xmc.labels import jobset_name
from xmc.model.states import WorkUnitState

S = WorkUnitState
#: The (execution, state) a unit of each role ends in.
END: dict[str, tuple[int, WorkUnitState]] = {
    "complete": (1, S.COMPLETED), "stop": (1, S.STOPPED), "restart": (2, S.RUNNING),
    "retry": (3, S.FAILED),
}  # fmt: skip


@dataclass(frozen=True)
class Intent:
    kind: str  # "create" | "stop" | "restart"
    unit: str
    operation: str


@dataclass(frozen=True)
class JobSet:
    execution: str
    deleting: bool


@dataclass
class Observed:
    """One look at the system; no units and no operations when the ESS did not answer."""

    units: dict[str, tuple[int, WorkUnitState]] = field(default_factory=dict)
    operations: dict[str, tuple[bool, int]] = field(default_factory=dict)  # done, error code
    jobsets: dict[str, JobSet] = field(default_factory=dict)  # live now, by name
    created: frozenset[tuple[str, str]] = frozenset()  # (name, execution) ever created
    duplicated: tuple[tuple[str, str], ...] = ()


@dataclass
class Counts:
    lost: int = 0
    duplicated: int = 0
    stuck: int = 0
    died: int = 0
    notes: list[str] = field(default_factory=list)


def unit_jobset(unit: str) -> str:
    """``experiments/{xid}/workUnits/{wid}`` → the JobSet name the Actuator gives it."""
    parts = unit.split("/")
    return jobset_name(int(parts[1]), int(parts[3]))


def lost_reason(intent: Intent, obs: Observed) -> str | None:
    """Why ``intent`` had no effect, or None if it had one."""
    name = unit_jobset(intent.unit)
    done, code = obs.operations.get(intent.operation, (False, 0))
    live = obs.jobsets.get(name)
    if not done:
        return "operation not done"
    if code:
        return f"operation done with error code {code}"
    if intent.kind == "create" and (name, "1") not in obs.created:
        return "no JobSet of execution 1 was ever created"
    if intent.kind == "restart" and (name, "2") not in obs.created:
        return "no JobSet of execution 2 was ever created"
    if intent.kind == "stop" and live is not None and not live.deleting:
        return f"JobSet (execution {live.execution}) still there, never deleted"
    return None


def stuck_reason(unit: str, role: str, obs: Observed) -> str | None:
    """Why ``unit`` is not in its end state, or None if it is."""
    seen, (eid, state) = obs.units.get(unit), END[role]
    if seen != (eid, state):
        return f"at {seen and (seen[0], seen[1].name)}, want {(eid, state.name)}"
    live = obs.jobsets.get(unit_jobset(unit))
    if role == "stop" and live is not None:
        return f"STOPPED but its JobSet is still there (deleting={live.deleting})"
    if role == "restart" and (live is None or live.execution != "2" or live.deleting):
        return f"RUNNING but its JobSet is {live}"
    return None


def lost_retries(roles: dict[str, str], intents: list[Intent], obs: Observed) -> list[str]:
    """The automatic retries with no effect: an F unit's execution 2 or 3 the cluster
    never saw, a retry's Operation (one no client asked for) not done or failed."""
    lost = []
    for unit, role in sorted(roles.items()):
        if role == "retry":
            lost += [
                f"lost retry {unit}: no JobSet of execution {eid} was ever created"
                for eid in ("2", "3")
                if (unit_jobset(unit), eid) not in obs.created
            ]
    asked = {intent.operation for intent in intents}
    for name, (done, code) in sorted(obs.operations.items()):
        if name not in asked and (not done or code):
            lost.append(f"lost retry operation {name}: done={done} error code {code}")
    return lost


def count(roles: dict[str, str], intents: list[Intent], obs: Observed) -> Counts:
    counts = Counts()
    for intent in intents:
        if reason := lost_reason(intent, obs):
            counts.lost += 1
            counts.notes.append(f"lost {intent.kind} {intent.unit}: {reason}")
    retries = lost_retries(roles, intents, obs)
    counts.lost += len(retries)
    counts.notes += retries
    for unit, role in sorted(roles.items()):
        if reason := stuck_reason(unit, role, obs):
            counts.stuck += 1
            counts.notes.append(f"stuck {role} {unit}: {reason}")
        if (seen := obs.units.get(unit)) and seen[0] > END[role][0]:
            counts.duplicated += 1
            counts.notes.append(f"duplicated {unit}: on execution {seen[0]}")
    counts.duplicated += len(obs.duplicated)
    counts.notes += [f"duplicated JobSet {name} execution {eid}" for name, eid in obs.duplicated]
    return counts
