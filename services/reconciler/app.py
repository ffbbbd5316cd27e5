"""The Reconciler process (SPEC §8): watches → work queue → pure observers → UpdateBatcher
→ ESS.

Watches keep warm caches on every replica; only the leader (a Lease) writes. Work is
level-triggered: a watch event only updates the cache and owes its JobSet a run in the
work queue (``reconciler.workqueue``: keyed by JobSet name, a few workers); the run
recomputes from the latest cached objects, so a missed, repeated or coalesced event
changes nothing, one JobSet's slow Kubernetes reads hold up only the worker running it,
and a new leader re-observes everything it has cached.

Besides the batched observations, two paths write directly:
- the finalizer bypass (§8.4, ``reconciler.finalizer``): a JobSet being deleted gets its
  terminal state written synchronously, and only then loses
  ``jobset.xmanager.cloud/finalizer``;
- orphan collection (§8.6): a JobSet of an old execution, or of a finished or deleted
  work unit, is deleted with a UID precondition;
- the vanished-JobSet sweep (``reconciler.vanished``): an execution whose JobSet left the
  cluster without passing the finalizer is ended FAILED, saying so.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from reconciler.batcher import BatcherOptions, UpdateBatcher
from reconciler.ess_client import EssClient
from reconciler.evidence import read_failure_evidence
from reconciler.failure import DescribedFailure, decide_failure_reason, describe_failure
from reconciler.finalizer import Finalizer
from reconciler.leader import LeaderElector, LeaseSettings
from reconciler.log_capture import LogCapture
from reconciler.observation import Observation
from reconciler.observe import (
    JOBSET_NAME_LABEL,
    belongs_to,
    jobset_pods,
    observe_jobset,
    observe_pods,
    observe_workload,
    work_unit_ids,
    workload_owner,
)
from reconciler.orphans import collect_orphans
from reconciler.queue_positions import PositionReader
from reconciler.readiness import ElectionState, WatchState, decide_readiness
from reconciler.send import send
from reconciler.slim import slim_jobset, slim_pod, slim_workload
from reconciler.vanished import VanishedSettings, VanishedSweep
from reconciler.watch import ChangeKind, ResourceWatcher, WatchSettings
from reconciler.workqueue import WorkQueue
from xmc.health import Check
from xmc.kube import JOBSETS, PODS, WORKLOADS
from xmc.kube_client import KubeClient
from xmc.labels import EXPERIMENT_ID, FINALIZER, MANAGED_BY_SELECTOR
from xmc.model.jobset import reads_pods, to_work_unit_state
from xmc.model.states import WorkUnitState
from xmc.settings import LogSettings
from xmc.supervise import every, finish, supervise

log = structlog.get_logger()
Obj = dict[str, Any]

#: Seconds a queue-position lookup may hold up the Workload handler.
_VISIBILITY_TIMEOUT = 5.0
#: Seconds one LocalQueue's pending-workloads summary serves every waiting Workload's event.
_QUEUE_SUMMARY_AGE = 1.0


def _jobset_name_of(pod: Obj) -> str | None:
    """The pod cache's grouping: every execution's pods share their JobSet's name."""
    name = ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
    return name if isinstance(name, str) and name else None


class Owed(enum.Flag):
    """What a JobSet's next run re-observes: what changed since its last one."""

    JOBSET = enum.auto()
    WORKLOAD = enum.auto()
    PODS = enum.auto()
    #: A new leader's re-observation, and a retry (what the failed run owed is gone).
    ALL = JOBSET | WORKLOAD | PODS


@dataclass(frozen=True)
class ReconcilerOptions:
    namespace: str = "default"
    batcher: BatcherOptions = field(default_factory=BatcherOptions)
    watch: WatchSettings = field(default_factory=WatchSettings)
    #: None = no leader election (a single replica).
    lease: LeaseSettings | None = field(default_factory=LeaseSettings)
    startup_grace: timedelta = timedelta(minutes=2)
    max_stopped_write_retry_age: timedelta = timedelta(minutes=10)
    #: Real seconds between re-checks of the startup rule (it fires on time, not events).
    diagnostics_interval: float = 10.0
    #: Real seconds between orphan scans.
    orphan_interval: float = 30.0
    #: Real seconds between re-reads of the waiting Workloads' queue positions.
    queue_position_interval: float = 5.0
    #: The vanished-JobSet sweep; None = off.
    vanished: VanishedSettings | None = field(default_factory=VanishedSettings)
    #: Workers of the JobSet work queue: how many JobSets' slow reads are waited on at
    #: once before the others wait too.
    workers: int = 4
    #: Seconds a graceful stop lets the workers finish the queued JobSets.
    drain_seconds: float = 5.0
    #: What the container log capture keeps and how long the finalizer waits for it.
    logs: LogSettings = field(default_factory=LogSettings)


class Reconciler:
    def __init__(
        self,
        kube: KubeClient,
        ess: EssClient,
        *,
        identity: str,
        clock: Callable[[], datetime],
        options: ReconcilerOptions | None = None,
    ) -> None:
        self._kube = kube
        self._ess = ess
        self._clock = clock
        self.options = options or ReconcilerOptions()
        ns = self.options.namespace
        self.jobsets = ResourceWatcher(
            kube, JOBSETS, namespace=ns, label_selector=MANAGED_BY_SELECTOR,
            on_change=self._on_jobset, transform=slim_jobset, settings=self.options.watch,
        )  # fmt: skip
        self.workloads = ResourceWatcher(
            kube, WORKLOADS, namespace=ns, on_change=self._on_workload, group_by=workload_owner,
            transform=slim_workload, settings=self.options.watch,
        )  # fmt: skip
        self.pods = ResourceWatcher(
            kube, PODS, namespace=ns, label_selector=EXPERIMENT_ID, on_change=self._on_pod,
            group_by=_jobset_name_of, transform=slim_pod, settings=self.options.watch,
        )  # fmt: skip
        #: JobSet name → what its queued run owes (see :meth:`_enqueue`).
        self._owed: dict[str, Owed] = {}
        self.queue = WorkQueue("jobsets", self._reconcile, workers=self.options.workers)
        self.batcher = UpdateBatcher(
            self._send, options=self.options.batcher, may_send=lambda: self.leading
        )
        self.elector: LeaderElector | None = None
        if self.options.lease is not None:
            self.elector = LeaderElector(
                kube,
                identity=identity,
                settings=self.options.lease,
                on_started_leading=self._started_leading,
                on_stopped_leading=self._stopped_leading,
            )
        self.positions = PositionReader(self._pending_workloads, max_age=_QUEUE_SUMMARY_AGE)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = asyncio.Event()
        #: Set by :meth:`abort` only: a graceful stop still lets the final flush retry.
        self._aborted = asyncio.Event()
        self.finalizer = Finalizer(
            kube,
            ess,
            namespace=ns,
            clock=clock,
            max_retry_age=self.options.max_stopped_write_retry_age,
            stopping=self._stopping,
            describe_failure=self._describe_failure,
            capture_logs=self._capture_logs,
        )
        self.logs = LogCapture(
            kube, lambda: self._ess, namespace=ns, settings=self.options.logs,
            stopping=self._stopping,
        )  # fmt: skip
        self.vanished = VanishedSweep(
            kube, ess, ns, jobset_of=self.jobsets.get, synced=self._synced, wall_clock=clock,
            settings=self.options.vanished or VanishedSettings(),
        )  # fmt: skip

    # --- lifecycle ---------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    async def start(self) -> None:
        for watcher in (self.jobsets, self.workloads, self.pods):
            self._tasks.append(asyncio.create_task(watcher.run(), name=f"watch {watcher.what}"))
        self._tasks.append(asyncio.create_task(self.queue.run(), name="work queue"))
        self._tasks.append(asyncio.create_task(self.batcher.run(), name="batcher"))
        self._tasks.append(asyncio.create_task(self.logs.run(), name="log capture"))
        self._periodic("startup diagnostics", self.options.diagnostics_interval, self._diagnose_all)
        self._periodic(
            "orphan collection", self.options.orphan_interval, self._collect_orphans_if_leading
        )
        self._periodic(
            "queue positions", self.options.queue_position_interval, self._refresh_positions
        )
        if self.options.vanished is not None:
            self._periodic(
                "vanished-JobSet sweep", self.options.vanished.interval, self._sweep_vanished
            )
        if self.elector is not None:
            self._tasks.append(asyncio.create_task(self.elector.run(), name="leader election"))

    def _periodic(self, name: str, interval: float, step: Callable[[], Awaitable[None]]) -> None:
        """A supervised loop (``xmc.supervise.every``): one bad iteration is logged, not fatal."""
        loop = every(name, interval, step, stopping=self._stopping)
        self._tasks.append(asyncio.create_task(loop, name=name))

    async def run(self) -> None:
        """Until :meth:`stop`; raises ``TaskEnded`` naming the first watch, loop or the
        election that ends on its own (a Reconciler that cannot see the cluster must exit)."""
        await supervise(self._tasks, stopping=self._stopping)

    async def readiness(self) -> list[Check]:
        """``/readyz``: every watch synced and connected, the Lease reachable."""
        watches = [
            WatchState(
                w.what,
                w.ready.is_set(),
                w.failures,
                None if w.relist_reason is None else w.relist_reason.value,
            )
            for w in (self.jobsets, self.workloads, self.pods)
        ]
        election = (
            None
            if self.elector is None
            else ElectionState(self.elector.is_leader, self.elector.failures)
        )
        return decide_readiness(watches, election)

    async def stop(self) -> None:
        """Graceful: stop watching, finish the queued JobSets (bounded), flush what is
        pending, release the Lease."""
        self._stopping.set()
        for watcher in (self.jobsets, self.workloads, self.pods):
            watcher.stop()
        await self.queue.stop(within=self.options.drain_seconds)
        await self.batcher.stop()
        if self.elector is not None:
            self.elector.stop()
        self.finalizer.cancel_all()
        await finish(self._tasks, within=10)
        log.info("reconciler stopped")

    async def abort(self) -> None:
        """Die like a killed process: no flush, no Lease release (tests of takeover)."""
        self._stopping.set()
        self._aborted.set()
        self.finalizer.cancel_all()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _started_leading(self) -> None:
        """A new leader re-observes everything it has cached: no observation is lost in
        a takeover. Queued, not run here: the election's loop must go on renewing."""
        log.info("leading; re-observing the cache")
        for name in list(self.jobsets.cache):
            self._enqueue(name, Owed.ALL)
        for pod in list(self.pods.cache.values()):
            self.logs.note_pod(pod, deleted=False)

    async def _stopped_leading(self) -> None:
        """What a deposed leader held is stale to the next one: drop it unsent."""
        self.batcher.drop_pending("stopped leading")
        self.logs.forget()

    # --- the observation paths ---------------------------------------------------------

    async def _send(self, observations: Sequence[Observation]) -> None:
        """The batcher's send (``reconciler.send``), through ``self._ess`` as it is at the
        call (tests swap it)."""
        await send(self._ess, observations, aborted=self._aborted, leading=lambda: self.leading)

    def _observe(self, observation: Observation | None) -> None:
        if observation is not None:
            self.batcher.add(observation)  # the batcher counts it

    # The watches' handlers only owe a JobSet a run: they are called under their watcher's
    # delivery lock, after its cache took the change, so they must not wait on anything.

    async def _on_jobset(self, kind: ChangeKind, jobset: Obj) -> None:
        if kind == "DELETED":
            # A deletion only needs its uid for the vanished sweep's message, taken from
            # the final object now: the cache has no such object for a later run.
            self.vanished.note_deleted(jobset)
            return
        self._enqueue(jobset["metadata"]["name"], Owed.JOBSET)

    async def _on_workload(self, kind: ChangeKind, workload: Obj) -> None:
        owner = workload_owner(workload)
        if kind != "DELETED" and owner:
            self._enqueue(owner, Owed.WORKLOAD)

    async def _on_pod(self, kind: ChangeKind, pod: Obj) -> None:
        if self.leading or kind == "DELETED":
            self.logs.note_pod(pod, deleted=kind == "DELETED")
        name = _jobset_name_of(pod)
        if name:
            self._enqueue(name, Owed.PODS)

    def _enqueue(self, name: str, owed: Owed) -> None:
        self._owed[name] = self._owed.get(name, Owed(0)) | owed
        self.queue.add(name)

    async def _reconcile(self, name: str) -> None:
        """One run of JobSet ``name``, a worker's: what its events since the last run owe,
        from the cache as it is now. A JobSet gone meanwhile owes nothing (its deletion
        was noted); a pod change re-observes the JobSet only when its state reads the pods
        (``reads_pods``)."""
        owed = self._owed.pop(name, Owed.ALL)
        jobset = self.jobsets.get(name)
        if jobset is None or not self.leading:
            return
        if Owed.JOBSET in owed or (Owed.PODS in owed and reads_pods(jobset)):
            # No JobSet event marks an evicted JobSet's last pod going (R4, decision
            # 0019) nor a finishing Job's pods seen before its counts (0030).
            await self._reconcile_jobset(jobset)
        elif Owed.PODS in owed:
            self._diagnose(jobset)
        ids = work_unit_ids(jobset)
        if Owed.WORKLOAD in owed and ids is not None:
            for workload in self.workloads.group(name):
                position = await self.positions.of(workload)
                self.positions.reported(workload, position)
                self._observe(observe_workload(workload, jobset_ids=ids, queue_position=position,
                                               observed_at=self._clock()))  # fmt: skip

    async def _reconcile_jobset(self, jobset: Obj) -> None:
        meta = jobset["metadata"]
        if meta.get("deletionTimestamp") and FINALIZER in (meta.get("finalizers") or []):
            self.finalizer.soon(meta["name"])
        described = await self._describe_failure(jobset)
        pods = jobset_pods(jobset, self._cached_pods(meta["name"]))
        self._observe(
            observe_jobset(
                jobset,
                observed_at=self._clock(),
                failure=described.message if described else None,
                pods=pods,
                facts=described.facts if described else None,
            )
        )
        self._diagnose(jobset)

    def _cached_pods(self, jobset_name: str) -> list[Obj]:
        return self.pods.group(jobset_name)

    def _diagnose(self, jobset: Obj) -> None:
        """Startup diagnostics (§8.3) from the cached pods of this JobSet."""
        pods = self._cached_pods(jobset["metadata"]["name"])
        if pods:
            self._observe(
                observe_pods(jobset, pods, now=self._clock(), grace=self.options.startup_grace)
            )

    async def _describe_failure(self, jobset: Obj) -> DescribedFailure | None:
        """Why a FAILED JobSet failed (``reconciler.failure``), for its terminal
        observation and the finalizer's write; None for any other JobSet. Never raises:
        a reason that cannot be decided must not cost the FAILED state itself."""
        if to_work_unit_state(jobset) is not WorkUnitState.FAILED:
            return None
        try:
            jobs, pods = await read_failure_evidence(
                self._kube, self.options.namespace, jobset, cached_pods=self._cached_pods
            )
            return describe_failure(jobset, decide_failure_reason(jobset, jobs, pods))
        except Exception:
            log.exception("failure reason not decided", jobset=jobset["metadata"]["name"])
            return None

    async def _capture_logs(self, jobset: Obj) -> None:
        """The finalizer path's capture of a deleted JobSet's pods (never raises)."""
        pods = self._cached_pods(jobset["metadata"]["name"])
        await self.logs.capture_before_deletion([p for p in pods if belongs_to(p, jobset)])

    async def _pending_workloads(self, queue: str) -> Obj:
        return await self._kube.pending_workloads(
            self.options.namespace, queue, request_timeout=_VISIBILITY_TIMEOUT
        )

    # --- periodic work -----------------------------------------------------------------

    async def _diagnose_all(self) -> None:
        """Re-check the startup rule of every JobSet: it fires on time, not on events."""
        if self.leading:
            for jobset in list(self.jobsets.cache.values()):
                self._diagnose(jobset)

    async def _refresh_positions(self) -> None:
        """Re-observe the waiting Workloads whose queue position moved: no Workload event
        says so (``reconciler.queue_positions``)."""
        if self.leading:
            for workload in await self.positions.stale(list(self.workloads.cache.values())):
                owner = workload_owner(workload)
                if owner:
                    self._enqueue(owner, Owed.WORKLOAD)

    def _synced(self) -> bool:
        return all(w.synced for w in (self.jobsets, self.workloads, self.pods))

    async def _sweep_vanished(self) -> None:
        await self.vanished.step(leading=self.leading)

    async def _collect_orphans_if_leading(self) -> None:
        if self.leading:
            await self.collect_orphans()

    async def collect_orphans(self) -> int:
        """Delete JobSets no execution wants any more (``reconciler.orphans``); how many."""
        jobsets = list(self.jobsets.cache.values())
        return await collect_orphans(self._kube, self._ess, self.options.namespace, jobsets)
