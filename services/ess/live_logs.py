"""The live half of ``xmc.v1.LogService``: a running execution's container logs, read from
the API server (docs/logs.md) with the ESS's read-only client (:mod:`ess.cluster`). An
ESS whose cluster is out of reach still serves every stored log, and a live read then
says why it has nothing (:class:`LiveUnavailable`).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Final

import structlog

from ess.cluster import ClusterUnavailable, LazyKube
from xmc.kube import PODS, KubeError
from xmc.kube_client import KubeClient
from xmc.labels import EXECUTION_ID, EXPERIMENT_ID, WORK_UNIT_ID
from xmc.model.pod_containers import ContainerRun, container_runs
from xmc.pod_logs import follow_log, read_tail

log = structlog.get_logger()

#: Seconds between looks for new pods while following (a JobSet restart makes new ones).
POLL_SECONDS: Final = 2.0
#: Lines a live read starts with (a followed log then grows from there).
TAIL_LINES: Final = 10_000
#: Events a follow may hold for a slow reader before the pumps wait.
_BACKLOG: Final = 256
#: A line longer than this is passed on in pieces.
_MAX_PENDING: Final = 64 * 1024

RunKey = tuple[str, str, int]


#: The cluster cannot be read (not configured, or out of reach).
LiveUnavailable = ClusterUnavailable


@dataclass(frozen=True)
class LiveEvent:
    run: ContainerRun
    start: bool = False
    data: bytes = b""
    notice: str = ""


def split_lines(pending: bytes, chunk: bytes) -> tuple[bytes, bytes]:
    """(whole lines to pass on, what stays pending) after ``chunk`` arrives: streams of
    several containers interleave by whole lines, never mid-line (pure)."""
    data = pending + chunk
    cut = data.rfind(b"\n") + 1
    if cut == 0 and len(data) > _MAX_PENDING:
        return data, b""
    return data[:cut], data[cut:]


class LiveLogs:
    def __init__(self, kube: LazyKube, *, tail_bytes: int) -> None:
        self._kube = kube
        self._namespace = kube.namespace
        self._tail_bytes = tail_bytes

    async def _client(self) -> KubeClient:
        return await self._kube.client()

    async def runs(self, xid: int, wid: int, eid: int) -> list[ContainerRun]:
        """The container runs of the execution's pods that have a log."""
        kube = await self._client()
        selector = f"{EXPERIMENT_ID}={xid},{WORK_UNIT_ID}={wid},{EXECUTION_ID}={eid}"
        try:
            page = await kube.list_page(PODS, self._namespace, label_selector=selector)
        except KubeError as error:
            raise LiveUnavailable(f"cannot list the pods: {error}") from error
        return [run for pod in page.get("items") or [] for run in container_runs(pod)]

    async def read(self, runs: Collection[ContainerRun]) -> AsyncIterator[LiveEvent]:
        """Each run's tail as it is now."""
        kube = await self._client()
        for run in runs:
            yield LiveEvent(run, start=True)
            try:
                data, _ = await read_tail(
                    kube, self._namespace, run.pod_name, run.container,
                    limit=self._tail_bytes, tail_lines=TAIL_LINES, previous=run.previous,
                )  # fmt: skip
                yield LiveEvent(run, data=data)
            except KubeError as error:
                yield LiveEvent(run, notice=f"log unavailable: {error}")

    async def follow(
        self,
        runs: Callable[[], Awaitable[list[ContainerRun]]],
        *,
        still_live: Callable[[], Awaitable[bool]],
    ) -> AsyncIterator[LiveEvent]:
        """Every run ``runs()`` lists, followed as it is written, the streams interleaved
        by whole lines; new pods are looked for every ``POLL_SECONDS`` until every stream
        has ended and ``still_live()`` says the execution has ended too."""
        kube = await self._client()
        queue: asyncio.Queue[LiveEvent] = asyncio.Queue(_BACKLOG)
        pumps: dict[RunKey, asyncio.Task[None]] = {}
        try:
            while True:
                for run in await runs():
                    if run.key not in pumps and not run.previous:
                        pumps[run.key] = asyncio.create_task(self._pump(kube, run, queue))
                async for event in _drain(queue, within=POLL_SECONDS):
                    yield event
                ended = all(p.done() for p in pumps.values()) and queue.empty()
                if ended and not await still_live():
                    return
        finally:
            for pump in pumps.values():
                pump.cancel()
            await asyncio.gather(*pumps.values(), return_exceptions=True)

    async def _pump(self, kube: KubeClient, run: ContainerRun, queue: asyncio.Queue[LiveEvent]
                    ) -> None:  # fmt: skip
        await queue.put(LiveEvent(run, start=True))
        pending = b""
        try:
            async with follow_log(
                kube, self._namespace, run.pod_name, run.container, tail_lines=TAIL_LINES
            ) as chunks:
                async for chunk in chunks:
                    lines, pending = split_lines(pending, chunk)
                    if lines:
                        await queue.put(LiveEvent(run, data=lines))
            if pending:
                await queue.put(LiveEvent(run, data=pending))
        except KubeError as error:
            await queue.put(LiveEvent(run, notice=f"log stream ended: {error}"))


async def _drain(queue: asyncio.Queue[LiveEvent], *, within: float) -> AsyncIterator[LiveEvent]:
    """The events that arrive within ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (left := deadline - loop.time()) > 0:
        try:
            async with asyncio.timeout(left):
                event = await queue.get()
        except TimeoutError:
            return
        yield event
