"""The queue on the real control plane: Kueue's waiting reason and, through Kueue's
visibility API (served by ``make cluster`` through the API server's aggregation layer,
docs/cluster.md), each waiting unit's position; and, with that API gone, no position and
no errors (SPEC §8.2: a position is informational)."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.processes import Client
from tests.integration.support import forever_work_unit
from tests.real.support import NAMESPACE, POLL, jobset_name
from tests.stack import Stack
from tests.waiting import eventually
from xmc.kube import KubeError, KubeFailure
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage

S = WorkUnitState
KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta1"
APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
VISIBILITY_APISERVICES = ("v1beta1.visibility.kueue.x-k8s.io", "v1beta2.visibility.kueue.x-k8s.io")
#: 100 CPUs: more than cluster-queue's 64, so the unit waits with Kueue's reason.
TOO_BIG = 100_000


async def test_units_that_do_not_fit_show_kueues_reason_and_their_positions(
    admin: KubeClient, client: Client
) -> None:
    """Two units of 100 CPUs on cluster-queue's 64 wait (QuotaReserved=False): each is
    SCHEDULING with Kueue's own message as its scheduling information, and the second
    one's position is what Kueue's visibility API says, read by the Reconciler as
    k8s/base's ServiceAccount (RBAC checked by Kueue's server through the API server):
    ``positionInClusterQueue + 1`` of the queue's pending workloads."""
    assert await _served(admin, VISIBILITY), (
        "Kueue's visibility API is not served: `make cluster` serves it unless this host "
        "has no global IPv4 address or XMC_CLUSTER_VISIBILITY=off (docs/cluster.md)"
    )
    experiment = await client.experiment()
    first = await client.create(experiment, forever_work_unit(TOO_BIG))
    await eventually(lambda: client.state(first), S.SCHEDULING, within=90, every=POLL)
    second = await client.create(experiment, forever_work_unit(TOO_BIG))
    await eventually(lambda: client.state(second), S.SCHEDULING, within=90, every=POLL)

    workloads = {n: (await _workload_of(admin, jobset_name(n)))["metadata"]["name"]
                 for n in (first, second)}  # fmt: skip

    async def both_pending() -> set[str]:
        return set(await _kueue_positions(admin, "cpu-queue"))

    await eventually(both_pending, set(workloads.values()), within=60, every=POLL)
    kueue_says = await _kueue_positions(admin, "cpu-queue")  # Kueue's order, not ours to pick
    assert sorted(kueue_says.values()) == [0, 1], kueue_says
    for name, workload in workloads.items():
        want = (kueue_says[workload] + 1, 2)
        probe = functools.partial(_queue_info, client, name)
        await eventually(probe, want, within=60, every=POLL)

    for name in (first, second):
        workload = await _workload_of(admin, jobset_name(name))
        reserved = next(c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")
        assert reserved["status"] == "False"
        assert "insufficient quota for cpu" in reserved["message"], reserved
        info = await _scheduling_information(client, name)
        assert (info.severity, info.source) == (StructuredMessage.INFO, StructuredMessage.SCHEDULER)
        assert info.user_facing_text == reserved["message"]


@pytest.fixture
async def without_visibility(admin: KubeClient) -> AsyncIterator[None]:
    """Kueue's visibility API taken away (its APIServices deleted) for one test, and put
    back after it: what a cluster without it looks like to XMC (the API server's 404)."""
    saved = [await admin.request("GET", f"{APISERVICES}/{name}") for name in VISIBILITY_APISERVICES]
    for name in VISIBILITY_APISERVICES:
        await admin.request("DELETE", f"{APISERVICES}/{name}")
    await eventually(lambda: _served(admin, VISIBILITY), False, within=60, every=POLL)
    try:
        yield
    finally:
        for apiservice in saved:
            await admin.request("POST", APISERVICES, body=_recreatable(apiservice))
        await eventually(lambda: _served(admin, VISIBILITY), True, within=60, every=POLL)


@pytest.mark.usefixtures("without_visibility")
async def test_without_the_visibility_api_a_waiting_unit_has_no_position_and_no_errors(
    admin: KubeClient, client: Client, stack: Stack
) -> None:
    """With the visibility API not served, the waiting unit still shows Kueue's reason;
    its position is unknown (0 of 0), the unit is unaffected, and the Reconciler says so
    in one warning naming the queue (the API server's 404), nothing else above info: no
    error, no traceback, no warning per event."""
    name = await client.create(await client.experiment(), forever_work_unit(TOO_BIG))
    await eventually(lambda: client.state(name), S.SCHEDULING, within=90, every=POLL)

    async def text() -> str:
        return str((await _scheduling_information(client, name)).user_facing_text)

    await eventually(lambda: _nonempty(text), True, within=60, every=POLL)
    workload = await _workload_of(admin, jobset_name(name))
    reserved = next(c for c in workload["status"]["conditions"] if c["type"] == "QuotaReserved")
    assert reserved["status"] == "False"
    assert await text() == reserved["message"]
    assert await _queue_info(client, name) == (0, 0)

    entries = _log_entries(stack.log_dir / "reconciler.log")
    loud = [
        entry
        for entry in entries
        if entry.get("level") not in ("debug", "info") or "Traceback" in json.dumps(entry)
    ]
    assert [(e["level"], e.get("queue")) for e in loud] == [("warning", "cpu-queue")], loud
    assert loud[0]["event"].startswith("queue positions unavailable"), loud
    assert loud[0]["error"].startswith("404"), loud  # the group is not served


# --- helpers -------------------------------------------------------------------------------


async def _scheduling_information(client: Client, name: str) -> StructuredMessage:
    got = await client.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
    info: StructuredMessage = got.current_work_unit_execution.status.scheduling_information
    return info


async def _queue_info(client: Client, name: str) -> tuple[int, int]:
    queue = (await _scheduling_information(client, name)).auxiliary_info.queue_info
    return queue.position_in_queue, queue.total_workloads_in_queue


async def _nonempty(probe: Any) -> bool:
    return bool(await probe())


async def _kueue_positions(admin: KubeClient, queue: str) -> dict[str, int]:
    """Kueue's own answer: pending Workload name → 0-based position in the ClusterQueue."""
    summary = await admin.request(
        "GET", f"{VISIBILITY}/namespaces/{NAMESPACE}/localqueues/{queue}/pendingworkloads"
    )
    return {i["metadata"]["name"]: i["positionInClusterQueue"] for i in summary["items"]}


async def _workload_of(admin: KubeClient, jobset: str) -> dict[str, Any]:
    listed = await admin.request("GET", f"{KUEUE}/namespaces/{NAMESPACE}/workloads")
    for workload in listed["items"]:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o.get("kind") == "JobSet" and o.get("name") == jobset for o in owners):
            found: dict[str, Any] = workload
            return found
    raise AssertionError(f"no Workload owned by JobSet {jobset}")


async def _served(admin: KubeClient, path: str) -> bool:
    """Whether the API server serves ``path``: not while the group is unknown (404), nor
    while its APIService is registered but not yet available (503)."""
    try:
        await admin.request("GET", path)
    except KubeError as error:
        if error.failure is KubeFailure.NOT_FOUND or error.status == 503:
            return False
        raise
    return True


def _recreatable(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as it can be created again: no status, server-set metadata dropped."""
    meta = {k: v for k, v in obj["metadata"].items() if k in ("name", "labels", "annotations")}
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": meta,
            "spec": obj["spec"]}  # fmt: skip


def _log_entries(path: Path) -> list[dict[str, Any]]:
    entries = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = {"level": "unparsed", "line": line}
        if isinstance(entry, dict):
            entries.append(entry)
    return entries
