"""The Actuator's task handlers (SPEC §7.2): Create, Delete, Restart and Update of JobSets,
and an admin's priority change (SET_PRIORITY, handled as an Update of the class label).

Each handler is the thin shell around a pure decision of :mod:`actuator.guards`: read the
live JobSet, ask the decider, act on Kubernetes, record the result in Postgres, and return
a :class:`~actuator.outcome.TaskResult` for the consumer. Redelivery is the normal case,
not an edge case (at-least-once stream, reclaimed tasks, several consumers), so every path
is idempotent: a second run meets what the first one left and decides SKIPPED or DONE
without touching anything again.

Decisions recorded here rather than in the guards:

* A :class:`~xmc.kube.KubeError` is classified once, in :meth:`JobSetHandlers.handle`
  (:func:`~actuator.errors.classify`): transient → RETRY (Operation left open), permanent
  → PERMANENT (Operation closed with the classified code). The steps below only ask
  ``error.failure`` which of the shared failures they can handle themselves.
* Every result is settled by :class:`~actuator.settle.TaskSettler` (outbox row, execution
  write, Operation in one transaction): a Create or Restart that ends PERMANENT moves its
  execution to FAILED with a FATAL system message, since nothing else would ever move it
  out of INITIALIZING or RESTARTING. The storage EID fence keeps it off newer executions.
* The settle of a task that created a JobSet stores its manifest (decision 0039); one
  that meets its own execution's JobSet already there (a settle lost to a crash) stores
  the manifest rebuilt from the task, which is what was sent: the build is pure.
* A Delete that removes (or finds being deleted) the JobSet of an *older* execution than
  its target writes STOPPED for the target itself: the old JobSet's finalizer write is
  fenced off, and nothing else would end the target (a stop that overtook a restart).
* Deletes carry a UID precondition; CONFLICT on it (or NOT_FOUND) means the JobSet changed
  since the read, so the handler re-reads and decides again, a bounded number of times. Patches
  carry the read's ``resourceVersion`` for the same reason: the guards judged exactly the
  version that gets patched.
* The actuator's own state writes (STOPPED, FAILED) are stamped no earlier than the stored
  ``state_update_time`` plus 1 µs, so a clock behind the ESS's cannot get them rejected
  by the time-order guard and leave the execution hanging in STOPPING or RESTARTING.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any, Final

import structlog

from actuator.errors import classify
from actuator.guards import (
    DeleteAction,
    DeleteDecision,
    DuplicateAction,
    RestartAction,
    UpdateAction,
    decide_delete,
    decide_restart,
    decide_update,
    verify_duplicate_jobset,
)
from actuator.kube import JobSetClient
from actuator.manifest import build_base_jobset
from actuator.outcome import Outcome, TaskResult
from actuator.settle import TaskSettler
from actuator.validation import validate_jobset_manifest
from xmc import labels
from xmc.kube import KubeError, KubeFailure
from xmc.model.states import WorkUnitState
from xmc.store.transactions import StateWrite, Store
from xmc.tasks import task_execution_id
from xmc_api.internal.v1.tasks_pb2 import Task

log = structlog.get_logger()

Clock = Callable[[], datetime]

#: Reads (and decisions) per task while the JobSet keeps changing under a UID or
#: resourceVersion precondition; past it the task is retried later.
PRECONDITION_ATTEMPTS: Final = 3

#: Failures of a precondition that no longer holds: re-read and decide again.
_CHANGED_UNDER_US: Final = frozenset({KubeFailure.NOT_FOUND, KubeFailure.CONFLICT})
_FAILS_EXECUTION: Final = frozenset({Task.CREATE, Task.RESTART})


class JobSetHandlers:
    """:class:`~actuator.outcome.TaskHandler` for Create, Delete, Restart and Update tasks."""

    def __init__(
        self,
        kube: JobSetClient,
        store: Store,
        *,
        namespace: str,
        clock: Clock,
        restart_wait_seconds: float = 60.0,
        restart_poll_seconds: float = 0.25,
        writer: str = "actuator",
    ) -> None:
        self._kube = kube
        self._store = store
        self._namespace = namespace
        self._clock = clock
        #: How long a Restart waits for the old JobSet to disappear (the Reconciler removes
        #: its finalizer after writing the old execution's terminal state).
        self._restart_wait = restart_wait_seconds
        self._restart_poll = restart_poll_seconds
        self._settler = TaskSettler(store, clock=clock, writer=writer)
        self._finish = self._settler.finish
        self._actions: Mapping[int, Callable[[Task], Awaitable[TaskResult]]] = {
            Task.CREATE: self._create,
            Task.DELETE: self._delete,
            Task.RESTART: self._restart,
            Task.UPDATE: self._update,
            Task.SET_PRIORITY: self._update,
        }

    async def handle(self, task: Task) -> TaskResult:
        kind = Task.Kind.Name(task.kind) if task.kind in Task.Kind.values() else str(task.kind)
        # An admin's SET_PRIORITY names who asked.
        asked = {"requested_by": task.payload.requested_by} if task.payload.requested_by else {}
        with structlog.contextvars.bound_contextvars(
            task_id=task.task_id, xid=task.xid, wid=task.wid, eid=task_execution_id(task), **asked
        ):
            action = self._actions.get(task.kind)
            try:
                if action is None:
                    result = await self._finish(
                        task, _permanent(f"task kind {kind} is not handled", "INVALID_ARGUMENT")
                    )
                else:
                    result = await action(task)
            except KubeError as error:
                result = await self._kube_failed(task, error)
            log.info(
                "task handled",
                task_kind=kind,
                outcome=result.outcome.value,
                code=result.code,
                reason=result.reason,
            )
            return result

    # --- the four handlers -------------------------------------------------------------

    async def _create(self, task: Task) -> TaskResult:
        """Create the JobSet of ``task_execution_id(task)``; Restart's second half too."""
        manifest = build_base_jobset(task, namespace=self._namespace)
        if problems := validate_jobset_manifest(manifest):
            reason = "invalid JobSet: " + "; ".join(problems)
            return await self._finish(task, _permanent(reason, "INVALID_ARGUMENT"))
        try:
            created = await self._kube.create_jobset(self._namespace, manifest)
        except KubeError as error:
            if error.failure is not KubeFailure.ALREADY_EXISTS:
                raise
            return await self._verify_duplicate(task, manifest)
        uid = created.get("metadata", {}).get("uid")
        reason = (
            f"created JobSet {self._name(task)} (uid {uid}) for execution {task_execution_id(task)}"
        )
        return await self._finish(task, TaskResult(Outcome.DONE, reason), created=manifest)

    async def _delete(self, task: Task) -> TaskResult:
        """Stop: delete the JobSet of ``target_eid``, unless a newer one replaced it."""
        name = self._name(task)
        for _ in range(PRECONDITION_ATTEMPTS):
            decision = decide_delete(await self._kube.get_jobset(self._namespace, name), task)
            match decision.action:
                case DeleteAction.DELETE:
                    if await self._delete_exactly(name, decision.uid):
                        done = TaskResult(Outcome.DONE, decision.reason)
                        return await self._finish(
                            task, done, write=_stopped_unless_own(decision, task)
                        )
                case DeleteAction.NOTHING_TO_DELETE:
                    # No JobSet, so no finalizer will ever write the terminal state.
                    stopped = StateWrite(task.target_eid, WorkUnitState.STOPPED)
                    skipped = TaskResult(Outcome.SKIPPED, decision.reason)
                    return await self._finish(task, skipped, write=stopped)
                case DeleteAction.ALREADY_DELETING:
                    skipped = TaskResult(Outcome.SKIPPED, decision.reason)
                    return await self._finish(
                        task, skipped, write=_stopped_unless_own(decision, task)
                    )
                case DeleteAction.SUPERSEDED:
                    return await self._finish(task, TaskResult(Outcome.SKIPPED, decision.reason))
                case DeleteAction.STALE_REQUEST:
                    return await self._finish(
                        task, _permanent(decision.reason, "FAILED_PRECONDITION")
                    )
        return _changing(name)

    async def _restart(self, task: Task) -> TaskResult:
        """Replace execution ``target_eid = N`` by the payload's ``N+1``."""
        name = self._name(task)
        for _ in range(PRECONDITION_ATTEMPTS):
            decision = decide_restart(await self._kube.get_jobset(self._namespace, name), task)
            match decision.action:
                case RestartAction.CREATE:
                    return await self._create(task)
                case RestartAction.ALREADY_DONE:
                    # This task created it (and its settle was lost): the same manifest.
                    return await self._finish(
                        task,
                        TaskResult(Outcome.SKIPPED, decision.reason),
                        created=build_base_jobset(task, namespace=self._namespace),
                    )
                case RestartAction.SUPERSEDED:
                    return await self._finish(task, TaskResult(Outcome.SKIPPED, decision.reason))
                case RestartAction.STALE_REQUEST:
                    return await self._finish(
                        task, _permanent(decision.reason, "FAILED_PRECONDITION")
                    )
                case RestartAction.DELETE_THEN_CREATE:
                    if not await self._delete_exactly(name, decision.uid):
                        continue
                    if not await self._wait_until_gone(name, decision.uid):
                        return TaskResult(
                            Outcome.RETRY,
                            f"JobSet {name} of execution {task.target_eid} or its Kueue "
                            f"Workload is still there after {self._restart_wait:g}s: its "
                            "finalizer has not been removed yet, or the garbage collector "
                            "has not deleted the Workload",
                            "DEADLINE_EXCEEDED",
                        )
                    return await self._create(task)
        return _changing(name)

    async def _update(self, task: Task) -> TaskResult:
        """Patch the mutable labels; Update tasks carry no Operation."""
        name = self._name(task)
        for _ in range(PRECONDITION_ATTEMPTS):
            jobset = await self._kube.get_jobset(self._namespace, name)
            decision = decide_update(jobset, task)
            match decision.action:
                case UpdateAction.PATCH:
                    if await self._patch_exactly(name, decision.patch or {}, jobset or {}):
                        return await self._finish(task, TaskResult(Outcome.DONE, decision.reason))
                case UpdateAction.NOTHING | UpdateAction.SUPERSEDED:
                    return await self._finish(task, TaskResult(Outcome.SKIPPED, decision.reason))
                case UpdateAction.STALE_REQUEST:
                    return await self._finish(
                        task, _permanent(decision.reason, "FAILED_PRECONDITION")
                    )
        return _changing(name)

    # --- Kubernetes steps --------------------------------------------------------------

    async def _verify_duplicate(self, task: Task, manifest: Mapping[str, Any]) -> TaskResult:
        """``verifyDuplicateJobSet`` after AlreadyExists: ours (redelivery) or a conflict.
        Ours was created from this very task (a settle lost to a crash, or a redelivery
        after it), and the manifest is a pure function of the task: ``manifest`` is what
        was sent then (decision 0039)."""
        name = self._name(task)
        existing = await self._kube.get_jobset(self._namespace, name)
        if existing is None:
            return TaskResult(
                Outcome.RETRY, f"JobSet {name} was deleted right after AlreadyExists", "ABORTED"
            )
        decision = verify_duplicate_jobset(existing, task)
        if decision.action is DuplicateAction.SAME_EXECUTION:
            done = TaskResult(Outcome.DONE, decision.reason)
            return await self._finish(task, done, created=manifest)
        return await self._finish(task, _permanent(decision.reason, "ALREADY_EXISTS"))

    async def _delete_exactly(self, name: str, uid: str | None) -> bool:
        """Delete the JobSet with ``uid`` only; False when it changed since the read (gone,
        or replaced by a newer JobSet of the same name), so the caller decides again."""
        try:
            # An API server always sets a uid; "" would still fail the precondition safely.
            await self._kube.delete_jobset(self._namespace, name, uid=uid or "")
        except KubeError as error:
            if error.failure not in _CHANGED_UNDER_US:
                raise
            log.info("JobSet changed before the delete; reading it again", error=str(error))
            return False
        return True

    async def _patch_exactly(
        self, name: str, patch: Mapping[str, Any], judged: Mapping[str, Any]
    ) -> bool:
        """Patch only the version the guards judged; False when it changed since the read."""
        try:
            await self._kube.patch_jobset(
                self._namespace, name, _at_resource_version(patch, judged)
            )
        except KubeError as error:
            if error.failure not in _CHANGED_UNDER_US:
                raise
            log.info("JobSet changed before the patch; reading it again", error=str(error))
            return False
        return True

    async def _wait_until_gone(self, name: str, uid: str | None) -> bool:
        """Poll until the JobSet with ``uid`` no longer exists (or another one took its
        name), and no Kueue Workload made for it is left (``JobSetClient.workloads_of``),
        at most ``restart_wait_seconds``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._restart_wait
        while True:
            jobset = await self._kube.get_jobset(self._namespace, name)
            if jobset is not None and jobset.get("metadata", {}).get("uid") != uid:
                return True
            if jobset is None and (
                uid is None or not await self._kube.workloads_of(self._namespace, uid)
            ):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(self._restart_poll)

    async def _kube_failed(self, task: Task, error: KubeError) -> TaskResult:
        classified = classify(error)
        reason = f"Kubernetes API: {error}"
        if not classified.permanent:
            return TaskResult(Outcome.RETRY, reason, classified.code, classified.retry_after)
        return await self._finish(task, _permanent(reason, classified.code))

    def _name(self, task: Task) -> str:
        return labels.jobset_name(task.xid, task.wid)


def _permanent(reason: str, code: str) -> TaskResult:
    return TaskResult(Outcome.PERMANENT, reason, code)


def _changing(name: str) -> TaskResult:
    return TaskResult(
        Outcome.RETRY,
        f"JobSet {name} changed under the precondition {PRECONDITION_ATTEMPTS} times in a row",
        "ABORTED",
    )


def _at_resource_version(patch: Mapping[str, Any], jobset: Mapping[str, Any]) -> dict[str, Any]:
    """``patch`` that applies only to the version the guards judged (409 otherwise)."""
    metadata = {**patch.get("metadata", {})}
    resource_version = jobset.get("metadata", {}).get("resourceVersion")
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {**patch, "metadata": metadata}


def _stopped_unless_own(decision: DeleteDecision, task: Task) -> StateWrite | None:
    """The JobSet deleted (or deleting) belongs to an older execution than the target
    (a stop overtook the restart that would have replaced it): its finalizer writes for
    that older execution, which the EID fence drops, so the target is STOPPED here."""
    if decision.jobset_eid is None or decision.jobset_eid >= task.target_eid:
        return None
    return StateWrite(task.target_eid, WorkUnitState.STOPPED)
