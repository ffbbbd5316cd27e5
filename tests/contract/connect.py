"""A contract test's cluster: an embedded kubesim with its controllers by default, or the
real cluster of ``KUBECONFIG`` when that is set (docs/testing.md, "Contract suite").

On a real cluster every test gets a fresh namespace ``xmc-contract-<random>`` with the
LocalQueue ``xmc-contract``; JobSet, Kueue and ``tests.contract.setup``'s objects must be
installed, else every test is skipped saying what is missing. The namespace is deleted
afterwards (XMC's finalizers removed first, so nothing hangs).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration

from kubesim.server import KubeSim
from tests.contract.cluster import FINALIZER, Cluster
from tests.contract.setup import CLUSTER_QUEUE, cluster_objects, local_queue
from xmc.kube import JOBSETS, KubeError, KubeFailure, api_client, load_configuration
from xmc.kube_client import KubeClient
from xmc.settings import Settings

KUBESIM_TIME_SCALE = 20.0
"""Cluster seconds per real second on kubesim: a 30 s pod termination takes 1.5 s."""


def _path(obj: dict[str, object]) -> str:
    api_version = str(obj["apiVersion"])
    plural = f"{str(obj['kind']).lower()}s".replace("classs", "classes")
    base = f"/apis/{api_version}" if "/" in api_version else f"/api/{api_version}"
    meta = obj["metadata"]
    assert isinstance(meta, dict)
    namespace = meta.get("namespace")
    scoped = f"{base}/namespaces/{namespace}" if namespace else base
    return f"{scoped}/{plural}"


async def _create(kube: KubeClient, obj: dict[str, object]) -> None:
    try:
        await kube.request("POST", _path(obj), body=obj)
    except KubeError as error:
        if error.failure is not KubeFailure.ALREADY_EXISTS:
            raise


async def _missing_on(kube: KubeClient) -> str | None:
    """What the real cluster lacks for the suite, or None."""
    checks = [
        ("/apis/jobset.x-k8s.io/v1alpha2", "JobSet (jobset.x-k8s.io/v1alpha2) is not installed"),
        ("/apis/kueue.x-k8s.io/v1beta2", "Kueue (kueue.x-k8s.io/v1beta2) is not installed"),
        (
            f"/apis/kueue.x-k8s.io/v1beta2/clusterqueues/{CLUSTER_QUEUE}",
            f"ClusterQueue {CLUSTER_QUEUE} is missing: "
            "`python -m tests.contract.setup | kubectl apply -f -`",
        ),
    ]
    for path, reason in checks:
        try:
            await kube.request("GET", path)
        except KubeError as error:
            if error.failure is KubeFailure.NOT_FOUND:
                return reason
            raise
    return None


@contextlib.asynccontextmanager
async def connect(*, real: bool) -> AsyncIterator[Cluster]:
    """A :class:`Cluster` with a fresh namespace and its LocalQueue: an embedded kubesim
    with its controllers, or the real cluster of ``KUBECONFIG`` (skipped, saying what is
    missing, when that cluster lacks JobSet, Kueue or the suite's objects)."""
    namespace = f"xmc-contract-{uuid.uuid4().hex[:8]}"
    sim: KubeSim | None = None
    if real:
        configuration = await load_configuration(Settings())
        scale = 1.0
    else:
        sim = KubeSim(controllers=True, time_scale=KUBESIM_TIME_SCALE)
        configuration = Configuration(host=await sim.start())
        scale = KUBESIM_TIME_SCALE
    api: ApiClient = await api_client(configuration)
    kube = KubeClient(api)
    try:
        if real:
            missing = await _missing_on(kube)
            if missing:
                why = f"the contract suite's cluster is not ready: {missing}"
                if os.environ.get("CI") == "true":
                    pytest.fail(why)  # CI built and started the cluster: never skip silently
                pytest.skip(why)
        else:
            for obj in cluster_objects():
                await _create(kube, obj)
        await _create(
            kube, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        await _create(kube, local_queue(namespace))
        yield Cluster(api=api, kube=kube, namespace=namespace, scale=scale, sim=sim)
    finally:
        if real:
            await _clean_up(kube, namespace)
        await kube.close()
        if sim is not None:
            await sim.stop()


NAMESPACE_GONE_SECONDS = 180.0
"""How long a test's namespace may take to go on a real cluster: the namespace controller
deletes its objects, and their Workloads hold the ClusterQueue's quota until then."""


async def _clean_up(kube: KubeClient, namespace: str) -> None:
    """Delete the test's namespace and wait until it is gone: the suite's ClusterQueue has
    room for one work unit, so a namespace still terminating (pods in their grace period,
    their Workload still admitted) would hold the next test's JobSets in the queue.

    The pods are then deleted with ``gracePeriodSeconds=0`` (``kubectl delete --force``):
    what they do in their 30 s grace period was the test's to check, not the clean-up's,
    and waiting it out cost every test on a real cluster ~30 s. A terminating namespace
    admits no new pod, so none replaces them."""
    try:
        page = await kube.list_page(JOBSETS, namespace)
        for jobset in page["items"]:
            finalizers = [f for f in jobset["metadata"].get("finalizers", []) if f != FINALIZER]
            name = jobset["metadata"]["name"]
            await kube.patch(JOBSETS, namespace, name, {"metadata": {"finalizers": finalizers}})
        await kube.request("DELETE", f"/api/v1/namespaces/{namespace}")
        await kube.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods",
            query=[("gracePeriodSeconds", "0")],
        )
        deadline = time.monotonic() + NAMESPACE_GONE_SECONDS
        while time.monotonic() < deadline:
            await kube.request("GET", f"/api/v1/namespaces/{namespace}")
            await asyncio.sleep(0.5)
        raise AssertionError(f"namespace {namespace} not gone after {NAMESPACE_GONE_SECONDS} s")
    except KubeError as error:
        if error.failure is not KubeFailure.NOT_FOUND:
            raise
