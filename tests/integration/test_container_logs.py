"""Container logs outlive their pods (issue 27.1), end to end at real time: ESS (gRPC) →
Actuator → kubesim → Reconciler, which reads each container's tail from the API server
when it ends and on the finalizer path, and hands it to the ESS; the ESS serves it through
``xmc.v1.LogService`` after the JobSet and its pods are gone.

On the system of tests/integration/system.py. The live half (a running unit's logs read
from the API server) needs an ESS that can reach the cluster: tests/integration/
test_logs_live.py, on real processes.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from kubesim.resources import JOBSET, POD
from tests.integration.support import behaving_unit
from tests.integration.system import ALICE, System, running_system
from tests.integration.test_cli import xmc
from tests.integration.test_failure_reasons import create, failed, jobset_name
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc.pod_logs import read_tail
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.xmc.v1 import logs_pb2, logs_pb2_grpc

pytestmark = pytest.mark.slow

S = WorkUnitState
LINES = ["epoch 1 loss=0.5", "<b>bold</b> & \x1b[31mred\x1b[0m", "epoch 3 loss=0.25"]


def stub(system: System) -> logs_pb2_grpc.LogServiceStub:
    return logs_pb2_grpc.LogServiceStub(system.ess.channel)


async def read_all(system: System, name: str, **fields: Any) -> list[logs_pb2.LogChunk]:
    request = logs_pb2.ReadWorkUnitLogsRequest(name=name, **fields)
    return [chunk async for chunk in stub(system).ReadWorkUnitLogs(request, metadata=ALICE)]


def text_of(chunks: list[logs_pb2.LogChunk]) -> bytes:
    return b"".join(chunk.data for chunk in chunks)


async def pod_of(system: System, name: str) -> str | None:
    for pod in system.sim.store.list(POD, "default"):
        if pod["metadata"]["name"].startswith(jobset_name(name)):
            return str(pod["metadata"]["name"])
    return None


async def gone(system: System, name: str) -> bool:
    jobset = system.sim.store.find(JOBSET, "default", jobset_name(name))
    pods = [p for p in system.sim.store.list(POD, "default")
            if p["metadata"]["name"].startswith(jobset_name(name))]  # fmt: skip
    return jobset is None and not pods


async def test_a_failed_units_output_is_read_after_its_pods_are_gone(ess_factory: Any) -> None:
    behavior = {
        "logs": LINES, "log_every_seconds": 0.2, "run_seconds": 1.5, "exit_code": 3,
        "message": "ValueError: loss is NaN",
    }  # fmt: skip
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit(behavior))
        await failed(system, name)
        assert await system.reconciler.collect_orphans() == 1
        await eventually(lambda: gone(system, name), True, within=30)

        listed = await stub(system).ListContainerLogs(
            logs_pb2.ListContainerLogsRequest(parent=name, execution_id=1), metadata=ALICE
        )
        assert listed.exit_code == 3
        (log,) = listed.logs
        assert (log.container, log.source, log.terminated, log.exit_code) == (
            "main", logs_pb2.ContainerLog.STORED, True, 3)  # fmt: skip

        chunks = await read_all(system, name)
        assert chunks[0].start
        assert chunks[0].log.pod == log.pod
        lines = text_of(chunks).decode().splitlines()
        assert lines[:3] == LINES, "every line, control characters and markup as written"
        assert lines[3:] == ["ValueError: loss is NaN"], "the failure text ends the log"

        xid, wid = name.split("/")[1::2]
        printed = await xmc(system.ess, "logs", xid, wid)
        assert printed.exit_code == 0, printed.output
        assert f"==> {log.pod}/main (execution 1, exit code 3 (Error)) <==" in printed.stdout
        assert "<b>bold</b> & \u241b[31mred\u241b[0m" in printed.stdout, "escapes shown"
        raw = await xmc(system.ess, "logs", xid, wid, "--raw", "-q")
        assert "\x1b[31mred" in raw.stdout
        listed_cli = await xmc(system.ess, "wu", "list", xid, "--filter", "exit_code != 0")
        assert listed_cli.exit_code == 0, listed_cli.output
        assert "exit code" in listed_cli.stdout
        assert "│ 3 " in listed_cli.stdout or "| 3 " in listed_cli.stdout, listed_cli.stdout
        refused = await xmc(system.ess, "logs", xid, wid, "--container", "nope")
        assert refused.exit_code == 1
        assert "NOT_FOUND" in refused.output
        assert "container" in refused.output


async def test_a_stopped_units_output_is_kept_from_the_finalizer_path(ess_factory: Any) -> None:
    behavior = {"logs": ["step 1", "step 2"], "log_every_seconds": 0.2}
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit(behavior))
        await eventually(lambda: system.state(name), S.RUNNING, within=30)

        pod = await eventually(lambda: pod_of(system, name), within=30)

        async def printed() -> bool:
            text, _ = await read_tail(system.kube, "default", pod, "main", limit=4096,
                                      tail_lines=100)  # fmt: skip
            return b"step 2" in text

        await eventually(printed, True, within=30)
        await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=name), metadata=ALICE)
        await eventually(lambda: system.state(name), S.STOPPED, within=30)
        await eventually(lambda: gone(system, name), True, within=30)
        chunks = await read_all(system, name)
        text = text_of(chunks).decode()
        assert text.splitlines()[:2] == ["step 1", "step 2"], chunks


async def test_bad_reads_are_refused_with_the_field_named(ess_factory: Any) -> None:
    async with running_system(ess_factory) as system:
        name = await create(system, behaving_unit({"run_seconds": 0.5}))
        await eventually(lambda: system.state(name), S.COMPLETED, within=30)
        for fields, code, named in (
            ({"execution_id": 7}, grpc.StatusCode.NOT_FOUND, "execution_id"),
            ({"execution_id": -1}, grpc.StatusCode.INVALID_ARGUMENT, "execution_id"),
            ({"container": "nope"}, grpc.StatusCode.NOT_FOUND, "container"),
            ({"name": "experiments/x/workUnits/1"}, grpc.StatusCode.INVALID_ARGUMENT, "name"),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await read_all(system, str(fields.pop("name", name)), **fields)
            assert refused.value.code() == code, fields
            assert named in str(refused.value.details()), fields
        anonymous = stub(system).ReadWorkUnitLogs(logs_pb2.ReadWorkUnitLogsRequest(name=name))
        with pytest.raises(grpc.aio.AioRpcError) as unauthenticated:
            async for _ in anonymous:
                pass
        assert unauthenticated.value.code() == grpc.StatusCode.UNAUTHENTICATED, "streams too"
