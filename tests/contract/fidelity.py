"""kubesim measured against the real control plane (issue 25, point 4): one list of
scenarios, each run on both, recording what XMC reads — the work-unit state the
Reconciler's mapping (SPEC §8.1) gives at every look, and at the end the JobSet's,
Workload's, Jobs' and Pods' conditions, counts and container outcomes.

What is compared is what XMC depends on, not timing: the sequence of distinct work-unit
states (each scenario's steps last several cluster seconds, so a 50 ms look sees every
one on kubesim's scaled clock as on the real one) and the final :class:`Snapshot`.
:func:`snapshot` is pure; :func:`record` drives one scenario on one cluster.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.contract.cluster import JOBS, Cluster
from xmc.kube import PODS, WORKLOADS
from xmc.model.jobset import decide_work_unit_state, is_finishing, summarize_pods
from xmc.model.states import WorkUnitState

Obj = dict[str, Any]
#: Conditions as (type, reason) of those whose status is True, sorted.
Conditions = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Snapshot:
    """What XMC reads of one JobSet and its children at one moment (no names, no times)."""

    state: str
    """XMC's work-unit state (``decide_work_unit_state``); ``GONE`` once deleted."""
    jobset: Conditions = ()
    terminal_state: str = ""
    suspended: bool = False
    workload: Conditions = ()
    jobs: tuple[int, int, int] = (0, 0, 0)
    """Summed ``active``, ``succeeded``, ``failed`` of the JobSet's Jobs."""
    pods: tuple[tuple[str, str, int | None], ...] = ()
    """Per pod, sorted: (phase, container state reason, exit code) of its first container."""


GONE = Snapshot(state="GONE")


def _true_conditions(obj: Mapping[str, Any] | None) -> Conditions:
    items = ((obj or {}).get("status") or {}).get("conditions") or []
    return tuple(
        sorted((str(c.get("type")), str(c.get("reason") or "")) for c in items
               if c.get("status") == "True")
    )  # fmt: skip


def _container_outcome(pod: Mapping[str, Any]) -> tuple[str, str, int | None]:
    status = pod.get("status") or {}
    phase = str(status.get("phase") or "")
    containers = status.get("containerStatuses") or []
    if not containers:
        return (phase, "", None)
    state = containers[0].get("state") or {}
    for kind in ("terminated", "waiting"):
        if kind in state:
            detail = state[kind] or {}
            code = detail.get("exitCode")
            return (
                phase,
                str(detail.get("reason") or kind),
                code if isinstance(code, int) else None,
            )
    return (phase, "running" if "running" in state else "", None)


def snapshot(
    jobset: Mapping[str, Any] | None,
    workloads: Sequence[Mapping[str, Any]],
    jobs: Sequence[Mapping[str, Any]],
    pods: Sequence[Mapping[str, Any]],
) -> Snapshot:
    """The :class:`Snapshot` of one JobSet (None: deleted) and its children."""
    if jobset is None:
        return GONE
    summary = summarize_pods(pods)
    # What the Reconciler reports: nothing while the Jobs are finishing (decision 0030).
    state = (
        "" if is_finishing(jobset, summary) else decide_work_unit_state(jobset, summary).state.name
    )
    totals = [0, 0, 0]
    for job in jobs:
        status = job.get("status") or {}
        for i, key in enumerate(("active", "succeeded", "failed")):
            value = status.get(key)
            totals[i] += value if isinstance(value, int) else 0
    return Snapshot(
        state=state,
        jobset=_true_conditions(jobset),
        terminal_state=str((jobset.get("status") or {}).get("terminalState") or ""),
        suspended=(jobset.get("spec") or {}).get("suspend") is True,
        workload=tuple(sorted(c for w in workloads for c in _true_conditions(w))),
        jobs=(totals[0], totals[1], totals[2]),
        pods=tuple(sorted(_container_outcome(p) for p in pods
                          if not (p.get("metadata") or {}).get("deletionTimestamp"))),
    )  # fmt: skip


def distinct_states(snapshots: Sequence[Snapshot]) -> list[str]:
    """The work-unit states in the order first seen, repeats of the previous one removed;
    a look where XMC reports nothing (``""``: the Jobs finishing) is skipped."""
    states: list[str] = []
    for shot in snapshots:
        if shot.state and (not states or states[-1] != shot.state):
            states.append(shot.state)
    return states


Act = Callable[[Cluster, Obj], Awaitable[None]]


@dataclass(frozen=True)
class Scenario:
    name: str
    behavior: Mapping[str, Any] | None
    """The pod's ``kubesim.xmc/behavior`` (None: runs until stopped)."""
    until: Callable[[Snapshot], bool]
    """The last look: the scenario ends at the first snapshot meeting it."""
    act: Mapping[str, Act] = field(default_factory=dict)
    """Actions by work-unit state: run once, the first time the state is seen."""
    within: float = 120
    """Cluster seconds the scenario may take."""


@dataclass
class Recording:
    snapshots: list[Snapshot] = field(default_factory=list)

    @property
    def states(self) -> list[str]:
        return distinct_states(self.snapshots)

    @property
    def final(self) -> Snapshot:
        return self.snapshots[-1]


async def look(cluster: Cluster, created: Obj) -> Snapshot:
    """One snapshot of the JobSet ``created`` (by uid) and its children."""
    jobset = await cluster.jobset(created["metadata"]["name"])
    if jobset is None or jobset["metadata"]["uid"] != created["metadata"]["uid"]:
        return GONE
    workloads = await cluster.owned(WORKLOADS, jobset)
    jobs = await cluster.owned(JOBS, jobset)
    pods = await cluster.owned(PODS, jobset)
    return snapshot(jobset, workloads, jobs, pods)


async def record(cluster: Cluster, scenario: Scenario, *, wid: int) -> Recording:
    """Run ``scenario`` on ``cluster``: create the work unit's JobSet as the Actuator does,
    look every poll until ``scenario.until``, acting on the states it names."""
    created = await cluster.create_work_unit(wid, behavior=scenario.behavior, grace_seconds=5)
    recording = Recording()
    acted: set[str] = set()

    async def done() -> bool:
        shot = await look(cluster, created)
        if not recording.snapshots or recording.snapshots[-1] != shot:
            recording.snapshots.append(shot)
        action = scenario.act.get(shot.state)
        if action is not None and shot.state not in acted:
            acted.add(shot.state)
            await action(cluster, created)
        return scenario.until(shot)

    await cluster.wait(done, within=scenario.within, what=f"scenario {scenario.name}")
    return recording


async def stop_and_release(cluster: Cluster, created: Obj) -> None:
    """XMC's stop: the Actuator deletes the JobSet; the Reconciler, having written the
    final state, removes the finalizer (here at once)."""
    await cluster.stop(created)
    await cluster.release(created["metadata"]["name"])


def ended(*states: WorkUnitState) -> Callable[[Snapshot], bool]:
    """In one of ``states``, no Job active, and Kueue's Workload ``Finished``: on the real
    control plane Kueue marks the Workload a moment after the JobSet's terminal condition
    (kubesim in the same write; XMC reads only the JobSet), so the last look waits for
    both to settle."""
    names = {s.name for s in states}
    return lambda shot: (
        shot.state in names
        and not shot.jobs[0]
        and any(kind == "Finished" for kind, _ in shot.workload)
    )


SCENARIOS = [
    Scenario("completes", {"start_seconds": 2, "run_seconds": 6}, ended(WorkUnitState.COMPLETED)),
    Scenario(
        "exits 3",
        {"start_seconds": 2, "run_seconds": 4, "exit_code": 3},
        ended(WorkUnitState.FAILED),
    ),
    Scenario(
        "is OOM-killed",
        {"start_seconds": 2, "run_seconds": 4, "oom_killed": True},
        ended(WorkUnitState.FAILED),
    ),
    Scenario(
        "runs until stopped",
        None,
        lambda shot: shot == GONE,
        act={WorkUnitState.RUNNING.name: stop_and_release},
    ),
]


def comparable_states(states: Sequence[str]) -> list[str]:
    """The states with one known timing difference taken out (docs/kubesim.md, "Measured
    against the real control plane"): a first SCHEDULING (a new JobSet waits for Kueue's
    admission on both, but on kubesim's scaled clock the wait may be shorter than one
    look). The real cluster's other window, a finished pod's Job counting nothing until
    its terminal condition, is no longer a difference: XMC reports nothing then
    (decision 0030), and :func:`snapshot` records what XMC reports."""
    return list(states[1:] if states[:1] == ["SCHEDULING"] else states)


def compare(kubesim: Recording, real: Recording) -> list[str]:
    """Where kubesim's recording differs from the real control plane's, one line each."""
    differences = []
    ours, theirs = comparable_states(kubesim.states), comparable_states(real.states)
    if ours != theirs:
        differences.append(f"work-unit states: kubesim {ours}, real {theirs}")
    for name in Snapshot.__dataclass_fields__:
        ours, theirs = getattr(kubesim.final, name), getattr(real.final, name)
        if ours != theirs:
            differences.append(f"final {name}: kubesim {ours!r}, real {theirs!r}")
    return differences
