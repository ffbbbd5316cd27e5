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
from datetime import datetime
from typing import Any

from aiohttp import web

from kubesim import container_logs as model
from kubesim.api.context import CONTEXT, ApiContext
from kubesim.api.log_options import InvalidOptions, UndecodableOptions, parse_log_options
from kubesim.api.log_stream import stream_log
from kubesim.errors import bad_request, invalid
from kubesim.events import Subscription
from kubesim.resources import POD

Obj = dict[str, Any]


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


async def pod_log(request: web.Request) -> web.StreamResponse:
    context = request.app[CONTEXT]
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    url = f"{request.path}?{request.query_string}"
    await context.faults.apply("get", "pods/log", url)
    try:
        options = parse_log_options(request.query)
    except UndecodableOptions as error:
        raise bad_request(str(error)) from None
    except InvalidOptions as error:
        raise invalid("PodLogOptions", name, str(error)) from None
    pod = context.store.get(POD, namespace, name)
    container = container_of(pod, options.container)
    try:
        run = model.pick_run(pod, container, previous=options.previous)
    except model.NoLog as error:
        raise bad_request(str(error)) from None
    scripts = context.log_scripts(pod) if context.log_scripts is not None else {}
    script = scripts.get(container, model.LogScript())
    feed = _StoreFeed(context, namespace, name, follow=options.follow)
    try:
        return await stream_log(request, options, feed, pod, container, script, run)
    finally:
        feed.close()


class _StoreFeed:
    """The pod in kubesim's store, on its scaled clock; when following, woken by any pod
    event (subscribed before the first lines are read, so none is missed)."""

    def __init__(self, context: ApiContext, namespace: str, name: str, *, follow: bool) -> None:
        self._context = context
        self._namespace, self._name = namespace, name
        self.subscription: Subscription | None = context.watches.open(POD) if follow else None

    def close(self) -> None:
        if self.subscription is not None:
            self._context.watches.close(self.subscription)

    def now(self) -> datetime:
        return self._context.clock.now()

    def current(self) -> Obj | None:
        return self._context.store.find(POD, self._namespace, self._name)

    async def changed(self, wait: float | None) -> bool:
        """Wait up to ``wait`` cluster seconds for a pod event and take every queued
        one; True once the feed has ended (kubesim is stopping)."""
        assert self.subscription is not None, "changed() is only asked when following"
        queue = self.subscription.queue
        timeout = None if wait is None else wait / self._context.clock.scale
        with contextlib.suppress(TimeoutError):
            item = await asyncio.wait_for(queue.get(), timeout=timeout)
            while item is not None:
                if queue.empty():
                    return False
                item = queue.get_nowait()
            return True
        return False
