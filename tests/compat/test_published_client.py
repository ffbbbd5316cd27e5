"""The published client (PyPI ``xmanager==0.8.5.post1``) against a real XMC stack, run in
its own virtualenv exactly as a user runs it (``make compat``; not part of ``make test``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.compat.conftest import HERE, USER_EMAIL, client_env
from tests.integration.support import wait_until
from tests.stack import Stack
from xmc.model.states import LaunchState, WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc

pytestmark = pytest.mark.compat

#: Every RPC the published client's ``ExperimentStateGRpcApi`` exposes.
CLIENT_RPCS = {
    "CreateExperiment", "CreateWorkUnit", "GetExperiment", "ListExperiments",
    "SearchExperiments", "GetWorkUnit", "ListWorkUnits", "SearchWorkUnits",
    "UpdateExperimentLaunchState", "UpdateExperiment", "UpdateWorkUnit", "CreateArtifact",
    "ListArtifacts", "SearchArtifacts", "DeleteArtifact", "UpdateArtifact",
    "ListStatusMessages", "SearchStatusMessages", "BatchRestartWorkUnits",
    "BatchStopWorkUnits",
}  # fmt: skip


async def run_client(python: Path, script: str, stack: Stack, *args: str) -> list[dict[str, Any]]:
    """Run a client script in its virtualenv; its JSON lines, or fail with its output."""
    process = await asyncio.create_subprocess_exec(
        str(python), str(HERE / script), *args,
        env=client_env(stack), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout=300)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    if process.returncode != 0:
        sys.stderr.write(err.decode()[-4000:])
    assert process.returncode == 0, [line for line in lines if line.get("code") != "OK"]
    return lines


async def test_every_rpc_of_the_published_stub_layer_answers_ok(
    stubs_python: Path, compat_stack: Stack
) -> None:
    lines = await run_client(stubs_python, "client_stubs.py", compat_stack)
    summary = lines[-1]
    assert summary["failed"] == []
    called = {line["rpc"].split(" (")[0] for line in lines[:-1]}
    assert called == CLIENT_RPCS

    async with grpc.aio.insecure_channel(compat_stack.endpoint) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        metadata = (("authorization", "Bearer compat-alice-token"),)
        experiment = await api.GetExperiment(
            api_pb2.GetExperimentRequest(name=summary["xid"]), metadata=metadata
        )
        assert experiment.creator == USER_EMAIL
        assert LaunchState(experiment.status.launch_state) == LaunchState.COMPLETED
        assert experiment.notes == "from the published client"

        async def state() -> WorkUnitState:
            unit = await api.GetWorkUnit(
                api_pb2.GetWorkUnitRequest(name=f"{summary['xid']}/workUnits/1"),
                metadata=metadata,
            )
            execution = unit.current_work_unit_execution
            return WorkUnitState(execution.status.state)

        # Stopped, then restarted by the batch calls: execution 2 runs to its end.
        await wait_until(state, WorkUnitState.COMPLETED, within=60)
