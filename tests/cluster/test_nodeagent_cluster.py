"""The node agent on the real loopback cluster (``make cluster``): pods bound to the fake
Nodes by the real scheduler follow their ``kubesim.xmc/behavior`` annotation, and a
deleted pod stays Terminating for its grace period, then is gone.

Runs when ``XMC_REAL_CLUSTER_KUBECONFIG`` names the cluster's kubeconfig
(``.cluster/kubeconfig``); skipped otherwise, except under ``CI=true``, where a missing
cluster fails the test (CI starts one)."""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nodeagent
import pytest

from tests.waiting import eventually

#: Only under `make test-cluster` (tools/cluster/test_cluster.sh sets the kubeconfig).
pytestmark = pytest.mark.real_cluster
KUBECONFIG_ENV = "XMC_REAL_CLUSTER_KUBECONFIG"
Obj = dict[str, Any]
GRACE_SECONDS = 6


@pytest.fixture
async def api() -> AsyncIterator[nodeagent.Api]:
    path = os.environ.get(KUBECONFIG_ENV)
    if not path:
        message = f"{KUBECONFIG_ENV} is not set (make cluster; see docs/cluster.md)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs the real cluster: {message}")
        pytest.skip(message)
    with tempfile.TemporaryDirectory() as tmp:
        server, ctx = nodeagent.load_kubeconfig(Path(path), Path(tmp))
        client = nodeagent.Api(server, ctx)
        try:
            yield client
        finally:
            await client.close()


def _pod(namespace: str, name: str, behavior: Obj) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "annotations": {"kubesim.xmc/behavior": json.dumps(behavior)},
        },
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": GRACE_SECONDS,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "command": ["sleep", "3600"],
                    "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                                  "limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }  # fmt: skip


def _state(pod: Obj) -> tuple[str, Obj]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    state = statuses[0].get("state") or {}
    kind = next(iter(state), "")
    return kind, state.get(kind) or {}


async def test_pods_on_the_fake_nodes_follow_their_behaviour(api: nodeagent.Api) -> None:
    namespace = f"nodeagent-{uuid.uuid4().hex[:8]}"
    await api.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    behaviors: dict[str, Obj] = {
        "forever": {"run_seconds": None},
        "exit-0": {"run_seconds": 2},
        "exit-3": {"run_seconds": 1, "exit_code": 3},
        "oom": {"oom_killed": True, "run_seconds": 1},
        "pull": {"image_pull_error": True},
    }
    try:
        for name, behavior in behaviors.items():
            await api.request("POST", pods, _pod(namespace, name, behavior))

        async def phase_of(name: str, phase: str) -> Obj | None:
            pod = await api.request("GET", f"{pods}/{name}")
            return pod if (pod.get("status") or {}).get("phase") == phase else None

        forever = await eventually(
            lambda: phase_of("forever", "Running"), within=20, what="forever Running", every=0.2
        )
        status = forever["status"]
        assert status["hostIP"] == "127.0.0.1"
        assert status["podIP"].startswith("10.")
        assert forever["spec"]["nodeName"].startswith("kwok-node-")
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
            assert conditions[kind] == "True", kind
        kind, running = _state(forever)
        assert kind == "running"
        assert running["startedAt"]
        assert status["containerStatuses"][0]["restartCount"] == 0

        expected = {
            "exit-0": ("Succeeded", 0, "Completed"),
            "exit-3": ("Failed", 3, "Error"),
            "oom": ("Failed", 137, "OOMKilled"),
        }
        for name, (phase, code, reason) in expected.items():

            async def finished(name: str = name, phase: str = phase) -> Obj | None:
                return await phase_of(name, phase)

            pod = await eventually(finished, within=20, what=f"{name} {phase}", every=0.2)
            kind, terminated = _state(pod)
            assert kind == "terminated", name
            assert (terminated["exitCode"], terminated["reason"]) == (code, reason), name
            assert terminated["startedAt"] <= terminated["finishedAt"], name

        pull = await api.request("GET", f"{pods}/pull")
        assert pull["status"]["phase"] == "Pending"
        kind, waiting = _state(pull)
        assert (kind, waiting["reason"]) in {
            ("waiting", "ErrImagePull"),
            ("waiting", "ImagePullBackOff"),
        }
        # forever still runs after the others finished
        assert await phase_of("forever", "Running") is not None

        # deleted: Terminating (still running) for its grace period, then gone
        deleted = time.monotonic()
        await api.request("DELETE", f"{pods}/forever")
        await asyncio.sleep(GRACE_SECONDS / 2)
        terminating = await api.request("GET", f"{pods}/forever")
        assert terminating["metadata"]["deletionTimestamp"]
        assert terminating["metadata"]["deletionGracePeriodSeconds"] == GRACE_SECONDS
        assert _state(terminating)[0] == "running"

        async def gone() -> bool | None:
            try:
                await api.request("GET", f"{pods}/forever")
            except nodeagent.ApiError as error:
                if error.status == 404:
                    return True
                raise
            return None

        await eventually(gone, within=GRACE_SECONDS + 10, what="the deleted pod is gone", every=0.2)
        took = time.monotonic() - deleted
        assert took >= GRACE_SECONDS - 1.5, f"gone after {took:.1f} s, before its grace period"
    finally:
        await api.request("DELETE", f"/api/v1/namespaces/{namespace}")
