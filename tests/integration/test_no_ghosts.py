"""No ghosts, end to end: kubesim, ESS, Actuator and Reconciler as OS processes, and
kubesim SIGKILLed and restarted in the middle of a sweep (issue 23).

- Ephemeral kubesim: the restarted cluster is empty and its resourceVersions start over.
  The Reconciler finds its cache stale (the server is behind its resourceVersion) and
  re-lists; the units whose JobSet vanished end FAILED saying so, the ones still waiting
  for theirs are re-created by the Actuator's repair sweep and complete, and units created
  after the restart complete (the Reconciler sees the new cluster). 0 stuck.
- Persistent kubesim (``--state-dir``): the cluster comes back; every unit completes.

Real time (kubesim time scale 1): the Actuator's DONE and the Reconciler's grace are
both on the host's clock, the stored states on the cluster's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.integration.processes import Client, running_stack
from tests.integration.redis_server import RedisServer
from tests.integration.support import minimal_work_unit
from tests.servers import ADMIN_DSN
from tests.stack import Stack, StackOptions
from xmc.model.states import EXECUTION_TERMINAL_STATES, WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

# OS processes, kubesim killed and restarted: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
UNITS = 16
VANISHED = "disappeared from the cluster without XMC's finalizer"
OPTIONS = StackOptions(
    repair_after=10.0,
    repair_interval=1.0,
    reconciler_args=("--vanished-grace=5", "--vanished-interval=1"),
)


def running_for(seconds: int) -> WorkUnit:
    work_unit = minimal_work_unit()
    behavior = {"run_seconds": seconds}
    work_unit.executable.jobset.jobs[0].annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    return work_unit


async def _states(client: Client, names: list[str]) -> dict[str, tuple[S, str]]:
    """State and system message of each unit."""
    found = {}
    for name in names:
        unit = await client.api.GetWorkUnit(
            api_pb2.GetWorkUnitRequest(name=name), wait_for_ready=True
        )
        status = unit.current_work_unit_execution.status
        found[name] = (S(status.state), status.system_message.user_facing_text)
    return found


async def _all_terminal(
    client: Client, names: list[str], within: float
) -> dict[str, tuple[S, str]]:
    """Every unit's end, once all are terminal; fails naming the stuck ones."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        states = await _states(client, names)
        stuck = {n: s.name for n, (s, _) in states.items() if s not in EXECUTION_TERMINAL_STATES}
        if not stuck:
            return states
        if loop.time() > deadline:
            raise AssertionError(f"{len(stuck)} stuck after {within:g}s: {stuck}")
        await asyncio.sleep(1)  # polling interval of a condition with a deadline


async def _running(client: Client, names: list[str], at_least: int, within: float) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        states = await _states(client, names)
        if sum(s is S.RUNNING for s, _ in states.values()) >= at_least:
            return
        if loop.time() > deadline:
            raise AssertionError(f"fewer than {at_least} running: {states}")
        await asyncio.sleep(0.5)


async def _sweep_with_kubesim_killed(stack: Stack) -> tuple[list[str], list[str], Client]:
    """UNITS units running 40 s; kubesim SIGKILLed and restarted while most run; then
    four more units. Returns (before, after, client)."""
    client = Client(stack)
    parent = await client.experiment()
    before = [await client.create(parent, running_for(40)) for _ in range(UNITS)]
    await _running(client, before, at_least=UNITS // 2, within=60)
    await stack.restart("kubesim")
    after = [await client.create(parent, running_for(5)) for _ in range(4)]
    return before, after, client


async def _ends_of_a_sweep_with_kubesim_killed(
    redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest, options: StackOptions
) -> tuple[list[str], list[str], dict[str, tuple[S, str]]]:
    """Units made before and after kubesim was SIGKILLed and restarted, and how each
    ended (every one must end within the deadline)."""
    async with running_stack(ADMIN_DSN, redis.url, tmp_path / "logs", request, options) as stack:
        before, after, client = await _sweep_with_kubesim_killed(stack)
        try:
            ends = await _all_terminal(client, before + after, within=100)
        finally:
            await client.channel.close()
    return before, after, ends


# The FAILED write is stamped on the Reconciler's clock, never before the stored state's
# (the cluster's): run with the cluster's clock behind, equal and ahead (decision 11).
@pytest.mark.parametrize("clock_offset", ["-5s", "0s", "+5s"])
async def test_an_ephemeral_kubesim_killed_mid_sweep_leaves_no_unit_stuck(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest, clock_offset: str
) -> None:
    options = StackOptions(**{**OPTIONS.__dict__, "clock_offset": clock_offset})
    before, after, ends = await _ends_of_a_sweep_with_kubesim_killed(
        private_redis, tmp_path, request, options
    )
    failed = {n: text for n, (s, text) in ends.items() if s is S.FAILED}
    assert failed, "the running units' JobSets vanished with the cluster"
    assert all(VANISHED in text for text in failed.values()), failed
    assert {ends[n][0] for n in after} == {S.COMPLETED}, "the new cluster is seen"
    assert {ends[n][0] for n in before} <= {S.FAILED, S.COMPLETED}


async def test_a_persistent_kubesim_killed_mid_sweep_completes_every_unit(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    options = StackOptions(**{**OPTIONS.__dict__, "kubesim_state_dir": tmp_path / "kubesim"})
    _, _, ends = await _ends_of_a_sweep_with_kubesim_killed(
        private_redis, tmp_path, request, options
    )
    assert {n: s for n, (s, _) in ends.items() if s is not S.COMPLETED} == {}
