"""Container logs on the real control plane (issue 27): XMC's processes as k8s/base's
ServiceAccounts. A unit that prints and fails has its output kept by the Reconciler (as
xmc-reconciler, ``get pods/log``) and served by the ESS after its JobSet and pods are gone;
a running unit's lines are followed live by the ESS (as xmc-ess, read-only) through the
API server, which proxies to the node agent's kubelet endpoint (docs/cluster.md)."""

from __future__ import annotations

from tests.integration.processes import Client
from tests.integration.support import behaving_unit
from tests.real.support import POLL
from tests.waiting import eventually
from xmc.kube import JOBSETS
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc_api.xmc.v1 import logs_pb2, logs_pb2_grpc

S = WorkUnitState
LINES = ["loading data", "<b>step 1</b> loss=0.9", "step 2 loss=0.5"]


async def read(client: Client, name: str, *, follow: bool = False) -> list[logs_pb2.LogChunk]:
    stub = logs_pb2_grpc.LogServiceStub(client.channel)
    request = logs_pb2.ReadWorkUnitLogsRequest(name=name, follow=follow)
    return [chunk async for chunk in stub.ReadWorkUnitLogs(request)]


async def test_a_failed_units_output_outlives_its_jobset(admin: KubeClient, client: Client) -> None:
    behavior = {"logs": LINES, "log_every_seconds": 0.5, "run_seconds": 3, "exit_code": 2,
                "message": "RuntimeError: diverged"}  # fmt: skip
    name = await client.create(await client.experiment(), behaving_unit(behavior))
    await eventually(lambda: client.state(name), S.FAILED, within=90, every=POLL)
    xid, wid = name.split("/")[1::2]

    async def jobset_gone() -> bool:
        return await admin.get(JOBSETS, "xmc", f"xmc-{xid}-{wid}") is None

    await eventually(jobset_gone, True, within=90, every=POLL)
    chunks = await read(client, name)
    assert chunks[0].log.source == logs_pb2.ContainerLog.STORED
    assert chunks[0].log.exit_code == 2
    text = b"".join(c.data for c in chunks).decode().splitlines()
    assert text == [*LINES, "RuntimeError: diverged"]


async def test_a_running_unit_is_followed_live_until_it_ends(client: Client) -> None:
    behavior = {"logs": LINES, "log_every_seconds": 1, "run_seconds": 4}
    name = await client.create(await client.experiment(), behaving_unit(behavior))
    await eventually(lambda: client.state(name), S.RUNNING, within=90, every=POLL)
    chunks = await read(client, name, follow=True)
    assert not [c.notice for c in chunks if c.notice], "the ESS reads the cluster as xmc-ess"
    assert any(c.log.source == logs_pb2.ContainerLog.LIVE for c in chunks)
    assert b"".join(c.data for c in chunks).decode().splitlines() == LINES
    assert await client.state(name) == S.COMPLETED, "the follow ends with the unit"
