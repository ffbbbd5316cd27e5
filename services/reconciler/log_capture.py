"""Keeping containers' logs before Kubernetes forgets them (docs/logs.md).

A finished unit's JobSet is deleted within seconds and its pods with it; a restarted
JobSet's pods are deleted at once. So the Reconciler reads each container's tail (at
most XMC_LOG_TAIL_BYTES) from the API server the moment it sees the container end
(:meth:`LogCapture.note_pod`, from the pod watch), and again, for every container still
running, on the finalizer path of a deleted JobSet (:meth:`LogCapture.capture_pods`,
awaited before the finalizer goes, bounded by XMC_LOG_CAPTURE_SECONDS), and hands the
tails to the ESS (``RecordContainerLogs``), which stores them.

What is lost, and why it is accepted: a container that ends and whose pod is deleted
while no Reconciler runs (its tail is gone from the cluster), and the text of a capture
whose ESS write kept failing for ``_SEND_ATTEMPTS``. A capture is repeated safely: the
ESS keeps the first final one (``xmc.model.container_logs.merge``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

import structlog

from reconciler import metrics
from reconciler.ess_client import EssClient, EssError
from reconciler.observe.read import work_unit_ids
from xmc.kjson import metadata_of
from xmc.kube import KubeError
from xmc.kube_client import KubeClient
from xmc.model.pod_containers import ContainerRun, container_runs
from xmc.pod_logs import read_tail
from xmc.retry import Backoffs, sleep_or_stop
from xmc.settings import LogSettings
from xmc.timestamps import set_timestamp
from xmc_api.internal.v1 import logs_pb2

log = structlog.get_logger()
Obj = dict[str, Any]
Ids = tuple[int, int, int]

#: Container ends waiting to be captured; past it a capture is dropped and counted.
QUEUE_SIZE: Final = 10_000
#: Captures read at once (each one call to the API server).
_CONCURRENCY: Final = 8
#: Lines asked of the API server for a tail (its bytes are cut to the tail limit here).
TAIL_LINES: Final = 10_000
_SEND_ATTEMPTS: Final = 5
_BACKOFF: Final = Backoffs((0.5, 1.0, 2.0, 5.0))


def ended_runs(pod: Mapping[str, Any], done: set[tuple[str, str, int]]) -> list[ContainerRun]:
    """The pod's container runs that ended and are not captured yet (pure)."""
    return [r for r in container_runs(pod) if r.terminated and r.key not in done]


class LogCapture:
    """The queue of container ends to capture, its worker, and the finalizer's capture."""

    def __init__(
        self,
        kube: KubeClient,
        ess: Callable[[], EssClient],
        *,
        namespace: str,
        settings: LogSettings,
        stopping: asyncio.Event,
    ) -> None:
        self._kube = kube
        self._ess = ess
        self._namespace = namespace
        self._settings = settings
        self._stopping = stopping
        self._queue: asyncio.Queue[tuple[Ids, ContainerRun]] = asyncio.Queue(QUEUE_SIZE)
        #: Final captures stored (or on their way), per pod uid: a pod event repeats its
        #: whole status, and each end is captured once.
        self._done: dict[str, set[tuple[str, str, int]]] = {}

    def note_pod(self, pod: Obj, *, deleted: bool) -> None:
        """Queue the ends this pod's status shows for the first time."""
        uid = str(metadata_of(pod).get("uid") or "")
        if deleted:
            self._done.pop(uid, None)
            return
        ids = work_unit_ids(pod)
        if ids is None or not uid:
            return
        done = self._done.setdefault(uid, set())
        for run in ended_runs(pod, done):
            try:
                self._queue.put_nowait((ids, run))
            except asyncio.QueueFull:
                metrics.LOG_CAPTURES_TOTAL.labels("dropped").inc()
                log.warning("log capture queue full; dropped", pod=run.pod_name)
                continue
            done.add(run.key)

    def forget(self) -> None:
        """A deposed leader's queue is the next leader's work: drop it."""
        while not self._queue.empty():
            self._queue.get_nowait()
        self._done.clear()

    async def run(self) -> None:
        """Capture queued ends, a few at a time, until the Reconciler stops."""
        while True:
            first = await self._next()
            if first is None:
                return
            batch = [first]
            while len(batch) < _CONCURRENCY and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._capture_and_send(batch)
            except Exception:
                log.exception("log capture failed")

    async def _next(self) -> tuple[Ids, ContainerRun] | None:
        """The next queued end, or None once the Reconciler stops."""
        getting = asyncio.ensure_future(self._queue.get())
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((getting, stopping), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            if not getting.done():
                getting.cancel()
        return getting.result() if getting.done() and not getting.cancelled() else None

    async def capture_pods(self, pods: Iterable[Obj]) -> None:
        """Capture every container run of ``pods`` not captured final yet, running ones
        included (the finalizer path: a stopped JobSet's containers are still running, and
        will be killed once the finalizer goes)."""
        batch: list[tuple[Ids, ContainerRun]] = []
        for pod in pods:
            ids, uid = work_unit_ids(pod), str(metadata_of(pod).get("uid") or "")
            done = self._done.setdefault(uid, set())
            if ids is not None and uid:
                batch.extend((ids, r) for r in container_runs(pod) if r.key not in done)
        for start in range(0, len(batch), _CONCURRENCY):
            await self._capture_and_send(batch[start : start + _CONCURRENCY])

    async def capture_before_deletion(self, pods: Sequence[Obj]) -> None:
        """:meth:`capture_pods` bounded by XMC_LOG_CAPTURE_SECONDS: logs are worth a wait,
        never a deletion held for good. Never raises."""
        started = time.monotonic()
        try:
            async with asyncio.timeout(self._settings.capture_seconds):
                await self.capture_pods(pods)
        except TimeoutError:
            log.warning("log capture timed out; the deletion goes on", pods=len(pods))
        except Exception:
            log.exception("log capture failed; the deletion goes on", pods=len(pods))
        metrics.LOG_CAPTURE_SECONDS.observe(time.monotonic() - started)

    async def _capture_and_send(self, batch: Sequence[tuple[Ids, ContainerRun]]) -> None:
        captures = await asyncio.gather(*(self._capture(ids, run) for ids, run in batch))
        for attempt in range(1, _SEND_ATTEMPTS + 1):
            try:
                await self._ess().record_logs(captures)
                metrics.LOG_CAPTURES_TOTAL.labels("stored").inc(len(captures))
                return
            except EssError as error:
                log.warning("log capture not stored; will retry", attempt=attempt,
                            error=str(error))  # fmt: skip
                if attempt < _SEND_ATTEMPTS:
                    await sleep_or_stop(self._stopping, _BACKOFF.after(attempt))
        metrics.LOG_CAPTURES_TOTAL.labels("lost").inc(len(captures))
        log.error("log captures lost: the ESS kept refusing", captures=len(captures))

    async def _capture(self, ids: Ids, run: ContainerRun) -> logs_pb2.ContainerLogCapture:
        xid, wid, eid = ids
        capture = logs_pb2.ContainerLogCapture(
            experiment_id=xid, work_unit_id=wid, execution_id=eid, pod_name=run.pod_name,
            pod_uid=run.pod_uid, container=run.container, run=run.run,
            terminated=run.terminated, reason=run.reason,
        )  # fmt: skip
        if run.exit_code is not None:
            capture.exit_code = run.exit_code
        if run.finished_at is not None:
            set_timestamp(capture.finish_time, run.finished_at)
        try:
            capture.text, capture.truncated = await read_tail(
                self._kube, self._namespace, run.pod_name, run.container,
                limit=self._settings.tail_bytes, tail_lines=TAIL_LINES, previous=run.previous,
            )  # fmt: skip
        except KubeError as error:
            capture.unavailable = f"{error.failure.value}: {error}"[:1024]
            metrics.LOG_CAPTURES_TOTAL.labels("unavailable").inc()

        return capture
