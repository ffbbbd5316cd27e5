"""The Reconciler process (SPEC §8): watches → pure observers → UpdateBatcher → ESS.

Watches keep warm caches on every replica; only the leader (a Lease) writes. Work is
level-triggered: each handler recomputes from the latest cached objects, so a missed or
repeated event changes nothing, and a new leader re-observes everything it has cached.

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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog

from reconciler import metrics
from reconciler.batcher import BatcherOptions, UpdateBatcher
from reconciler.ess_client import (
    EssClient,
    EssRejected,
    EssUnavailable,
    is_verdict,
    retry_rejected,
)
from reconciler.evidence import read_failure_evidence
from reconciler.failure import decide_failure_reason, failure_message
from reconciler.finalizer import Finalizer
from reconciler.leader import LeaderElector, LeaseSettings
from reconciler.observation import Observation
from reconciler.observe import (
    JOBSET_NAME_LABEL,
    QueuePosition,
    decide_orphan,
    jobset_pods,
    observe_jobset,
    observe_pods,
    observe_workload,
    reobserve_on_pod_change,
    work_unit_ids,
    workload_owner,
)
from reconciler.queue_positions import QueuePositions
from reconciler.readiness import ElectionState, WatchState, decide_readiness
from reconciler.slim import slim_jobset, slim_pod, slim_workload
from reconciler.vanished import VanishedSettings, VanishedSweep
from reconciler.watch import ChangeKind, ResourceWatcher, WatchSettings
from xmc.health import Check
from xmc.kube import JOBSETS, PODS, WORKLOADS, KubeError, KubeFailure
from xmc.kube_client import KubeClient
from xmc.labels import EXPERIMENT_ID, FINALIZER, MANAGED_BY_SELECTOR
from xmc.model.jobset import to_work_unit_state
from xmc.model.states import WorkUnitState
from xmc.retry import sleep_or_stop
from xmc.supervise import every, finish, supervise
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

log = structlog.get_logger()
Obj = dict[str, Any]

#: An orphan delete that met no JobSet, or a newer one of the same name: nothing to do.
_NOT_THE_ORPHAN = frozenset({KubeFailure.NOT_FOUND, KubeFailure.CONFLICT})
#: Seconds a queue-position lookup may hold up the Workload handler.
_VISIBILITY_TIMEOUT = 5.0
#: Seconds one LocalQueue's pending-workloads summary serves every waiting Workload's event.
_QUEUE_SUMMARY_AGE = 1.0


def _jobset_name_of(pod: Obj) -> str | None:
    """The pod cache's grouping: every execution's pods share their JobSet's name."""
    name = ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
    return name if isinstance(name, str) and name else None


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
    #: The vanished-JobSet sweep; None = off.
    vanished: VanishedSettings | None = field(default_factory=VanishedSettings)


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
            kube, WORKLOADS, namespace=ns, on_change=self._on_workload,
            transform=slim_workload, settings=self.options.watch,
        )  # fmt: skip
        self.pods = ResourceWatcher(
            kube, PODS, namespace=ns, label_selector=EXPERIMENT_ID, on_change=self._on_pod,
            group_by=_jobset_name_of, transform=slim_pod, settings=self.options.watch,
        )  # fmt: skip
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
        self._positions = QueuePositions(self._pending_workloads, max_age=_QUEUE_SUMMARY_AGE)
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
            describe_failure=self._failure_message,
        )
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
        self._tasks.append(asyncio.create_task(self.batcher.run(), name="batcher"))
        self._tasks.append(
            asyncio.create_task(
                every("startup diagnostics", self.options.diagnostics_interval,
                      self._diagnose_all, stopping=self._stopping),
                name="startup diagnostics",
            )
        )  # fmt: skip
        self._tasks.append(
            asyncio.create_task(
                every("orphan collection", self.options.orphan_interval,
                      self._collect_orphans_if_leading, stopping=self._stopping),
                name="orphan collection",
            )
        )  # fmt: skip
        if self.options.vanished is not None:
            self._tasks.append(
                asyncio.create_task(
                    every("vanished-JobSet sweep", self.options.vanished.interval,
                          self._sweep_vanished, stopping=self._stopping),
                    name="vanished-JobSet sweep",
                )
            )  # fmt: skip
        if self.elector is not None:
            self._tasks.append(asyncio.create_task(self.elector.run(), name="leader election"))

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
        """Graceful: stop watching, flush what is pending, release the Lease."""
        self._stopping.set()
        for watcher in (self.jobsets, self.workloads, self.pods):
            watcher.stop()
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
        a takeover."""
        log.info("leading; re-observing the cache")
        for jobset in list(self.jobsets.cache.values()):
            await self._on_jobset("RESYNC", jobset)
        for workload in list(self.workloads.cache.values()):
            await self._on_workload("RESYNC", workload)

    async def _stopped_leading(self) -> None:
        """What a deposed leader held is stale to the next one: drop it unsent."""
        self.batcher.drop_pending("stopped leading")

    # --- the observation paths ---------------------------------------------------------

    async def _send(self, observations: Sequence[Observation]) -> None:
        """One batch to the ESS. EssUnavailable propagates (the batcher puts the items back
        for the next flush); INTERNAL is retried here a few times. A batch the ESS refuses
        for what it is (INVALID_ARGUMENT, say) is split in halves until the refused items
        are alone, so one bad observation costs only itself; those are dropped, loudly."""
        error = await self._send_retrying(observations)
        if error is None:
            return
        if len(observations) > 1 and is_verdict(error):
            half = len(observations) // 2
            await self._send(observations[:half])
            await self._send(observations[half:])
            return
        first = observations[0]
        log.error("observations rejected; dropped", error=str(error), items=len(observations),
                  xid=first.xid, wid=first.wid, eid=first.eid)  # fmt: skip
        metrics.OBSERVATIONS_DROPPED_TOTAL.labels(error.code.name).inc(len(observations))

    async def _send_retrying(self, observations: Sequence[Observation]) -> EssRejected | None:
        """Send, retrying INTERNAL/UNKNOWN with backoff; the final refusal, if any."""
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._ess.update(observations, writer="reconciler")
                return None
            except EssRejected as error:
                delay = retry_rejected(error, attempt)
                if delay is None:
                    return error
                log.warning("observations refused; retrying", error=str(error),
                            attempt=attempt, delay=delay)  # fmt: skip
                if await sleep_or_stop(self._aborted, delay) or not self.leading:
                    return error

    def _observe(self, observation: Observation | None) -> None:
        if observation is not None:
            self.batcher.add(observation)  # the batcher counts it

    async def _on_jobset(self, kind: ChangeKind, jobset: Obj) -> None:
        if kind == "DELETED":
            self.vanished.note_deleted(jobset)
        if kind == "DELETED" or not self.leading:
            return
        meta = jobset.get("metadata") or {}
        if meta.get("deletionTimestamp") and FINALIZER in (meta.get("finalizers") or []):
            self.finalizer.soon(meta["name"])
        failure = await self._failure_message(jobset)
        pods = jobset_pods(jobset, self._cached_pods(meta.get("name", "")))
        self._observe(observe_jobset(jobset, observed_at=self._clock(), failure=failure, pods=pods))
        self._diagnose(jobset)

    async def _on_workload(self, kind: ChangeKind, workload: Obj) -> None:
        if kind == "DELETED" or not self.leading:
            return
        owner = workload_owner(workload)
        jobset = self.jobsets.get(owner) if owner else None
        ids = work_unit_ids(jobset) if jobset else None
        if ids is None:
            return
        position = await self._queue_position(workload)
        self._observe(
            observe_workload(
                workload, jobset_ids=ids, queue_position=position, observed_at=self._clock()
            )
        )

    async def _on_pod(self, kind: ChangeKind, pod: Obj) -> None:
        if not self.leading:
            return
        name = ((pod.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)
        jobset = self.jobsets.get(name) if name else None
        if jobset is None:
            return
        if reobserve_on_pod_change(jobset):
            # R4 reads the pods (docs/decisions/0019): the last one going is what turns
            # DESCHEDULING into SCHEDULING, and no JobSet event says so.
            await self._on_jobset("RESYNC", jobset)
        else:
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

    async def _failure_message(self, jobset: Obj) -> StructuredMessage | None:
        """Why a FAILED JobSet failed (``reconciler.failure``), for its terminal
        observation and the finalizer's write; None for any other JobSet. Never raises:
        a reason that cannot be decided must not cost the FAILED state itself."""
        if to_work_unit_state(jobset) is not WorkUnitState.FAILED:
            return None
        try:
            jobs, pods = await read_failure_evidence(
                self._kube, self.options.namespace, jobset, cached_pods=self._cached_pods
            )
            return failure_message(jobset, decide_failure_reason(jobset, jobs, pods))
        except Exception:
            log.exception("failure reason not decided", jobset=jobset["metadata"]["name"])
            return None

    async def _queue_position(self, workload: Obj) -> QueuePosition | None:
        """Kueue's visibility API: 0-based position (the observer adds 1) and queue size."""
        conditions = (workload.get("status") or {}).get("conditions") or []
        waiting = any(
            c.get("type") == "QuotaReserved" and c.get("status") == "False" for c in conditions
        )
        queue = (workload.get("spec") or {}).get("queueName")
        if not waiting or not queue:
            return None
        try:
            return await self._positions.position(queue, workload["metadata"]["name"])
        except KubeError as error:
            log.debug("queue position unavailable", error=str(error))
            return QueuePosition(None, None)

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

    def _synced(self) -> bool:
        return all(w.synced for w in (self.jobsets, self.workloads, self.pods))

    async def _sweep_vanished(self) -> None:
        await self.vanished.step(leading=self.leading)

    async def _collect_orphans_if_leading(self) -> None:
        if self.leading:
            await self.collect_orphans()

    async def collect_orphans(self) -> int:
        """Delete JobSets no execution wants any more (UID precondition: never a newer
        one). Returns how many were deleted."""
        deleted = 0
        for jobset in list(self.jobsets.cache.values()):
            meta = jobset["metadata"]
            ids = work_unit_ids(jobset)
            if ids is None or meta.get("deletionTimestamp"):
                continue
            try:
                snapshot = await self._ess.work_unit(ids[0], ids[1])
            except (EssUnavailable, EssRejected) as error:
                log.warning("orphan check skipped", error=str(error))
                return deleted
            decision = decide_orphan(ids, snapshot)
            if not decision.orphan:
                continue
            try:
                await self._kube.delete(
                    JOBSETS, self.options.namespace, meta["name"], uid=meta["uid"],
                    propagation_policy="Background",
                )  # fmt: skip
            except KubeError as error:
                if error.failure not in _NOT_THE_ORPHAN:
                    # The next sweep tries again; the other orphans go now.
                    log.warning("orphan delete failed", jobset=meta["name"], error=str(error))
                continue
            deleted += 1
            metrics.ORPHANS_DELETED_TOTAL.inc()
            log.info("orphan deleted", jobset=meta["name"], reason=decision.reason.value)
        return deleted
