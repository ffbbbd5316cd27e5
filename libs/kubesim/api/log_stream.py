"""Writing a container's log as a chunked ``text/plain`` body, once the run to read is
known: what both servers of a log share — kubesim's ``pods/{name}/log``
(``api/pod_logs.py``) and the kubelet endpoint ``/containerLogs`` that the node agent of
``make cluster`` serves to the real API server (``tools/cluster/kubelet_server.py``).

They differ only in where the pod comes from and how time passes, so those are a
:class:`PodFeed`: kubesim reads its store on its scaled clock and wakes on its watch
hub; the node agent reads its informer cache in real time. Selection and rendering are
the pure model's (``kubesim.container_logs``), which follows the CRI log reader.
"""

from __future__ import annotations

import contextlib
from datetime import datetime
from typing import Any, Protocol

from aiohttp import web

from kubesim import container_logs as model
from kubesim.api.log_options import LogOptions

Obj = dict[str, Any]


class PodFeed(Protocol):
    """The pod whose log is followed, as its server sees it."""

    def now(self) -> datetime:
        """The cluster's time (lines are stamped on it)."""

    def current(self) -> Obj | None:
        """The pod as it is now (None: gone)."""

    async def changed(self, wait: float | None) -> bool:
        """Wait up to ``wait`` cluster seconds (None: no limit) for the pod to change;
        True once nothing more will come (the server is stopping)."""


class LogWriter:
    """The response body: lines rendered as asked, cut at ``limitBytes``; ``since`` is
    the moment before which followed lines are skipped too (``sinceTime`` may lie
    ahead)."""

    def __init__(
        self, response: web.StreamResponse, options: LogOptions, since: datetime | None
    ) -> None:
        self._response = response
        self._timestamps = options.timestamps
        self.remaining = options.limit_bytes
        self.since = since

    async def write(self, lines: list[model.LogLine]) -> None:
        data = b"".join(model.render(line, timestamps=self._timestamps) for line in lines)
        if self.remaining is not None:
            data = data[: self.remaining]
            self.remaining -= len(data)
        if data:
            await self._response.write(data)

    @property
    def full(self) -> bool:
        return self.remaining is not None and self.remaining <= 0


async def stream_log(
    request: web.Request,
    options: LogOptions,
    feed: PodFeed,
    pod: Obj,
    container: str,
    script: model.LogScript,
    run: model.ContainerRun,
) -> web.StreamResponse:
    """Write what ``run`` of ``container`` has printed, as ``options`` ask; with
    ``follow``, keep writing each line as it is printed until the run stops."""
    now = feed.now()
    lines = model.written_lines(script, run, now)
    since = model.since_moment(options.since_seconds, options.since_time, now)
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    writer = LogWriter(response, options, since)
    with contextlib.suppress(ConnectionResetError):  # the client went away
        await writer.write(model.select(lines, tail_lines=options.tail_lines, since=since))
        if options.follow and run.finished_at is None and not writer.full:
            await _follow(feed, pod, container, script, run, len(lines), writer)
        await response.write_eof()
    return response


async def _follow(
    feed: PodFeed,
    pod: Obj,
    container: str,
    script: model.LogScript,
    run: model.ContainerRun,
    sent: int,
    writer: LogWriter,
) -> None:
    """Write each line as the run writes it; return once it has stopped (or the pod is
    gone, or the server is stopping). The pod is read again each time, so a change made
    while the first lines were being sent is not missed."""
    uid = pod["metadata"]["uid"]
    while True:
        current = feed.current()
        if current is None or current["metadata"]["uid"] != uid:
            return
        try:
            latest = model.pick_run(current, container, previous=False)
        except model.NoLog:
            return
        if latest.started_at != run.started_at:
            return  # a new run: its log is a new file
        run = latest
        now = feed.now()
        lines = model.written_lines(script, run, now)
        await writer.write(model.select(lines[sent:], tail_lines=None, since=writer.since))
        sent = len(lines)
        if run.finished_at is not None or writer.full:
            return
        due = model.next_line_at(script, run, now)
        if await feed.changed(None if due is None else (due - now).total_seconds()):
            return
