"""A simulated JobSet controller (``jobset.x-k8s.io/v1alpha2``), together with the slice
of the batch/v1 Job controller it needs (a Job's pods and status).

One reconcile pass per JobSet, level-triggered: list its Jobs and Pods, then
1. per Job (``job.py``, pure), ``job_status`` recomputes the Job's status (``Failed``
   with upstream's ``PodFailurePolicy``, then ``BackoffLimitExceeded`` counting the
   failures the ``podFailurePolicy`` does not ignore, then ``DeadlineExceeded`` past
   ``activeDeadlineSeconds``) and ``plan_job_pods`` says which pods to create (while not
   suspended, and not before the failure backoff has passed) or delete (suspended or
   finished); see ``job_failure.py``;
2. ``plan_jobset`` (``jobset_plan.py``, pure) decides the JobSet's status and which Jobs
   to create, delete, suspend or resume: failure policy (``jobset_failure.py``: fail, or
   restart all Jobs, each recreated once its old Job and pods are gone), success policy
   (``All``/``Any`` of ``targetReplicatedJobs``), suspend/resume (Kueue's lever) and
   ``dependsOn`` (a replicated job's Jobs are created once its dependency is Ready or
   Complete).
The shell applies the plan; the writes it makes come back as events and trigger the next
pass, which converges because every write of an unchanged object is a no-op. Nothing
happens at a Job's deadline or when its backoff ends, so the shell also wakes itself then
(upstream's ``queue.AddAfter``).

Shapes follow upstream: child Job ``{jobset}-{rjob}-{index}`` with the
``jobset.sigs.k8s.io/*`` labels, pods ``{job}-{index}-{random5}`` of an Indexed Job, the
``Completed``/``Failed``/``Suspended`` conditions with upstream reasons and messages (the
``Failed`` message names the first failed Job), and
``status.replicatedJobsStatus`` counting Jobs (not pods). A JobSet being deleted (held by
a foreign finalizer such as XMC's) is not reconciled at all, as upstream's ``Reconcile``
returns early for it: its status stays as it was and its Jobs keep running (their Job
controller part still runs); once the last finalizer goes, garbage collection deletes the
Jobs and so, gracefully, their pods. Its finalizers are never touched.

Pods carry the kubelet's finalizer (when the kubelet simulator runs), so a deleted pod stays
Terminating for its grace period (see ``kubelet.py``). As in batch/v1, a Terminating pod is
not ``active`` (nor ``ready``) but counted in ``terminating``, so a suspended JobSet's Jobs
stop being active at once. Whether it still holds its completion index and its place within
``parallelism`` follows ``podReplacementPolicy``: it does under ``Failed`` (the default
when the Job has a ``podFailurePolicy``), not under ``TerminatingOrFailed``, where its
replacement is created at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import defaultdict
from collections.abc import Hashable, Iterable
from datetime import datetime
from typing import Any

from kubesim.clock import SimClock, rfc3339
from kubesim.controllers.mutate import set_status, set_suspend
from kubesim.errors import ApiError
from kubesim.events import Event
from kubesim.resources import JOB, JOBSET, POD, Resource
from kubesim.selectors import Requirement
from kubesim.store import ObjectStore

from .conditions import controlled_by, labels_of
from .job import active_deadline, build_pod, job_status, plan_job_pods
from .jobset_plan import JOBSET_NAME_LABEL, JOBSET_UID_LABEL, JobSetPlan, plan_jobset
from .kubelet import KUBELET_FINALIZER

log = logging.getLogger(__name__)

Obj = dict[str, Any]

_POD_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


class JobSetController:
    name = "jobset"
    watches: tuple[Resource, ...] = (JOBSET, JOB, POD)

    def __init__(
        self,
        store: ObjectStore,
        clock: SimClock,
        *,
        rng: random.Random | None = None,
        kubelet_finalizer: bool = True,
    ) -> None:
        """``kubelet_finalizer``: pods carry the kubelet simulator's finalizer (only when
        the kubelet runs, or deleted pods would stay Terminating forever)."""
        self._store = store
        self._clock = clock
        self._rng = rng or random.Random()
        self._pod_finalizers = (KUBELET_FINALIZER,) if kubelet_finalizer else ()
        #: One wake-up per JobSet whose Jobs have an ``activeDeadlineSeconds`` running or
        #: wait out a failure backoff: nothing else happens then, so no event would
        #: reconcile it (upstream's ``queue.AddAfter``).
        self._deadline_timers: dict[Hashable, tuple[datetime, asyncio.Task[None]]] = {}

    def keys_for(self, event: Event) -> Iterable[Hashable]:
        meta = event.object.get("metadata", {})
        if event.resource.key == JOBSET.key:
            return [(meta.get("namespace", ""), meta.get("name", ""))]
        jobset_name = (meta.get("labels") or {}).get(JOBSET_NAME_LABEL)
        return [(meta.get("namespace", ""), jobset_name)] if jobset_name else []

    def initial_keys(self) -> Iterable[Hashable]:
        return [
            (j["metadata"]["namespace"], j["metadata"]["name"]) for j in self._store.list(JOBSET)
        ]

    async def close(self) -> None:
        timers = [task for _, task in self._deadline_timers.values()]
        self._deadline_timers.clear()
        for task in timers:
            task.cancel()
        for task in timers:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _wake_at(self, key: Hashable, due: datetime | None) -> None:
        """Reconcile ``key`` again at ``due`` (None: no deadline pending)."""
        current = self._deadline_timers.get(key)
        if current is not None and (current[0] == due and not current[1].done()):
            return
        if current is not None:
            current[1].cancel()
            del self._deadline_timers[key]
        if due is not None:
            task = asyncio.create_task(self._wake(key, due))
            self._deadline_timers[key] = (due, task)

    async def _wake(self, key: Hashable, due: datetime) -> None:
        # A little past ``due``: the pass compares whole seconds, and must see it passed.
        await self._clock.sleep((due - self._clock.now()).total_seconds() + 0.01)
        if self._deadline_timers.get(key, (None, None))[1] is asyncio.current_task():
            del self._deadline_timers[key]
        try:
            self.reconcile(key)
        except Exception:
            log.exception("jobset: reconcile %s at a Job deadline or backoff failed", key)

    def reconcile(self, key: Hashable) -> None:
        assert isinstance(key, tuple)
        namespace, name = key
        jobset = self._store.find(JOBSET, namespace, name)
        if jobset is None:
            self._wake_at(key, None)
            return  # its Jobs and pods go by garbage collection
        uid = jobset["metadata"]["uid"]
        selector = (Requirement(JOBSET_NAME_LABEL, "=", frozenset({name})),)
        jobs = [
            j for j in self._store.list(JOB, namespace, labels=selector) if controlled_by(j, uid)
        ]
        pods_by_job: dict[str, list[Obj]] = defaultdict(list)
        for pod in self._store.list(POD, namespace, labels=selector):
            for ref in pod["metadata"].get("ownerReferences") or []:
                if ref.get("controller"):
                    pods_by_job[ref.get("uid", "")].append(pod)
        now = rfc3339(self._clock.now())
        synced = [self._sync_job(job, pods_by_job[job["metadata"]["uid"]], now) for job in jobs]
        jobs = [job for job, _ in synced]
        pods = [
            p
            for group in pods_by_job.values()
            for p in group
            if labels_of(p).get(JOBSET_UID_LABEL) == uid  # not an earlier namesake's
        ]
        # Upstream's Reconcile returns at once for a JobSet marked for deletion: no status
        # write and no Job changes until garbage collection takes its Jobs (the Job
        # controller, above, still runs them).
        if not jobset["metadata"].get("deletionTimestamp"):
            self._apply(namespace, name, plan_jobset(jobset, jobs, now, pods))
        deadlines = [d for d in map(active_deadline, jobs) if d is not None]
        retries = [retry for _, retry in synced if retry is not None]
        self._wake_at(key, min(deadlines + retries, default=None))

    def _sync_job(self, job: Obj, pods: list[Obj], now: str) -> tuple[Obj, datetime | None]:
        """The Job controller's part: status from pods, then create/delete pods; returns
        the Job and when its failure backoff ends (None: not waiting)."""
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        job = self._store.update(
            JOB, namespace, name, set_status(job_status(job, pods, now)), subresource="status"
        )
        plan = plan_job_pods(job, pods, now)
        for pod_name in plan.delete_pods:
            self._delete(POD, namespace, pod_name)
        for index in plan.create_indexes:
            suffix = "".join(self._rng.choices(_POD_SUFFIX_ALPHABET, k=5))
            pod = build_pod(job, index, suffix, finalizers=self._pod_finalizers)
            self._store.create(POD, pod)
        return job, plan.retry_at

    def _apply(self, namespace: str, name: str, plan: JobSetPlan) -> None:
        for job_name_ in plan.delete_jobs:
            self._delete(JOB, namespace, job_name_)
        for job in plan.create_jobs:
            self._store.create(JOB, job)
        for job_name_ in plan.suspend_jobs:
            self._store.update(JOB, namespace, job_name_, set_suspend(True))
        for job_name_ in plan.resume_jobs:
            self._store.update(JOB, namespace, job_name_, set_suspend(False))
        self._store.update(JOBSET, namespace, name, set_status(plan.status), subresource="status")

    def _delete(self, resource: Resource, namespace: str, name: str) -> None:
        try:
            self._store.delete(resource, namespace, name)
        except ApiError as error:
            if error.code != 404:
                raise
