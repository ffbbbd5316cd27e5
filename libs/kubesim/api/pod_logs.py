"""``GET /api/v1/namespaces/{namespace}/pods/{name}/log``: what a simulated container has
written (``kubesim.container_logs``), served as the API server serves ``pods/log``.

Upstream (v1.36.3) the API server decodes and validates ``PodLogOptions``
(``pkg/registry/core/pod/rest/log.go``, ``ValidatePodLogOptions`` in
``pkg/apis/core/validation/validation.go``: 400 for a parameter that does not parse, 422
for one out of range), picks the container (``LogLocation``/``validateContainer`` in
``pkg/registry/core/pod/strategy.go``: 400 when it is missing from a pod with several, or
unknown) and proxies the kubelet's ``/containerLogs``, whose refusals
(``validateContainerLogStatus``) come back as 400 ``BadRequest`` with the kubelet's text.
The body is chunked ``text/plain``; with ``follow`` it stays open, flushed line by line,
until the container stops.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from aiohttp import web

from kubesim import container_logs as model
from kubesim.api.context import CONTEXT, ApiContext
from kubesim.errors import bad_request, invalid
from kubesim.events import Subscription
from kubesim.resources import POD

Obj = dict[str, Any]


@dataclass(frozen=True)
class LogOptions:
    container: str | None = None
    follow: bool = False
    previous: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since_seconds: int | None = None
    since_time: datetime | None = None
    limit_bytes: int | None = None


def _flag(value: str | None) -> bool:
    """apimachinery's ``Convert_Slice_string_To_bool``: present and not ``0``/``false``."""
    return value is not None and value != "0" and value.lower() != "false"


def _integer(value: str | None) -> int | None:
    if value is None:
        return None
    try:
        return int(value, 10)
    except ValueError:
        raise bad_request(f'strconv.ParseInt: parsing "{value}": invalid syntax') from None


def _moment(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise bad_request(
            f'parsing time "{value}" as "2006-01-02T15:04:05Z07:00": cannot parse as RFC3339'
        )
    return moment


def _problems(options: LogOptions, stream: str | None) -> list[str]:
    """``ValidatePodLogOptions`` (the split-streams feature gate is off by default)."""
    problems = []
    if options.tail_lines is not None and options.tail_lines < 0:
        problems.append(
            f"tailLines: Invalid value: {options.tail_lines}: must be greater than or equal to 0"
        )
    if options.limit_bytes is not None and options.limit_bytes < 1:
        problems.append(f"limitBytes: Invalid value: {options.limit_bytes}: must be greater than 0")
    if options.since_seconds is not None and options.since_time is not None:
        problems.append(
            ": Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified"
        )
    elif options.since_seconds is not None and options.since_seconds < 1:
        problems.append(
            f"sinceSeconds: Invalid value: {options.since_seconds}: must be greater than 0"
        )
    if stream is not None:
        problems.append("stream: Forbidden: may not be specified")
    return problems


def parse_log_options(query: Mapping[str, str], name: str) -> LogOptions:
    """The request's ``PodLogOptions``; 400 when one does not parse, 422 when invalid."""
    options = LogOptions(
        container=query.get("container") or None,
        follow=_flag(query.get("follow")),
        previous=_flag(query.get("previous")),
        timestamps=_flag(query.get("timestamps")),
        tail_lines=_integer(query.get("tailLines")),
        since_seconds=_integer(query.get("sinceSeconds")),
        since_time=_moment(query.get("sinceTime")),
        limit_bytes=_integer(query.get("limitBytes")),
    )
    problems = _problems(options, query.get("stream"))
    if problems:
        message = problems[0] if len(problems) == 1 else f"[{', '.join(problems)}]"
        raise invalid("PodLogOptions", name, message)
    return options


def container_of(pod: Mapping[str, Any], requested: str | None) -> str:
    """``validateContainer``: the named container, or the only one; 400 otherwise."""
    spec = pod.get("spec") or {}
    name = (pod.get("metadata") or {}).get("name", "")
    containers = spec.get("containers") or []
    every = [
        c.get("name", "")
        for key in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(key) or []
    ]
    if requested:
        if requested not in every:
            raise bad_request(f"container {requested} is not valid for pod {name}")
        return requested
    if len(containers) == 1:
        return str(containers[0].get("name", ""))
    if not containers:
        raise bad_request(f"a container name must be specified for pod {name}")
    raise bad_request(
        f"a container name must be specified for pod {name}, choose one of: [{' '.join(every)}]"
    )


class _Writer:
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


async def pod_log(request: web.Request) -> web.StreamResponse:
    context = request.app[CONTEXT]
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    url = f"{request.path}?{request.query_string}"
    await context.faults.apply("get", "pods/log", url)
    options = parse_log_options(request.query, name)
    pod = context.store.get(POD, namespace, name)
    container = container_of(pod, options.container)
    try:
        run = model.pick_run(pod, container, previous=options.previous)
    except model.NoLog as error:
        raise bad_request(str(error)) from None
    scripts = context.log_scripts(pod) if context.log_scripts is not None else {}
    script = scripts.get(container, model.LogScript())
    now = context.clock.now()
    lines = model.written_lines(script, run, now)
    since = model.since_moment(options.since_seconds, options.since_time, now)
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    writer = _Writer(response, options, since)
    with contextlib.suppress(ConnectionResetError):  # the client went away
        await writer.write(model.select(lines, tail_lines=options.tail_lines, since=since))
        if options.follow and run.finished_at is None and not writer.full:
            await _follow(context, pod, container, script, run, len(lines), writer)
        await response.write_eof()
    return response


async def _follow(
    context: ApiContext,
    pod: Obj,
    container: str,
    script: model.LogScript,
    run: model.ContainerRun,
    sent: int,
    writer: _Writer,
) -> None:
    """Write each line as the run writes it; return once it has stopped (or the pod is
    gone, or kubesim is stopping). The pod is read again after the feed is open, so a
    change made while the first lines were being sent is not missed."""
    meta = pod["metadata"]
    subscription = context.watches.open(POD)
    try:
        while True:
            current = context.store.find(POD, meta["namespace"], meta["name"])
            if current is None or current["metadata"]["uid"] != meta["uid"]:
                return
            try:
                latest = model.pick_run(current, container, previous=False)
            except model.NoLog:
                return
            if latest.started_at != run.started_at:
                return  # a new run: its log is a new file
            run = latest
            now = context.clock.now()
            lines = model.written_lines(script, run, now)
            await writer.write(model.select(lines[sent:], tail_lines=None, since=writer.since))
            sent = len(lines)
            if run.finished_at is not None or writer.full:
                return
            due = model.next_line_at(script, run, now)
            wait = None if due is None else (due - now).total_seconds() / context.clock.scale
            if await _stream_ended(subscription, wait):
                return
    finally:
        context.watches.close(subscription)


async def _stream_ended(subscription: Subscription, wait: float | None) -> bool:
    """Wait up to ``wait`` real seconds (None: no limit) for a pod event and take every
    queued one; True once the feed has ended (kubesim is stopping)."""
    queue = subscription.queue
    with contextlib.suppress(TimeoutError):
        item = await asyncio.wait_for(queue.get(), timeout=wait)
        while item is not None:
            if queue.empty():
                return False
            item = queue.get_nowait()
        return True
    return False
