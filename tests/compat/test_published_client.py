"""The published client (PyPI ``xmanager==0.8.5.post1``) against a real XMC stack, run in
its own virtualenv exactly as a user runs it (``make compat``; not part of ``make test``).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import grpc
import pytest

from tests.compat.support import HERE, USER_EMAIL, USER_TOKEN, client_env
from tests.stack import Stack
from tests.waiting import eventually
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
    """Run a client script in its virtualenv; its JSON lines, or fail with its output.

    Outside any git repository: at ``create_experiment`` the client commits the working
    tree of the repository it runs in and pushes it (``snapshot_code.push_repo_state``)."""
    process = await asyncio.create_subprocess_exec(
        str(python), str(HERE / script), *args, cwd=tempfile.gettempdir(),
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
        await eventually(state, WorkUnitState.COMPLETED, within=60)


async def test_a_sweep_a_re_entry_a_stop_and_a_restart_through_xm_cloud(
    full_python: Path, compat_stack: Stack
) -> None:
    trials = 5
    lines = await run_client(full_python, "client_sweep.py", compat_stack, "launch", str(trials))
    steps = {line["step"]: line for line in lines}
    xid = steps["sweep"]["xid"]
    assert steps["sweep"]["work_units"] == trials
    assert steps["re-entry"]["work_units"] == trials + 1
    extra = trials + 1

    async with grpc.aio.insecure_channel(compat_stack.endpoint) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        metadata = (("authorization", "Bearer compat-alice-token"),)

        async def execution(wid: int) -> tuple[int, WorkUnitState]:
            unit = await api.GetWorkUnit(
                api_pb2.GetWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}"),
                metadata=metadata,
            )
            current = unit.current_work_unit_execution
            return int(current.name.rsplit("/", 1)[1]), WorkUnitState(current.status.state)

        for wid in range(1, trials + 1):
            await eventually(
                functools.partial(execution, wid), (1, WorkUnitState.COMPLETED), within=90
            )
        await eventually(lambda: execution(extra), (1, WorkUnitState.RUNNING), within=90)

        await run_client(full_python, "client_sweep.py", compat_stack, "stop", str(xid), str(extra))
        await eventually(lambda: execution(extra), (1, WorkUnitState.STOPPED), within=90)
        await run_client(
            full_python, "client_sweep.py", compat_stack, "restart", str(xid), str(extra)
        )
        await eventually(lambda: execution(extra), (2, WorkUnitState.RUNNING), within=90)

        experiment = await api.GetExperiment(
            api_pb2.GetExperimentRequest(name=f"experiments/{xid}"), metadata=metadata
        )
        assert experiment.creator == USER_EMAIL
        assert LaunchState(experiment.status.launch_state) == LaunchState.COMPLETED
        units = await api.ListWorkUnits(
            api_pb2.ListWorkUnitsRequest(parent=f"experiments/{xid}"), metadata=metadata
        )
        rates = sorted(dict(u.executable.jobset.jobs[0].spec.args)["lr"] for u in units.work_units)
        assert len(rates) == trials + 1
        assert rates[-1] == "0.9"


async def test_the_readme_example_sweep_runs_to_completed(
    full_python: Path, compat_stack: Stack
) -> None:
    process = await asyncio.create_subprocess_exec(
        str(full_python), str(HERE.parents[1] / "examples" / "xmanager_sweep.py"), "3",
        cwd=tempfile.gettempdir(), env=client_env(compat_stack), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=180)
    text = out.decode()
    assert process.returncode == 0, text[-3000:]
    assert text.rstrip().splitlines()[-1].endswith(": COMPLETED"), text[-3000:]


async def test_without_auth_the_creator_is_the_users_email(
    stubs_python: Path, dev_stack: Stack
) -> None:
    """``make run`` disables auth; the client still sends XMC_USER_EMAIL, and that, not a
    placeholder, is who created the experiment."""
    lines = await run_client(stubs_python, "client_stubs.py", dev_stack)
    assert lines[-1]["failed"] == []
    async with grpc.aio.insecure_channel(dev_stack.endpoint) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        listed = await api.ListExperiments(api_pb2.ListExperimentsRequest())
    assert [e.creator for e in listed.experiments] == [USER_EMAIL]


async def test_the_example_refuses_to_run_inside_a_git_repository(
    full_python: Path, compat_stack: Stack, tmp_path: Path
) -> None:
    """The client commits and pushes the repository it runs in; the README's example
    stops before the client is called, and says why."""
    repo = tmp_path / "checkout"
    (repo / "sub").mkdir(parents=True)
    git = await asyncio.create_subprocess_exec("git", "init", "-q", str(repo))
    assert await git.wait() == 0
    process = await asyncio.create_subprocess_exec(
        str(full_python), str(HERE.parents[1] / "examples" / "xmanager_sweep.py"), "1",
        cwd=repo / "sub", env=client_env(compat_stack), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 2, err.decode()
    assert f"{repo} is a git repository" in err.decode()
    async with grpc.aio.insecure_channel(compat_stack.endpoint) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        listed = await api.ListExperiments(
            api_pb2.ListExperimentsRequest(), metadata=(("authorization", f"Bearer {USER_TOKEN}"),)
        )
    assert list(listed.experiments) == []
