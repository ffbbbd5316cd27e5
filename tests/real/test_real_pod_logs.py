"""``kubectl logs`` on the real control plane: kube-apiserver proxies ``pods/log`` to the
kubelet endpoint the node agent serves for the fake Nodes (docs/cluster.md, "Container
logs"), which prints what the pod's ``kubesim.xmc/behavior`` says."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import yaml

from tests.real.support import ADMIN_KUBECONFIG, CLUSTER_DIR, POLL, kubectl
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


@pytest.fixture
async def readers() -> AsyncIterator[dict[str, str]]:
    """Two ServiceAccounts, by what they may ``get``: ``pods`` and ``pods/log`` (what XMC's
    log readers are granted), or ``pods`` only; their bearer tokens."""
    suffix = uuid.uuid4().hex[:6]
    grants = {"pods,pods/log": f"logs-{suffix}", "pods": f"nologs-{suffix}"}
    tokens = {}
    for resources, name in grants.items():
        await kubectl("create", "serviceaccount", name, "-n", NAMESPACE)
        await kubectl("create", "role", name, "--verb=get", f"--resource={resources}",
                      "-n", NAMESPACE)  # fmt: skip
        await kubectl("create", "rolebinding", name, f"--role={name}",
                      f"--serviceaccount={NAMESPACE}:{name}", "-n", NAMESPACE)  # fmt: skip
        tokens[resources], _ = await kubectl("create", "token", name, "-n", NAMESPACE)
    try:
        yield {resources: token.strip() for resources, token in tokens.items()}
    finally:
        for name in grants.values():
            await kubectl("delete", f"rolebinding/{name}", f"role/{name}",
                          f"serviceaccount/{name}", "-n", NAMESPACE)  # fmt: skip


async def _kubectl_as(token: str, *args: str) -> tuple[int, str, str]:
    """``kubectl`` with a bearer token and nothing else of the admin's kubeconfig."""
    server = yaml.safe_load(ADMIN_KUBECONFIG.read_text())["clusters"][0]["cluster"]["server"]
    process = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig=/dev/null", f"--server={server}",
        f"--certificate-authority={CLUSTER_DIR / 'pki' / 'ca.crt'}", f"--token={token}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return process.returncode or 0, out.decode(), err.decode()


async def test_reading_a_log_takes_get_on_pods_log_and_nothing_on_the_node(
    admin: KubeClient, pods: list[str], readers: dict[str, str]
) -> None:
    """A ServiceAccount reads a log with ``get`` on ``pods/log`` alone (what k8s/base
    grants XMC's readers): kube-apiserver reaches the kubelet as itself
    (``--kubelet-client-certificate``), so no one needs ``nodes/proxy``. Without
    ``pods/log`` the API server refuses, naming the subresource."""
    name = await _create(admin, pods, {"logs": LINES, "run_seconds": 4})
    await eventually(lambda: _phase(admin, name), "Succeeded", within=60, every=POLL)
    code, out, err = await _kubectl_as(readers["pods,pods/log"], "logs", name, "-n", NAMESPACE)
    assert (code, out.splitlines()) == (0, LINES), err
    code, out, err = await _kubectl_as(readers["pods"], "logs", name, "-n", NAMESPACE)
    assert code != 0
    assert 'cannot get resource "pods/log"' in err, err
