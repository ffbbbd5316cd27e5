"""The simulated kubelet's decision — pure: ``pod_status_at(pod, behaviors, started_at,
elapsed)`` is the whole pod status ``elapsed`` simulated seconds after the kubelet took
the pod, plus the moment it next changes. ``kubelet.py`` explains the timeline and runs
it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubesim.clock import rfc3339

from .behavior import ERR_IMAGE_PULL, IMAGE_PULL_BACKOFF, ContainerBehavior

PULL_BACKOFF_SECONDS = 10.0
"""Simulated seconds an image pull error shows ``ErrImagePull`` before ``ImagePullBackOff``."""
HOST_IP = "10.0.0.1"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class PodSnapshot:
    status: dict[str, Any]
    next_change: float | None
    """Elapsed simulated seconds at which the status next changes; None: never again."""


@dataclass
class _Timeline:
    """Accumulates the moments after ``now`` at which something will change."""

    now: float
    started_at: datetime
    changes: list[float] = field(default_factory=list)

    def note(self, moment: float | None) -> None:
        if moment is not None and moment > self.now:
            self.changes.append(moment)

    def stamp(self, offset: float) -> str:
        return rfc3339(self.started_at + timedelta(seconds=offset))


@dataclass(frozen=True)
class _Container:
    status: dict[str, Any]
    started_at: float | None
    """When it started running (None: not yet, or never)."""
    ended_at: float | None
    exit_code: int | None
    blocked: bool
    """Waiting with an error reason: it will never start on its own."""

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.ended_at is None

    @property
    def terminated(self) -> bool:
        return self.ended_at is not None


def _waiting_message(reason: str, image: str, given: str | None) -> str | None:
    if given is not None:
        return given
    if reason == ERR_IMAGE_PULL:
        return f'failed to pull and unpack image "{image}": not found (simulated by kubesim)'
    if reason == IMAGE_PULL_BACKOFF:
        return f'Back-off pulling image "{image}"'
    return "simulated by kubesim"


def _container(
    spec: Mapping[str, Any],
    behavior: ContainerBehavior,
    turn: float | None,
    line: _Timeline,
    *,
    before_turn: str,
) -> _Container:
    """One container's status; ``turn`` is when it may begin (None: not in sight)."""
    name, image = spec.get("name", ""), spec.get("image", "")
    base: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": False,
        "started": False,
        "restartCount": 0,
        "lastState": {},
    }

    def waiting(reason: str, message: str | None = None, blocked: bool = False) -> _Container:
        state: dict[str, Any] = {"reason": reason}
        if message:
            state["message"] = message
        return _Container({**base, "state": {"waiting": state}}, None, None, None, blocked)

    if turn is None or line.now < turn:
        line.note(turn)
        return waiting(before_turn)
    start = turn + behavior.start_seconds
    if line.now < start:
        line.note(start)
        return waiting("ContainerCreating")
    if behavior.waiting_reason is not None:
        reason = behavior.waiting_reason
        if reason == ERR_IMAGE_PULL:
            backoff_at = start + PULL_BACKOFF_SECONDS
            line.note(backoff_at)
            if line.now >= backoff_at:
                reason = IMAGE_PULL_BACKOFF
        return waiting(reason, _waiting_message(reason, image, behavior.message), blocked=True)
    pulled = {**base, "imageID": f"kubesim://{image}", "containerID": f"kubesim://{name}"}
    end = None if behavior.run_seconds is None else start + behavior.run_seconds
    if end is None or line.now < end:
        line.note(end)
        running = {"running": {"startedAt": line.stamp(start)}}
        return _Container(
            {**pulled, "ready": True, "started": True, "state": running}, start, None, None, False
        )
    terminated: dict[str, Any] = {
        "exitCode": behavior.exit_code,
        "reason": behavior.terminated_reason
        or ("Completed" if behavior.exit_code == 0 else "Error"),
        "startedAt": line.stamp(start),
        "finishedAt": line.stamp(end),
        "containerID": pulled["containerID"],
    }
    if behavior.message:
        terminated["message"] = behavior.message
    status = {**pulled, "state": {"terminated": terminated}}
    return _Container(status, start, end, behavior.exit_code, False)


def _run_init_containers(
    specs: Sequence[Mapping[str, Any]], behaviors: Mapping[str, ContainerBehavior], line: _Timeline
) -> tuple[list[_Container], float | None, bool]:
    """Init containers one after another: (statuses, when all completed, any failed)."""
    results: list[_Container] = []
    cursor: float | None = 0.0
    failed = False
    for spec in specs:
        result = _container(
            spec, behaviors[spec.get("name", "")], cursor, line, before_turn="PodInitializing"
        )
        results.append(result)
        if result.terminated and result.exit_code != 0:
            failed = True
        cursor = result.ended_at if result.terminated and not failed else None
    return results, cursor, failed


def _phase(init_failed: bool, initialized: bool, regular: Sequence[_Container]) -> str:
    """The kubelet's rule: any container not yet started keeps the pod Pending."""
    if init_failed:
        return "Failed"
    if not initialized or any(not c.running and not c.terminated for c in regular):
        return "Pending"
    if any(c.running for c in regular):
        return "Running"
    return "Succeeded" if all(c.exit_code == 0 for c in regular) else "Failed"


def _condition(
    type_: str, ok: bool, at: str, reason: str | None = None, message: str | None = None
) -> dict[str, Any]:
    condition: dict[str, Any] = {
        "type": type_,
        "status": "True" if ok else "False",
        "lastProbeTime": None,
        "lastTransitionTime": at,
    }
    if not ok and reason:
        condition["reason"] = reason
    if not ok and message:
        condition["message"] = message
    return condition


def _ready_conditions(
    regular: Sequence[_Container], names: Sequence[str], terminal: bool, line: _Timeline
) -> list[dict[str, Any]]:
    started = [c.started_at for c in regular]
    ends = [c.ended_at for c in regular if c.ended_at is not None]
    ready = bool(regular) and all(c.running for c in regular)
    since = 0.0
    if ready:
        since = max(s for s in started if s is not None)
    elif ends and all(s is not None for s in started):
        since = min(ends)  # every container had started: readiness ended with the first exit
    unready = [n for n, c in zip(names, regular, strict=True) if not c.running]
    reason = "PodCompleted" if terminal else "ContainersNotReady"
    message = None if terminal else f"containers with unready status: [{' '.join(unready)}]"
    at = line.stamp(since)
    return [
        _condition("ContainersReady", ready, at, reason, message),
        _condition("Ready", ready, at, reason, message),
    ]


def pod_status_at(
    pod: Mapping[str, Any],
    behaviors: Mapping[str, ContainerBehavior],
    *,
    started_at: datetime,
    elapsed: float,
) -> PodSnapshot:
    """The pod's status ``elapsed`` simulated seconds after the kubelet took it."""
    spec = pod.get("spec") or {}
    init_specs = spec.get("initContainers") or []
    specs = spec.get("containers") or []
    line = _Timeline(elapsed, started_at)
    inits, init_end, init_failed = _run_init_containers(init_specs, behaviors, line)
    regular = [
        _container(s, behaviors[s.get("name", "")], init_end, line, before_turn="PodInitializing")
        for s in specs
    ]
    phase = _phase(init_failed, init_end is not None, regular)
    terminal = phase in TERMINAL_PHASES
    pending_inits = [
        s.get("name", "")
        for s, c in zip(init_specs, inits, strict=True)
        if not (c.terminated and c.exit_code == 0)
    ]
    initialized = init_end is not None
    conditions = [
        _condition("PodReadyToStartContainers", True, line.stamp(0.0)),
        _condition(
            "Initialized",
            initialized,
            line.stamp(init_end if init_end is not None else 0.0),
            "ContainersNotInitialized",
            f"containers with incomplete status: [{' '.join(pending_inits)}]",
        ),
        *_ready_conditions(regular, [s.get("name", "") for s in specs], terminal, line),
        _condition("PodScheduled", True, line.stamp(0.0)),
    ]
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conditions,
        "hostIP": HOST_IP,
        "startTime": line.stamp(0.0),
        "containerStatuses": [c.status for c in regular],
    }
    if inits:
        status["initContainerStatuses"] = [c.status for c in inits]
    next_change = None if terminal or not line.changes else min(line.changes)
    return PodSnapshot(status, next_change)
