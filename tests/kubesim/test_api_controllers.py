"""The whole simulated cluster over HTTP: defaults installed, and a JobSet created through
kubernetes-asyncio is admitted by Kueue, runs its pods and completes, all seen through a
watch — the path the Actuator and Reconciler take."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import CoreV1Api, CustomObjectsApi
from kubernetes_asyncio.watch import Watch

from tests.kubesim.support import JOBSET_API, MakeKubeSim, client_for

G, V = JOBSET_API

pytest.importorskip("kubesim.controllers", reason="the simulated controllers are not built")

from tests.kubesim.controller_support import condition_is, make_jobset  # noqa: E402


async def test_a_jobset_created_over_http_runs_to_completion(make_kubesim: MakeKubeSim) -> None:
    sim = await make_kubesim(controllers=True, time_scale=100.0)
    body: dict[str, Any] = {"apiVersion": f"{G}/{V}", "kind": "JobSet", **make_jobset("train")}
    async with client_for(sim) as api, Watch() as watch:
        custom = CustomObjectsApi(api)
        queues = await custom.list_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", "default", "localqueues"
        )
        assert "cpu-queue" in {q["metadata"]["name"] for q in queues["items"]}

        await custom.create_namespaced_custom_object(G, V, "default", "jobsets", body)
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            G,
            V,
            "default",
            "jobsets",
            field_selector="metadata.name=train",
        )
        async with asyncio.timeout(10):
            async for event in stream:
                if condition_is(event["raw_object"], "Completed"):
                    break

        pods = await CoreV1Api(api).list_namespaced_pod(
            "default", label_selector="jobset.sigs.k8s.io/jobset-name=train"
        )
    assert pods.items
    assert {pod.status.phase for pod in pods.items} == {"Succeeded"}
