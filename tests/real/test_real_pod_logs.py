"""``kubectl logs`` on the real control plane: kube-apiserver proxies ``pods/log`` to the
kubelet endpoint the node agent serves for the fake Nodes (docs/cluster.md, "Container
logs"), which prints what the pod's ``kubesim.xmc/behavior`` says."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.real.support import POLL, kubectl
from tests.waiting import eventually
from xmc.kube import PODS, KubeError, KubeFailure
from xmc.kube_client import KubeClient

Obj = dict[str, Any]
#: Not XMC's namespace: these pods are nobody's work unit.
NAMESPACE = "default"
LINES = ["loading data", "step 1 loss=0.9", "step 2 loss=0.5"]


@pytest.fixture
async def pods(admin: KubeClient) -> AsyncIterator[list[str]]:
    """Names of the pods a test makes; deleted afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            await admin.request(
                "DELETE",
                f"/api/v1/namespaces/{NAMESPACE}/pods/{name}",
                query=[("gracePeriodSeconds", "0")],
            )
        except KubeError as error:
            if error.failure is not KubeFailure.NOT_FOUND:
                raise


async def _create(admin: KubeClient, pods: list[str], behavior: Obj) -> str:
    name = f"logs-{uuid.uuid4().hex[:8]}"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": {"kubesim.xmc/behavior": json.dumps(behavior)}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "1"]}],
        },
    }
    await admin.request("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", body=pod)
    pods.append(name)
    return name


async def _phase(admin: KubeClient, name: str) -> str:
    pod = await admin.get(PODS, NAMESPACE, name)
    return str(((pod or {}).get("status") or {}).get("phase", ""))


async def test_kubectl_logs_prints_the_lines_of_the_behaviour(
    admin: KubeClient, pods: list[str]
) -> None:
    name = await _create(admin, pods, {"logs": LINES, "run_seconds": 4})
    await eventually(lambda: _phase(admin, name), "Succeeded", within=60, every=POLL)
    out, _ = await kubectl("logs", name, "-n", NAMESPACE)
    assert out.splitlines() == LINES
    out, _ = await kubectl("logs", name, "-n", NAMESPACE, "--tail=1")
    assert out == f"{LINES[-1]}\n"


async def test_a_failing_containers_log_ends_with_its_failure_followed_or_not(
    admin: KubeClient, pods: list[str]
) -> None:
    """``kubectl logs -f`` started while the container runs returns when it fails, with
    the failure text last; a plain ``kubectl logs`` afterwards reads the same."""
    failure = "CUDA error: out of memory"
    behavior = {"logs": LINES, "run_seconds": 6, "exit_code": 3, "message": failure}
    name = await _create(admin, pods, behavior)
    await eventually(lambda: _phase(admin, name), "Running", within=60, every=POLL)
    followed, _ = await kubectl("logs", "-f", name, "-n", NAMESPACE)
    assert followed.splitlines() == [*LINES, failure]
    assert await _phase(admin, name) == "Failed"
    out, _ = await kubectl("logs", name, "-n", NAMESPACE)
    assert out == followed
