"""The fault matrix's side of the public API (bench/faults.py and the harnesses that reuse
its workload: bench/rolling_restart.py, bench/scale_out.py): the calls a user makes,
what kubesim shows of the JobSets, and polling a condition with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
import grpc
from bench.fault_counts import Intent, JobSet, Observed
from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import ListOperationsRequest

from tests.integration.support import behaving_unit
from tests.stack import JobSetLedger, Stack
from xmc.labels import EXECUTION_ID
from xmc.model.retry_policy import RETRY_POLICY_ANNOTATION
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

S = WorkUnitState
#: F's policy: two retries of exit code 137, a second apart.
RETRY_POLICY = '{"max_attempts": 3, "on_exit_codes": [137], "backoff_seconds": 1}'


def failing_unit() -> WorkUnit:
    """An F unit: exits 137 after a second, every time, under :data:`RETRY_POLICY`."""
    unit = behaving_unit({"run_seconds": 1, "exit_code": 137})
    unit.executable.jobset.annotations[RETRY_POLICY_ANNOTATION] = RETRY_POLICY
    return unit


RPC_TIMEOUT = 5.0
POLL = 0.25


class Client:
    """The public API as a user calls it, plus kubesim's list of JobSets."""

    def __init__(self, stack: Stack, http: aiohttp.ClientSession) -> None:
        self.channel = grpc.aio.insecure_channel(stack.target)
        self.api = api_pb2_grpc.ExperimentStateServiceStub(self.channel)
        self.ops = operations_grpc_pb2.OperationsStub(self.channel)
        self.http = http
        self.jobsets = f"{stack.kube_url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"

    async def experiment(self) -> str:
        request = api_pb2.CreateExperimentRequest(experiment=Experiment())
        return str((await self.api.CreateExperiment(request, wait_for_ready=True)).name)

    async def create(self, parent: str, work_unit: WorkUnit) -> Intent:
        request = api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit)
        name = str((await self.api.CreateWorkUnit(request, wait_for_ready=True)).name)
        return Intent("create", name.split("/operations/")[0], name)

    async def stop(self, unit: str) -> Intent:
        request = api_pb2.StopWorkUnitRequest(name=unit)
        return Intent("stop", unit, str((await self.api.StopWorkUnit(request)).name))

    async def restart(self, unit: str) -> Intent:
        request = api_pb2.RestartWorkUnitRequest(name=unit)
        return Intent("restart", unit, str((await self.api.RestartWorkUnit(request)).name))

    async def observe(self, parent: str, ledger: JobSetLedger) -> Observed:
        obs = Observed(created=frozenset(ledger.created), duplicated=tuple(ledger.duplicated()))
        try:
            async with self.http.get(self.jobsets) as response:
                for item in (await response.json())["items"]:
                    meta = item["metadata"]
                    execution = (meta.get("labels") or {}).get(EXECUTION_ID, "")
                    obs.jobsets[meta["name"]] = JobSet(execution, "deletionTimestamp" in meta)
            units = api_pb2.ListWorkUnitsRequest(parent=parent, page_size=1000)
            listed = await self.api.ListWorkUnits(units, timeout=RPC_TIMEOUT)
            ops = ListOperationsRequest(name=parent, page_size=1000)
            operations = await self.ops.ListOperations(ops, timeout=RPC_TIMEOUT)
        except (grpc.aio.AioRpcError, aiohttp.ClientError, TimeoutError):
            return Observed(created=obs.created, duplicated=obs.duplicated)  # down: see nothing
        for unit in listed.work_units:
            current = unit.current_work_unit_execution
            eid = int(current.name.rsplit("/", 1)[1]) if current.name else 0
            obs.units[str(unit.name)] = (eid, S(current.status.state))
        for op in operations.operations:
            code = op.error.code if op.HasField("error") else 0
            obs.operations[str(op.name)] = (bool(op.done), code)
        return obs


async def poll(probe: Callable[[], Awaitable[bool]], within: float) -> bool:
    """True once ``probe`` is, False at the deadline: a condition, never a bare sleep."""
    deadline = time.monotonic() + within
    while not await probe():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(POLL)
    return True
