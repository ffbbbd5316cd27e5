"""The real loopback cluster of ``make cluster`` as a target of ``bench/e2e_sweep.py``.

What the sweep needs of it beyond what ``tests.stack.RealCluster`` gives the services:

- the control plane's processes (``.cluster/pids/``), for CPU seconds per process;
- an admin client (``.cluster/kubeconfig``, cluster-admin) for the watches, the raw
  baseline and the clean-up;
- :func:`purge`: between sizes the namespace is emptied as admin — XMC's finalizer
  removed from every JobSet (the services are stopped by then, so no Reconciler releases
  them), Kueue's from every Workload, then a delete-collection of JobSets, Jobs, pods and
  Workloads — rather than through the garbage collector, whose client (the
  controller-manager's, 20 requests/s) would take minutes over 2,000 units' objects;
- the API server's own counters (``/metrics``): requests answered 429 and requests its
  priority-and-fairness rejected, to tell server-side throttling from client-side;
- the components' logs: client-go logs "Waited for ... due to client-side throttling"
  at the default verbosity once a request waited over a second (at most every 5 s).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio import config
from kubernetes_asyncio.client import Configuration

from tests.stack import RealCluster
from xmc import labels
from xmc.kube import JOBSETS, LEASES, PODS, WORKLOADS, KubeError, KubeFailure, Resource
from xmc.kube_client import KubeClient

ROOT: Final = Path(__file__).resolve().parent.parent
CLUSTER: Final = Path(os.environ.get("XMC_TEST_CLUSTER_DIR") or ROOT / ".cluster")
ADMIN: Final = CLUSTER / "kubeconfig"
#: k8s/base's namespace, where the services' Roles grant them JobSets.
NAMESPACE: Final = "xmc"
JOBS: Final = Resource("batch", "v1", "jobs")
LEASE: Final = "xmc-reconciler"


def real_cluster() -> RealCluster:
    """How the services reach the cluster: as k8s/base's ServiceAccounts."""
    kubeconfigs = {s: CLUSTER / "xmc" / f"{s}.kubeconfig" for s in ("actuator", "reconciler")}
    missing = [str(p) for p in [ADMIN, *kubeconfigs.values()] if not p.is_file()]
    if missing:
        raise SystemExit(
            f"no real cluster ({', '.join(missing)} missing): `make cluster` then "
            "`.venv/bin/python tools/cluster/xmc_setup.py setup` (XMC_CLUSTER_NODES=20 for "
            "N=2000: 4 nodes hold 440 pods)"
        )
    return RealCluster(NAMESPACE, kubeconfigs)


async def admin_client() -> KubeClient:
    configuration = Configuration()
    await config.load_kube_config(config_file=str(ADMIN), client_configuration=configuration)
    return await KubeClient.for_configuration(configuration)


def control_plane_pids() -> dict[str, int]:
    """Each running component of the cluster (etcd, kube-apiserver, ..., nodeagent)."""
    pids = {}
    for pid_file in sorted((CLUSTER / "pids").glob("*.pid")):
        try:
            pids[pid_file.stem] = int(pid_file.read_text())
        except (OSError, ValueError):
            continue
    return pids


async def in_parallel(count: int, width: int, make: Callable[[int], Awaitable[None]]) -> None:
    queue = iter(range(count))

    async def worker() -> None:
        for i in queue:
            await make(i)

    await asyncio.gather(*(worker() for _ in range(width)))


#: The Jobs and pods of the sweep's JobSets (JobSet labels both): the namespace also holds
#: the pods of k8s/base's Deployments, which ``xmc_setup.py`` applies and which stay.
_SWEEPS: Final = "jobset.sigs.k8s.io/jobset-name"
_OWNED: Final = (JOBS, PODS)


async def purge(kube: KubeClient, namespace: str = NAMESPACE, within: float = 600.0) -> float:
    """Empty the namespace of the sweep's objects (and the Reconciler's Lease); returns
    the seconds it took. Raises if something is still there after ``within``."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    for resource in (JOBSETS, WORKLOADS):
        items = (await kube.list_page(resource, namespace))["items"]
        held = [i["metadata"]["name"] for i in items if i["metadata"].get("finalizers")]

        async def release(i: int, resource: Resource = resource, held: list[str] = held) -> None:
            try:
                await kube.patch(resource, namespace, held[i], {"metadata": {"finalizers": None}})
            except KubeError as error:
                if error.failure is not KubeFailure.NOT_FOUND:
                    raise

        await in_parallel(len(held), 16, release)
    options = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
               "propagationPolicy": "Background"}  # fmt: skip
    for resource in (JOBSETS, JOBS, PODS, WORKLOADS):
        try:  # the server goes on deleting after a timeout: the loop below waits
            path = resource.collection(namespace)
            query = [("labelSelector", _SWEEPS)] if resource in _OWNED else []
            await kube.request("DELETE", path, query=query, body=options, request_timeout=within)
        except KubeError as error:
            if error.failure is not KubeFailure.NO_RESPONSE:
                raise
    try:
        await kube.delete(LEASES, namespace, LEASE)
    except KubeError as error:
        if error.failure is not KubeFailure.NOT_FOUND:
            raise
    while True:
        left = {r.plural: len((await kube.list_page(
                    r, namespace, limit=500, label_selector=_SWEEPS if r in _OWNED else None
                ))["items"]) for r in (JOBSETS, JOBS, PODS, WORKLOADS)}  # fmt: skip
        if not any(left.values()):
            return loop.time() - began
        if loop.time() - began > within:
            raise RuntimeError(f"namespace {namespace} not empty after {within:.0f} s: {left}")
        if left[WORKLOADS.plural]:  # Kueue may re-add its finalizer on one in flight
            await purge_finalizers(kube, WORKLOADS, namespace)
        await asyncio.sleep(1.0)  # the API server deletes in the background: look again


async def purge_finalizers(kube: KubeClient, resource: Resource, namespace: str) -> None:
    for item in (await kube.list_page(resource, namespace))["items"]:
        if item["metadata"].get("finalizers"):
            try:
                await kube.patch(
                    resource,
                    namespace,
                    item["metadata"]["name"],
                    {"metadata": {"finalizers": None}},
                )
            except KubeError as error:
                if error.failure is not KubeFailure.NOT_FOUND:
                    raise


LABEL: Final = re.compile(r'(\w+)="([^"]*)"')


def apiserver_counters() -> dict[str, float]:
    """The API server's request counters so far (``kubectl get --raw /metrics`` as
    admin): ``429`` (answered Too Many Requests), ``apf_rejected`` (rejected by priority
    and fairness) and, per ``VERB resource[/subresource]``, the requests that changed
    something (POST, PUT, PATCH, DELETE): what the sweep cost the server, by kind."""
    text = subprocess.run(
        ["kubectl", f"--kubeconfig={ADMIN}", "get", "--raw", "/metrics"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    counters = {"429": 0.0, "apf_rejected": 0.0}
    for line in text.splitlines():
        if line.startswith("apiserver_flowcontrol_rejected_requests_total{"):
            counters["apf_rejected"] += float(line.rsplit(" ", 1)[1])
        if not line.startswith("apiserver_request_total{"):
            continue
        tags = dict(LABEL.findall(line))
        value = float(line.rsplit(" ", 1)[1])
        if tags.get("code") == "429":
            counters["429"] += value
        if tags.get("verb") in ("POST", "PUT", "PATCH", "DELETE") and tags.get("resource"):
            sub = f"/{tags['subresource']}" if tags.get("subresource") else ""
            key = f"{tags['verb']} {tags['resource']}{sub}"
            counters[key] = counters.get(key, 0.0) + value
    return counters


def writes_since(before: dict[str, float], size: int) -> str:
    """The writes since ``before`` per unit, most frequent first."""
    now = apiserver_counters()
    deltas = {k: v - before.get(k, 0.0) for k, v in now.items() if " " in k}
    busy = sorted(((v, k) for k, v in deltas.items() if v > 0), reverse=True)
    total = sum(v for v, _ in busy)
    return f"apiserver writes {total / size:.1f}/unit: " + ", ".join(
        f"{k} {v / size:.1f}" for v, k in busy[:10]
    )


THROTTLED: Final = re.compile(r"Waited for ([0-9.]+)(m?s) due to client-side throttling")


def log_sizes() -> dict[str, int]:
    return {p.stem: p.stat().st_size for p in (CLUSTER / "logs").glob("*.log")}


def throttling_since(sizes: dict[str, int]) -> dict[str, tuple[int, float]]:
    """Per component, the client-side throttling lines logged since ``sizes`` (byte
    offsets of :func:`log_sizes`): how many, and the longest wait they name (seconds)."""
    found: dict[str, tuple[int, float]] = {}
    for path in (CLUSTER / "logs").glob("*.log"):
        with path.open("rb") as log:
            log.seek(sizes.get(path.stem, 0))
            waits = [
                float(m.group(1)) / (1000 if m.group(2) == "ms" else 1)
                for m in THROTTLED.finditer(log.read().decode(errors="replace"))
            ]
        if waits:
            found[path.stem] = (len(waits), max(waits))
    return found


def server_notes(counters: dict[str, float], sizes: dict[str, int], size: int) -> list[str]:
    """Since ``counters`` and ``sizes``: what the API server refused, which components
    logged client-side throttling, and the writes per unit."""
    writes = writes_since(counters, size)
    now = apiserver_counters()
    notes = [
        f"apiserver: {now['429'] - counters['429']:.0f} requests answered 429, "
        f"{now['apf_rejected'] - counters['apf_rejected']:.0f} rejected by priority and fairness"
    ]
    throttled = throttling_since(sizes)
    notes.append(
        "client-side throttling logged: "
        + (", ".join(f"{c} ×{n} (longest {w:.1f} s)" for c, (n, w) in throttled.items()) or "none")
    )
    return [*notes, writes]


def raw_jobset(name: str, queue: str = "cpu-queue") -> dict[str, Any]:
    """One replicated job, one pod, ``queue``: what a minimal work unit asks of the
    cluster, created straight into the API server (the raw baseline)."""
    container = {"name": "main", "image": "python:3.11", "command": ["python", "-c", "1"]}
    template = {"spec": {"containers": [container], "restartPolicy": "Never"}}
    job = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {labels.QUEUE_NAME: queue}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{"name": "main", "replicas": 1, "template": {"spec": job}}],
        },
    }
