"""The node agent of ``make cluster``: the kubelet of the fake Nodes, acting only through
the API server.

kwok keeps the Nodes (Ready, heartbeats, leases); this agent runs the pods the scheduler
binds to them (``spec.nodeName`` a Node annotated ``kwok.x-k8s.io/node=fake``). Each
container follows the ``kubesim.xmc/behavior`` annotations (libs/kubesim/controllers/
behavior.py): the status at any moment is kubesim's pure ``pod_status_at`` (the same
model as kubesim's kubelet), in real seconds since the agent took the pod
(``status.startTime``). What the agent adds is the kubelet's side of a real API:

- it writes ``pods/status`` with a strategic-merge patch carrying ``metadata.uid`` (a
  precondition, as the kubelet's status manager does): phase, conditions (Initialized,
  ContainersReady, Ready, PodReadyToStartContainers; PodScheduled stays the
  scheduler's), container statuses, ``hostIP`` (the Node's InternalIP) and a ``podIP``
  unique among the agent's pods;
- a deleted pod (``deletionTimestamp`` set; the API server sets it to the moment the
  grace period ends) keeps running its containers, which may still exit on their own,
  until that moment; then every container still running is reported killed (exit 137,
  reason Error: the model's processes ignore SIGTERM, as ``sleep`` as PID 1 does), the
  pod goes to its terminal phase, and the agent deletes it with ``gracePeriodSeconds=0``
  and a UID precondition. A pod with nothing running goes at once.

Scale: one list+watch of Nodes and one of bound pods (``fieldSelector=spec.nodeName!=``)
keep caches; an event costs a dict update and a queue push. Workers take keys from a
deduplicating queue; a pod's next change is one entry in a heap that a single timer loop
serves. Watches resume from their resourceVersion and relist on 410 Gone; every loop is
supervised (restarted after an error).

Run by ``tools/cluster/up.py``; ``--ready-file`` is written once both caches are filled.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import heapq
import ipaddress
import json
import logging
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubelet_server import Authorizer, Changes, Pods, serve, serving_context

from kubesim.clock import rfc3339
from kubesim.container_logs import LogScript
from kubesim.controllers import ControllerSettings
from kubesim.controllers.behavior import BEHAVIOR_ANNOTATION, ContainerBehavior, parse_behaviors
from kubesim.controllers.pod_status import TERMINAL_PHASES, pod_status_at

log = logging.getLogger("nodeagent")

Obj = dict[str, Any]
Key = tuple[str, str]
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
KILLED_EXIT_CODE = 137
"""SIGKILL at the end of the grace period (128 + 9)."""
POD_CIDR = ipaddress.ip_network("10.128.0.0/9")
WATCH_TIMEOUT_SECONDS = 300
OWN_CONDITIONS = frozenset({"PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"})


# --- the decision (pure) ----------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    status: Obj | None
    """The status to write (None: nothing to write)."""
    delete: bool = False
    """Delete the pod (gracePeriodSeconds=0, UID precondition) after writing ``status``."""
    next_at: datetime | None = None
    """When to look at the pod again (None: only on its next event)."""


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def started_at(pod: Mapping[str, Any], now: datetime) -> datetime:
    """When the agent took the pod: its ``status.startTime``, else now (whole seconds, the
    resolution of the timestamps it writes, so the timeline does not shift on re-read)."""
    start = parse_time((pod.get("status") or {}).get("startTime"))
    return start if start is not None else now.replace(microsecond=0)


def _running(status: Mapping[str, Any]) -> bool:
    return any(
        "running" in (c.get("state") or {})
        for key in ("initContainerStatuses", "containerStatuses")
        for c in status.get(key) or []
    )


def _killed(container: Mapping[str, Any], at: str) -> Obj:
    state = container.get("state") or {}
    if "terminated" in state:
        return dict(container)
    if "running" in state:
        terminated: Obj = {
            "exitCode": KILLED_EXIT_CODE,
            "reason": "Error",
            "startedAt": state["running"].get("startedAt"),
            "finishedAt": at,
        }
        if "containerID" in container:
            terminated["containerID"] = container["containerID"]
    else:  # never started: what the kubelet reports for a container it has no record of
        terminated = {
            "exitCode": KILLED_EXIT_CODE,
            "reason": "ContainerStatusUnknown",
            "message": "The container could not be located when the pod was terminated",
            "startedAt": None,
            "finishedAt": None,
        }
    return {**container, "ready": False, "started": False, "state": {"terminated": terminated}}


def stopped_status(status: Mapping[str, Any], at: str) -> Obj:
    """A deleted pod's last status: every container not yet terminated is killed at
    ``at``; the phase becomes terminal (Succeeded only if every container exited 0), and
    the pod is no longer ready (as the kubelet reports before its final delete)."""
    result = dict(status)
    for key in ("initContainerStatuses", "containerStatuses"):
        if key in result:
            result[key] = [_killed(c, at) for c in result[key]]
    codes = [
        (c["state"]["terminated"] or {}).get("exitCode")
        for c in result.get("containerStatuses") or []
    ]
    result["phase"] = "Succeeded" if codes and all(code == 0 for code in codes) else "Failed"
    conditions = []
    for condition in result.get("conditions") or []:
        if condition["type"] in ("Ready", "ContainersReady") and condition["status"] == "True":
            condition = {
                **condition,
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": at,
            }
        if condition["type"] == "PodReadyToStartContainers":
            condition = {**condition, "status": "False", "lastTransitionTime": at}
        conditions.append(condition)
    result["conditions"] = conditions
    return result


def _container_id(uid: str, name: str) -> str:
    return "nodeagent://" + hashlib.sha256(f"{uid}/{name}".encode()).hexdigest()[:32]


def _finish(pod: Mapping[str, Any], status: Obj, host_ip: str, pod_ip: str) -> Obj:
    """What the kubelet, not the model, owns: IPs, container IDs, observedGeneration;
    PodScheduled is left to the scheduler."""
    meta = pod.get("metadata") or {}
    uid = str(meta.get("uid", ""))
    result = dict(status)
    # A strategic-merge patch merges conditions by type: null drops what a condition no
    # longer says (the reason of a False condition once it is True).
    result["conditions"] = [
        {"reason": None, "message": None, **c}
        for c in status.get("conditions") or []
        if c["type"] in OWN_CONDITIONS
    ]
    for key in ("initContainerStatuses", "containerStatuses"):
        if key not in result:
            continue
        containers = []
        for container in result[key]:
            container = dict(container)
            if "containerID" in container:
                container["containerID"] = _container_id(uid, container["name"])
            terminated = (container.get("state") or {}).get("terminated")
            if terminated and "containerID" in terminated:
                container["state"] = {
                    "terminated": {**terminated, "containerID": container["containerID"]}
                }
            containers.append(container)
        result[key] = containers
    result["hostIP"], result["hostIPs"] = host_ip, [{"ip": host_ip}]
    result["podIP"], result["podIPs"] = pod_ip, [{"ip": pod_ip}]
    if "generation" in meta:
        result["observedGeneration"] = meta["generation"]
    return result


def grace_left(meta: Mapping[str, Any]) -> bool:
    """Whether a deleted pod was not yet deleted with gracePeriodSeconds 0."""
    return bool(meta.get("deletionGracePeriodSeconds") != 0)


def behavior_annotations(meta: Mapping[str, Any], spec: Mapping[str, Any]) -> Mapping[str, str]:
    """The pod's behaviour annotations, with "run until deleted" as the pod-wide default
    of a ``restartPolicy: Always`` pod (a Deployment's). A kubelet restarts such a
    container in place whenever it exits, so the pod never reaches a terminal phase; the
    model restarts nothing, and its default (exit 0 after ``run_seconds``) would make the
    pod Succeeded and its ReplicaSet replace it every few seconds, without end. An
    explicit behaviour still applies (and may end the pod: in-place restarts are not
    modelled)."""
    annotations: Mapping[str, str] = meta.get("annotations") or {}
    if spec.get("restartPolicy") == "Always" and BEHAVIOR_ANNOTATION not in annotations:
        return {BEHAVIOR_ANNOTATION: '{"run_seconds": null}', **annotations}
    return annotations


def pod_behaviors(
    pod: Mapping[str, Any], *, start_seconds: float, run_seconds: float
) -> dict[str, ContainerBehavior]:
    """How each container of ``pod`` behaves (a malformed annotation: every container
    fails to be configured, saying why)."""
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return parse_behaviors(
        behavior_annotations(meta, spec),
        [c.get("name", "") for c in spec.get("containers") or []],
        [c.get("name", "") for c in spec.get("initContainers") or []],
        start_seconds=start_seconds,
        run_seconds=run_seconds,
    )


def decide(
    pod: Mapping[str, Any],
    now: datetime,
    *,
    start: datetime,
    host_ip: str,
    pod_ip: str,
    start_seconds: float,
    run_seconds: float,
) -> Decision:
    """What the kubelet of ``pod`` does at ``now``, the agent having taken it at ``start``."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    deleting = parse_time(meta.get("deletionTimestamp"))
    if status.get("phase") in TERMINAL_PHASES:
        # Deleted with gracePeriodSeconds 0 already (by the agent, or forced): the pod
        # waits for its finalizers (the Job controller's); deleting again changes nothing.
        return Decision(None, delete=deleting is not None and grace_left(meta))
    behaviors = pod_behaviors(pod, start_seconds=start_seconds, run_seconds=run_seconds)
    moment = now if deleting is None else min(now, deleting)
    elapsed = max((moment - start).total_seconds(), 0.0)
    snapshot = pod_status_at(pod, behaviors, started_at=start, elapsed=elapsed)
    desired = _finish(pod, snapshot.status, host_ip, pod_ip)
    next_at = None
    if snapshot.next_change is not None:
        next_at = start + timedelta(seconds=snapshot.next_change)
    if deleting is None:
        return Decision(desired, next_at=next_at)
    if now < deleting and _running(desired) and desired["phase"] not in TERMINAL_PHASES:
        return Decision(desired, next_at=deleting if next_at is None else min(next_at, deleting))
    return Decision(stopped_status(desired, rfc3339(moment)), delete=True)


def is_fake_node(node: Mapping[str, Any]) -> bool:
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(FAKE_NODE_ANNOTATION[0]) == FAKE_NODE_ANNOTATION[1])


def node_ip(node: Mapping[str, Any]) -> str:
    for address in (node.get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address["address"])
    return "127.0.0.1"


def newer(incoming: Mapping[str, Any], cached: Mapping[str, Any] | None) -> bool:
    """Whether ``incoming`` is not older than ``cached`` (same pod; etcd's integer
    resourceVersions), so a late watch event does not undo a write's response."""
    if cached is None or incoming["metadata"].get("uid") != cached["metadata"].get("uid"):
        return True
    try:
        return int(incoming["metadata"]["resourceVersion"]) >= int(
            cached["metadata"]["resourceVersion"]
        )
    except (KeyError, ValueError):
        return True


class IpPool:
    """Pod IPs from ``POD_CIDR``, one per pod UID, unique while the pod is known."""

    def __init__(self) -> None:
        self._by_uid: dict[str, str] = {}
        self._used: set[str] = set()
        self._cursor = 1

    def claim(self, uid: str, current: str | None = None) -> str:
        if uid in self._by_uid:
            return self._by_uid[uid]
        ip = current if current and current not in self._used else None
        while ip is None:
            candidate = str(POD_CIDR[self._cursor])
            self._cursor = self._cursor % (POD_CIDR.num_addresses - 2) + 1
            if candidate not in self._used:
                ip = candidate
        self._by_uid[uid] = ip
        self._used.add(ip)
        return ip

    def release(self, uid: str) -> None:
        ip = self._by_uid.pop(uid, None)
        if ip is not None:
            self._used.discard(ip)


# --- the API ------------------------------------------------------------------------------


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:300]}")
        self.status = status


class Gone(Exception):
    """The watch's resourceVersion is too old (410): relist."""


def _file(data_key: str, path_key: str, entry: Mapping[str, Any], tmp: Path, name: str) -> str:
    if entry.get(path_key):
        return str(entry[path_key])
    out = tmp / name
    out.write_bytes(base64.b64decode(entry[data_key]))
    out.chmod(0o600)
    return str(out)


def load_kubeconfig(path: Path, tmp: Path) -> tuple[str, ssl.SSLContext]:
    """Server URL and TLS context (CA, client certificate) of the current context."""
    config = yaml.safe_load(path.read_text())
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c for c in config["clusters"] if c["name"] == context["context"]["cluster"])
    user = next(u for u in config["users"] if u["name"] == context["context"]["user"])
    ctx = ssl.create_default_context(
        cafile=_file(
            "certificate-authority-data", "certificate-authority", cluster["cluster"], tmp, "ca"
        )
    )
    ctx.load_cert_chain(
        _file("client-certificate-data", "client-certificate", user["user"], tmp, "crt"),
        _file("client-key-data", "client-key", user["user"], tmp, "key"),
    )
    return cluster["cluster"]["server"], ctx


class Api:
    def __init__(self, server: str, ctx: ssl.SSLContext) -> None:
        self._server = server.rstrip("/")
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ctx, limit=64),
            headers={"Accept": "application/json", "User-Agent": "xmc-nodeagent"},
        )

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: object = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Obj:
        data = None if body is None else json.dumps(body)
        async with self._session.request(
            method,
            self._server + path,
            params=params,
            data=data,
            headers={"Content-Type": content_type},
            timeout=aiohttp.ClientTimeout(total=60),
        ) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise ApiError(resp.status, text)
            result: Obj = json.loads(text) if text else {}
            return result

    async def list(self, path: str, params: Mapping[str, str]) -> tuple[list[Obj], str]:
        """Every item (pages of 500) and the list's resourceVersion."""
        items: list[Obj] = []
        cont = ""
        while True:
            query = {**params, "limit": "500", **({"continue": cont} if cont else {})}
            page = await self.request("GET", path, params=query)
            items += page.get("items") or []
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items, str(page["metadata"]["resourceVersion"])

    async def watch(
        self, path: str, params: Mapping[str, str], resource_version: str
    ) -> AsyncIterator[Obj]:
        """Watch events from ``resource_version`` (bookmarks included); Gone on 410."""
        query = {
            **params,
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_SECONDS),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WATCH_TIMEOUT_SECONDS + 30)
        async with self._session.get(self._server + path, params=query, timeout=timeout) as resp:
            if resp.status == 410:
                raise Gone
            if resp.status >= 300:
                raise ApiError(resp.status, await resp.text())
            buffer = b""
            async for chunk in resp.content.iter_any():  # lines may exceed any line limit
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if not line.strip():
                        continue
                    event: Obj = json.loads(line)
                    if event.get("type") == "ERROR":
                        code = int((event.get("object") or {}).get("code") or 500)
                        if code == 410:
                            raise Gone
                        raise ApiError(code, line.decode())
                    yield event


# --- the agent ------------------------------------------------------------------------------


async def supervise(name: str, loop: Callable[[], Awaitable[None]]) -> None:
    """Run ``loop`` forever: restart it after an error, backing off up to 5 s."""
    backoff = 0.2
    while True:
        began = time.monotonic()
        try:
            await loop()
            log.warning("%s returned; restarting", name)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed; restarting", name)
        if time.monotonic() - began > 30:
            backoff = 0.2
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, 5.0)


@dataclass
class Agent:
    api: Api
    start_seconds: float
    run_seconds: float
    workers: int = 8
    ready_file: Path | None = None
    nodes: dict[str, str] = field(default_factory=dict)
    """Fake Node name -> its InternalIP."""
    pods: dict[Key, Obj] = field(default_factory=dict)
    """Every bound pod (on any Node), by namespace/name."""
    _queue: asyncio.Queue[Key] = field(default_factory=asyncio.Queue)
    _queued: set[Key] = field(default_factory=set)
    _timers: list[tuple[float, Key]] = field(default_factory=list)
    _due: dict[Key, float] = field(default_factory=dict)
    _timer_changed: asyncio.Event = field(default_factory=asyncio.Event)
    _written: dict[Key, tuple[str, str]] = field(default_factory=dict)
    _started: dict[str, datetime] = field(default_factory=dict)
    _ips: IpPool = field(default_factory=IpPool)
    _synced: set[str] = field(default_factory=set)
    _processing: set[Key] = field(default_factory=set)
    _dirty: set[Key] = field(default_factory=set)
    changes: Changes = field(default_factory=Changes)
    """Wakes the log followers of a pod (``kubelet_server``) when its cache entry changes."""

    def enqueue(self, key: Key) -> None:
        if key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def schedule(self, key: Key, at: datetime) -> None:
        when = at.timestamp() + 0.05
        if key in self._due and self._due[key] <= when:
            return
        self._due[key] = when
        heapq.heappush(self._timers, (when, key))
        self._timer_changed.set()

    # what the kubelet endpoint reads (kubelet_server)

    def running_pod(self, key: Key) -> Obj | None:
        """A pod bound to one of the fake Nodes (None: the agent does not run it)."""
        pod = self.pods.get(key)
        return pod if pod is not None and pod["spec"].get("nodeName") in self.nodes else None

    def log_scripts(self, pod: Obj) -> dict[str, LogScript]:
        behaviors = pod_behaviors(
            pod, start_seconds=self.start_seconds, run_seconds=self.run_seconds
        )
        return {name: behavior.log_script for name, behavior in behaviors.items()}

    async def subject_access_review(self, review: Obj) -> Obj:
        return await self.api.request(
            "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review
        )

    # informers

    async def _informer(
        self,
        name: str,
        path: str,
        params: Mapping[str, str],
        replace: Callable[[list[Obj]], None],
        apply: Callable[[str, Obj], None],
    ) -> None:
        items, version = await self.api.list(path, params)
        replace(items)
        self._synced.add(name)
        self._maybe_ready()
        while True:
            try:
                async for event in self.api.watch(path, params, version):
                    obj = event["object"]
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        apply(event["type"], obj)
            except Gone:
                log.info("%s: resourceVersion %s expired; relisting", name, version)
                items, version = await self.api.list(path, params)
                replace(items)

    def _maybe_ready(self) -> None:
        if self.ready_file is not None and self._synced >= {"nodes", "pods"}:
            self.ready_file.write_text(f"{len(self.nodes)} nodes, {len(self.pods)} pods\n")

    def _replace_nodes(self, items: list[Obj]) -> None:
        self.nodes = {n["metadata"]["name"]: node_ip(n) for n in items if is_fake_node(n)}
        for key in list(self.pods):
            self.enqueue(key)

    def _apply_node(self, kind: str, node: Obj) -> None:
        name = node["metadata"]["name"]
        known = name in self.nodes
        if kind == "DELETED" or not is_fake_node(node):
            self.nodes.pop(name, None)
            return
        self.nodes[name] = node_ip(node)
        if not known:  # pods bound before the Node was seen (rare: O(pods))
            for key, pod in self.pods.items():
                if pod["spec"].get("nodeName") == name:
                    self.enqueue(key)

    def _replace_pods(self, items: list[Obj]) -> None:
        fresh = {(p["metadata"]["namespace"], p["metadata"]["name"]): p for p in items}
        for key in set(self.pods) - set(fresh):
            self.enqueue(key)
        self.pods = fresh
        for key in fresh:
            self.enqueue(key)
            self.changes.notify(key)

    def _apply_pod(self, kind: str, pod: Obj) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if kind == "DELETED":
            cached = self.pods.get(key)
            if cached is not None and cached["metadata"]["uid"] == pod["metadata"]["uid"]:
                del self.pods[key]
        elif newer(pod, self.pods.get(key)):
            self.pods[key] = pod
        self.enqueue(key)
        self.changes.notify(key)

    # the timer and the workers

    async def _timer_loop(self) -> None:
        while True:
            now = time.time()
            while self._timers and self._timers[0][0] <= now:
                when, key = heapq.heappop(self._timers)
                if self._due.get(key) == when:
                    del self._due[key]
                    self.enqueue(key)
            self._timer_changed.clear()
            wait = self._timers[0][0] - now if self._timers else 3600.0
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._timer_changed.wait(), timeout=max(wait, 0.0))

    async def _worker(self) -> None:
        """Reconcile keys from the queue; a key is never reconciled by two workers at
        once (one queued meanwhile is reconciled again once the first is done)."""
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            if key in self._processing:
                self._dirty.add(key)
                continue
            self._processing.add(key)
            try:
                await self.reconcile(key)
            except ApiError as error:
                log.warning("pod %s/%s: %s; retrying in 1 s", *key, error)
                self.schedule(key, datetime.now(UTC) + timedelta(seconds=1))
            except Exception:
                log.exception("pod %s/%s; retrying in 1 s", *key)
                self.schedule(key, datetime.now(UTC) + timedelta(seconds=1))
            finally:
                self._processing.discard(key)
                if key in self._dirty:
                    self._dirty.discard(key)
                    self.enqueue(key)

    def _forget(self, key: Key) -> None:
        written = self._written.pop(key, None)
        if written is not None:
            self._ips.release(written[0])
            self._started.pop(written[0], None)

    async def reconcile(self, key: Key) -> None:
        pod = self.pods.get(key)
        node = None if pod is None else pod["spec"].get("nodeName")
        if pod is None or node not in self.nodes:
            self._forget(key)
            return
        meta = pod["metadata"]
        uid = meta["uid"]
        if key in self._written and self._written[key][0] != uid:
            self._forget(key)  # a new pod of the same name
        now = datetime.now(UTC)
        start = self._started.setdefault(uid, started_at(pod, now))
        status = pod.get("status") or {}
        decision = decide(
            pod,
            now,
            start=start,
            host_ip=self.nodes[node],
            pod_ip=self._ips.claim(uid, status.get("podIP")),
            start_seconds=self.start_seconds,
            run_seconds=self.run_seconds,
        )
        namespace, name = key
        base = f"/api/v1/namespaces/{namespace}/pods/{name}"
        if decision.status is not None:
            text = json.dumps(decision.status, sort_keys=True)
            if self._written.get(key) != (uid, text):
                try:
                    updated = await self.api.request(
                        "PATCH",
                        f"{base}/status",
                        {"metadata": {"uid": uid}, "status": decision.status},
                        content_type="application/strategic-merge-patch+json",
                    )
                except ApiError as error:
                    if error.status in (404, 409):  # gone, or another pod of that name
                        return
                    raise
                self._written[key] = (uid, text)
                if newer(updated, self.pods.get(key)):
                    self.pods[key] = updated
                    self.changes.notify(key)
        if decision.delete:
            try:
                await self.api.request(
                    "DELETE",
                    base,
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": uid},
                    },
                )
            except ApiError as error:
                if error.status not in (404, 409):
                    raise
        if decision.next_at is not None:
            self.schedule(key, decision.next_at)

    async def run(self) -> None:
        loops = [
            supervise(
                "nodes",
                lambda: self._informer(
                    "nodes", "/api/v1/nodes", {}, self._replace_nodes, self._apply_node
                ),
            ),
            supervise(
                "pods",
                lambda: self._informer(
                    "pods",
                    "/api/v1/pods",
                    {"fieldSelector": "spec.nodeName!="},
                    self._replace_pods,
                    self._apply_pod,
                ),
            ),
            supervise("timer", self._timer_loop),
            *(supervise(f"worker-{i}", self._worker) for i in range(self.workers)),
        ]
        await asyncio.gather(*loops)


async def main(argv: list[str] | None = None) -> None:
    defaults = ControllerSettings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--start-seconds", type=float, default=defaults.pod_start_seconds)
    parser.add_argument("--run-seconds", type=float, default=defaults.pod_run_seconds)
    parser.add_argument("--workers", type=int, default=8)
    # The kubelet's own flag names: where the log endpoint listens, and its TLS.
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, help="serve /containerLogs (the kubelet's port)")
    parser.add_argument("--tls-cert-file", type=Path)
    parser.add_argument("--tls-private-key-file", type=Path)
    parser.add_argument("--client-ca-file", type=Path)
    args = parser.parse_args(argv)
    if args.port and not (args.tls_cert_file and args.tls_private_key_file and args.client_ca_file):
        parser.error("--port needs --tls-cert-file, --tls-private-key-file and --client-ca-file")
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    with tempfile.TemporaryDirectory(prefix="xmc-nodeagent-") as tmp:
        server, ctx = load_kubeconfig(args.kubeconfig, Path(tmp))
        api = Api(server, ctx)
        agent = Agent(
            api,
            args.start_seconds,
            args.run_seconds,
            workers=args.workers,
            ready_file=args.ready_file,
        )
        runner = None
        if args.port:
            pods = Pods(agent.running_pod, agent.log_scripts, agent.changes)
            ctx = serving_context(
                args.tls_cert_file, args.tls_private_key_file, args.client_ca_file
            )
            authorizer = Authorizer(agent.subject_access_review)
            runner = await serve(pods, authorizer, args.address, args.port, ctx)
            log.info("kubelet endpoint: https://%s:%s/containerLogs/", args.address, args.port)
        task = asyncio.ensure_future(agent.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        log.info(
            "node agent: %s (by default pods start after %ss, run %ss)",
            server,
            args.start_seconds,
            args.run_seconds,
        )
        try:
            await task
        except asyncio.CancelledError:
            log.info("node agent: stopped")
        finally:
            if runner is not None:
                await runner.cleanup()
            await api.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
