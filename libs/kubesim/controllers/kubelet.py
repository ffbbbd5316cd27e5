"""A simulated kubelet: pods go Pending → Running (ready) → Succeeded/Failed on the
simulated clock, following each container's scripted behaviour (see ``behavior.py``).

The decision is one pure function in ``pod_status.py``, ``pod_status_at(pod, behaviors,
started_at, elapsed)``: the whole pod status at a moment ``elapsed`` simulated seconds
after the kubelet took the pod, plus the moment it next changes. Every timestamp in it
is derived from the timeline, never from when the write happened, so re-running a step
writes the same bytes and the store drops it as a no-op. The shell keeps one task per pod
that sleeps on the ``SimClock`` until the next change and writes the status; deleting the
pod cancels the task.

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
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubesim.clock import SimClock, rfc3339
from kubesim.container_logs import LogScript
from kubesim.controllers.mutate import set_status
from kubesim.errors import ApiError
from kubesim.events import Event
from kubesim.resources import POD, Resource
from kubesim.store import ObjectStore

from .behavior import ContainerBehavior, parse_behaviors
from .pod_status import TERMINAL_PHASES, pod_status_at

log = logging.getLogger(__name__)

KUBELET_FINALIZER = "kubesim.xmc/kubelet"
"""Holds a deleted pod (Terminating) until the simulated kubelet has stopped it."""
DEFAULT_GRACE_SECONDS = 30.0
MAX_GRACE_SECONDS = 120.0
"""Cap on the simulated seconds a Terminating pod is kept (a pod may ask for hours)."""
SIGTERM_EXIT_CODE = 143


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


def log_scripts(
    pod: Mapping[str, Any], *, start_seconds: float, run_seconds: float
) -> dict[str, LogScript]:
    """What each of the pod's containers prints (the API's ``pods/{name}/log`` reads it;
    a malformed behaviour prints nothing)."""
    behaviors = pod_behaviors(pod, start_seconds=start_seconds, run_seconds=run_seconds)
    return {name: behavior.log_script for name, behavior in behaviors.items()}


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
                        POD, namespace, name, set_status(stopped), subresource="status"
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
                    POD, namespace, name, set_status(snapshot.status), subresource="status"
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
