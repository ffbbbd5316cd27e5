"""A simulated kubelet: pods go Pending → Running (ready) → Succeeded/Failed on the
simulated clock, following each container's scripted behaviour (see ``behavior.py``).

The decision is one pure function, ``pod_status_at(pod, behaviors, started_at, elapsed)``:
the whole pod status at a moment ``elapsed`` simulated seconds after the kubelet took
the pod, plus the moment it next changes. Every timestamp in it is derived from the
timeline, never from when the write happened, so re-running a step writes the same
bytes and the store drops it as a no-op. The shell keeps one task per pod that sleeps
on the ``SimClock`` until the next change and writes the status; deleting the pod
cancels the task.

Graceful termination: a pod carrying ``KUBELET_FINALIZER`` (the JobSet controller puts it
on the pods it creates) stays, Terminating, once deleted: the kubelet marks its containers
terminated (``terminated_status``; phase and conditions are left as they were), waits
until ``deletionTimestamp + deletionGracePeriodSeconds`` (the pod's
``terminationGracePeriodSeconds``, default 30, capped at ``MAX_GRACE_SECONDS``; 0 means at
once) on the simulated clock, then removes its finalizer and the pod is gone. A pod that
had already finished goes at once. The deadline comes from the pod, so a restarted
kubelet resumes the wait rather than starting it over.

Simplifications: there is no scheduler (pods are bound on creation), probes always pass,
and a failed container is never restarted in place whatever ``restartPolicy`` says (the
Job's ``backoffLimit`` replaces the pod instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubesim.clock import SimClock
from kubesim.errors import ApiError
from kubesim.resources import POD, Resource
from kubesim.store import Event, ObjectStore, rfc3339

from .behavior import (
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACKOFF,
    ContainerBehavior,
    parse_behaviors,
)

log = logging.getLogger(__name__)

PULL_BACKOFF_SECONDS = 10.0
"""Simulated seconds an image pull error shows ``ErrImagePull`` before ``ImagePullBackOff``."""
HOST_IP = "10.0.0.1"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
KUBELET_FINALIZER = "kubesim.xmc/kubelet"
"""Holds a deleted pod (Terminating) until the simulated kubelet has stopped it."""
DEFAULT_GRACE_SECONDS = 30.0
MAX_GRACE_SECONDS = 120.0
"""Cap on the simulated seconds a Terminating pod is kept (a pod may ask for hours)."""
SIGTERM_EXIT_CODE = 143


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


def grace_seconds(pod: Mapping[str, Any]) -> float:
    """Simulated seconds a deleted pod stays Terminating: ``deletionGracePeriodSeconds``
    (else ``spec.terminationGracePeriodSeconds``, else 30), capped."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    value = meta.get("deletionGracePeriodSeconds")
    if value is None:
        value = spec.get("terminationGracePeriodSeconds")
    if isinstance(value, bool) or not isinstance(value, int | float):
        value = DEFAULT_GRACE_SECONDS
    return min(max(float(value), 0.0), MAX_GRACE_SECONDS)


def _terminated_container(status: Mapping[str, Any], at: str) -> dict[str, Any]:
    state = status.get("state") or {}
    if "terminated" in state:
        return dict(status)
    if "running" in state:
        terminated: dict[str, Any] = {
            "exitCode": SIGTERM_EXIT_CODE,
            "reason": "Error",
            "startedAt": state["running"].get("startedAt"),
            "finishedAt": at,
        }
    else:
        terminated = {
            "exitCode": 137,
            "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
            "startedAt": None,
            "finishedAt": None,
        }
    if "containerID" in status:
        terminated["containerID"] = status["containerID"]
    return {**status, "ready": False, "started": False, "state": {"terminated": terminated}}


def terminated_status(status: Mapping[str, Any], at: str) -> dict[str, Any]:
    """A Terminating pod's status: every container that had not finished is terminated
    at ``at`` (running ones as if by SIGTERM); phase and conditions stay as they were."""
    result = dict(status)
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in result:
            result[key] = [_terminated_container(c, at) for c in result[key]]
    return result


def pod_behaviors(
    pod: Mapping[str, Any], *, start_seconds: float, run_seconds: float
) -> dict[str, ContainerBehavior]:
    spec = pod.get("spec") or {}
    return parse_behaviors(
        (pod.get("metadata") or {}).get("annotations"),
        [c.get("name", "") for c in spec.get("containers") or []],
        [c.get("name", "") for c in spec.get("initContainers") or []],
        start_seconds=start_seconds,
        run_seconds=run_seconds,
    )


@dataclass
class _PodRun:
    uid: str
    started_at: datetime
    task: asyncio.Task[None]


class Kubelet:
    """Runs every pod in the store on the simulated clock (one node, no scheduling), and
    stops the deleted ones that carry its finalizer."""

    name = "kubelet"
    watches: tuple[Resource, ...] = (POD,)

    def __init__(
        self,
        store: ObjectStore,
        clock: SimClock,
        *,
        pod_start_seconds: float,
        pod_run_seconds: float,
    ) -> None:
        self._store = store
        self._clock = clock
        self._start_seconds = pod_start_seconds
        self._run_seconds = pod_run_seconds
        self._runs: dict[tuple[str, str], _PodRun] = {}
        self._terminations: dict[tuple[str, str], _PodRun] = {}

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        meta = event.object.get("metadata", {})
        return [(meta.get("namespace", ""), meta.get("name", ""))]

    def initial_keys(self) -> Iterable[Hashable]:
        return [(p["metadata"]["namespace"], p["metadata"]["name"]) for p in self._store.list(POD)]

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        pod = self._store.find(POD, namespace, name)
        run = self._runs.get(key)
        gone = pod is None or bool(pod["metadata"].get("deletionTimestamp"))
        if run is not None and (gone or pod is None or pod["metadata"]["uid"] != run.uid):
            run.task.cancel()
            del self._runs[key]
            run = None
        stopping = self._terminations.get(key)
        if stopping is not None and (pod is None or pod["metadata"]["uid"] != stopping.uid):
            stopping.task.cancel()
            del self._terminations[key]
        if pod is not None and gone:
            self._terminate(key, pod)
        if pod is None or gone or run is not None:
            return
        status = pod.get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            return
        started_at = self._clock.now()
        if status.get("startTime"):  # a restarted kubelet resumes the pod's timeline
            started_at = datetime.fromisoformat(status["startTime"])
        uid = pod["metadata"]["uid"]
        task = asyncio.create_task(self._live(namespace, name, uid, started_at))
        self._runs[key] = _PodRun(uid, started_at, task)

    def _terminate(self, key: tuple[str, str], pod: Mapping[str, Any]) -> None:
        """Start stopping a deleted pod held by this kubelet's finalizer (once per pod)."""
        meta = pod["metadata"]
        if KUBELET_FINALIZER not in (meta.get("finalizers") or []):
            return
        current = self._terminations.get(key)
        if current is not None and current.uid == meta["uid"] and not current.task.done():
            return
        namespace, name = key
        deleted_at = datetime.fromisoformat(meta["deletionTimestamp"])
        task = asyncio.create_task(self._stop(namespace, name, meta["uid"], deleted_at))
        self._terminations[key] = _PodRun(meta["uid"], deleted_at, task)

    async def _stop(self, namespace: str, name: str, uid: str, deleted_at: datetime) -> None:
        try:
            pod = self._store.find(POD, namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return
            status = pod.get("status") or {}
            wait = 0.0
            if status.get("phase") not in TERMINAL_PHASES:
                stopped = terminated_status(status, rfc3339(deleted_at))
                if stopped:
                    self._store.update(
                        POD, namespace, name, _set_status(stopped), subresource="status"
                    )
                deadline = deleted_at + timedelta(seconds=grace_seconds(pod))
                wait = (deadline - self._clock.now()).total_seconds()
            if wait > 0:
                await self._clock.sleep(wait)
            pod = self._store.find(POD, namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return
            self._store.update(POD, namespace, name, _drop_finalizer)
        except ApiError as error:
            if error.code != 404:
                log.exception("kubelet: stopping pod %s/%s", namespace, name)
        except Exception:
            log.exception("kubelet: stopping pod %s/%s", namespace, name)

    async def _live(self, namespace: str, name: str, uid: str, started_at: datetime) -> None:
        try:
            await self._follow(namespace, name, uid, started_at)
        except Exception:
            log.exception("kubelet: pod %s/%s", namespace, name)

    async def _follow(self, namespace: str, name: str, uid: str, started_at: datetime) -> None:
        behaviors: dict[str, ContainerBehavior] | None = None
        while True:
            pod = self._store.find(POD, namespace, name)
            if pod is None or pod["metadata"]["uid"] != uid:
                return
            if pod["metadata"].get("deletionTimestamp"):
                return  # Terminating: ``_stop`` owns the pod now
            if behaviors is None:
                behaviors = pod_behaviors(
                    pod, start_seconds=self._start_seconds, run_seconds=self._run_seconds
                )
            elapsed = (self._clock.now() - started_at).total_seconds()
            snapshot = pod_status_at(pod, behaviors, started_at=started_at, elapsed=elapsed)
            try:
                self._store.update(
                    POD, namespace, name, _set_status(snapshot.status), subresource="status"
                )
            except ApiError as error:
                if error.code == 404:
                    return
                raise
            if snapshot.next_change is None:
                return
            await self._clock.sleep(snapshot.next_change - elapsed)

    async def close(self) -> None:
        runs = [*self._runs.values(), *self._terminations.values()]
        self._runs.clear()
        self._terminations.clear()
        for run in runs:
            run.task.cancel()
        for run in runs:
            with contextlib.suppress(asyncio.CancelledError):
                await run.task


def _drop_finalizer(obj: dict[str, Any]) -> None:
    meta = obj["metadata"]
    meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != KUBELET_FINALIZER]
    if not meta["finalizers"]:
        del meta["finalizers"]


def _set_status(status: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        obj["status"] = status

    return mutate
