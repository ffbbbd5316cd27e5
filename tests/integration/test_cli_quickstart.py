"""The README's quick start, word for word: its ``xmc`` commands are read out of README.md
and run as subprocesses (as a user's shell would: no terminal, so ``--watch`` prints its
transcript) against ``make run``'s processes at real time.

It holds the README to its promises: the experiment ends INACTIVE with every work unit
COMPLETED, and the watch showed each state on the way, RUNNING before COMPLETED.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import sys
import uuid
from pathlib import Path

import grpc
import pytest
import redis.asyncio as aioredis

from tests.integration.local_run import free_base
from tests.integration.test_local_run import read_until
from tests.servers import REDIS_URL
from tests.stack import delete_prefixed_keys
from xmc.model.states import ActiveState, LaunchState, WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc

# make run's processes at real time: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

README = Path(__file__).resolve().parents[2] / "README.md"
QUICK_START = "## Your first sweep"
XMC = Path(sys.executable).parent / "xmc"
_MOVE = re.compile(r"^\d\d:\d\d:\d\d  wu (\d+)  (?:(\w+) → )?(\w+)$")


def quick_start_commands(text: str) -> list[list[str]]:
    """The ``xmc`` command lines of the quick start's first code block (continuation
    lines joined, ``# comments`` dropped)."""
    section = text.split(QUICK_START, 1)[1].split("\n## ", 1)[0]
    block = section.split("```", 2)[1]
    joined = block.replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [argv for argv in commands if argv and argv[0] == "xmc"]


def transcript(stdout: str) -> dict[str, list[str]]:
    """Each work unit's states in the order ``--watch`` printed them."""
    seen: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        match = _MOVE.match(line)
        if match:
            wid, old, new = match.groups()
            states = seen.setdefault(wid, [])
            if old is not None:
                assert states[-1:] == [old], (line, states)
            states.append(new)
    return seen


def test_the_quick_start_is_found() -> None:
    commands = quick_start_commands(README.read_text())
    assert [argv[:2] for argv in commands] == [["xmc", "launch"], ["xmc", "experiments"]]
    assert "--watch" in commands[0]


async def run_xmc(argv: list[str], endpoint: str, *, within: float) -> tuple[int, str, str]:
    env = {**os.environ, "XMANAGER_ENDPOINT": endpoint}
    process = await asyncio.create_subprocess_exec(
        str(XMC), *argv[1:], env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout=within)
    except TimeoutError:
        process.kill()
        out, err = await process.communicate()
        raise AssertionError(f"{argv} still running after {within}s:\n{out.decode()}") from None
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def _delete_keys(prefix: str) -> None:
    """The run's streams and keys, so the shared Redis does not collect them."""
    redis = aioredis.Redis.from_url(REDIS_URL)
    try:
        await delete_prefixed_keys(redis, prefix)
    finally:
        await redis.aclose()


async def test_the_readme_quick_start_ends_inactive_with_every_state_seen(
    database_url: str, tmp_path: Path
) -> None:
    launch, get = quick_start_commands(README.read_text())
    base = free_base()
    endpoint = f"127.0.0.1:{base + 1}"
    prefix = f"quickstart-{uuid.uuid4().hex[:8]}:"
    env = {
        **os.environ,
        "XMC_DATABASE_URL": database_url,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_KUBESIM_PORT": str(base),
        "XMC_ESS_LISTEN": endpoint,
        "XMC_METRICS_BASE_PORT": str(base + 2),  # 4 services: base + 2 .. base + 5
        "XMC_UI_LISTEN": f"127.0.0.1:{base + 6}",
        "XMC_RUN_DIR": str(tmp_path),
        "XMC_STREAM_PREFIX": prefix,
    }
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xmc.devrun", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert run.stdout is not None
    try:
        await read_until(run.stdout, "Ctrl-C stops everything", within=60)
        drain = asyncio.create_task(run.stdout.read())

        code, out, err = await run_xmc(launch, endpoint, within=120)
        assert code == 0, out + err
        assert out.splitlines()[0] == "experiments/1"  # what `xmc experiments get 1` reads
        seen = transcript(out)
        assert sorted(seen) == ["1", "2", "3", "4", "5"], out
        for wid, states in seen.items():
            assert states[-1] == "COMPLETED", (wid, out)
            assert "RUNNING" in states[:-1], (wid, out)
        every = {state for states in seen.values() for state in states}
        assert {"INITIALIZING", "SCHEDULING", "STARTING", "RUNNING", "COMPLETED"} <= every, out
        assert "experiment  INACTIVE, launch COMPLETED" in out
        assert out.rstrip().endswith("experiments/1 is INACTIVE (launch COMPLETED): 5 COMPLETED")

        code, out, err = await run_xmc(get, endpoint, within=30)
        assert code == 0, out + err
        assert re.search(r"│ 1 +│ my sweep .*│ INACTIVE +│ COMPLETED +│", out), out
        assert re.search(r"│ COMPLETED +│ 5 +│", out), out

        async with grpc.aio.insecure_channel(endpoint) as channel:
            api = api_pb2_grpc.ExperimentStateServiceStub(channel)
            experiment = await api.GetExperiment(api_pb2.GetExperimentRequest(name="experiments/1"))
            units = await api.ListWorkUnits(api_pb2.ListWorkUnitsRequest(parent=experiment.name))
        status = experiment.status
        assert LaunchState(status.launch_state) == LaunchState.COMPLETED
        assert ActiveState(status.active_state) == ActiveState.INACTIVE
        assert [
            WorkUnitState(w.current_work_unit_execution.status.state) for w in units.work_units
        ] == [WorkUnitState.COMPLETED] * 5
    finally:
        if run.returncode is None:
            run.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(run.wait(), timeout=60)
        await _delete_keys(prefix)
    assert code == 0
    assert b"XMC stopped." in await drain
