"""What a real API server's latency exposes (issue 25.5): one JobSet whose reads the API
server answers slowly must not hold up any other JobSet's state on its way to the ESS.

ESS (gRPC) → Actuator → kubesim (HTTP, controllers off: the test writes JobSet status) →
Reconciler → ESS, on tests/integration/system.py. A FAILED JobSet's run reads its failed
Job and that Job's pods (``reconciler.evidence``, up to 5 s each); kubesim answers those
two reads, and only those, ``SLOW`` seconds late. Before the work queue the handler ran
under the JobSet watch's delivery lock, and every other JobSet's events waited 2 × SLOW.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kubesim.resources import JOBSET
from tests.integration.system import System, running_system
from tests.integration.test_reconciler_e2e import create
from tests.waiting import eventually
from xmc.model.states import WorkUnitState

# A slow API server at real time: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
#: Seconds kubesim takes to answer the slow JobSet's evidence reads (under their 5 s bound).
SLOW = 4.0
#: What "promptly" means for every other JobSet: well below one slow read.
PROMPT = 1.5


@pytest.fixture
async def quiet_system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory, controllers=False) as started:
        yield started


async def created(system: System, name: str) -> str:
    xid, wid = name.split("/")[1::2]
    jobset = f"xmc-{xid}-{wid}"

    async def exists() -> bool:
        return system.sim.store.find(JOBSET, "default", jobset) is not None

    await eventually(exists, True, within=30)
    await eventually(lambda: system.state(name), S.SCHEDULING, within=30)
    return jobset


def set_status(system: System, jobset: str, condition: str, message: str = "") -> None:
    now = system.sim.clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"type": condition, "status": "True", "reason": condition, "message": message,
              "lastTransitionTime": now}  # fmt: skip

    def mutate(obj: dict[str, Any]) -> None:
        obj["status"] = {"conditions": [status]}

    system.sim.store.update(JOBSET, "default", jobset, mutate, subresource="status")


async def test_one_jobsets_slow_reads_hold_up_no_other_jobset(quiet_system: System) -> None:
    system = quiet_system
    slow, others = await create(system), [await create(system) for _ in range(3)]
    slow_jobset = await created(system, slow)
    other_jobsets = [await created(system, name) for name in others]

    # The API server answers reads about the slow JobSet's failed Job SLOW seconds late.
    failed_job = f"{slow_jobset}-main-0"
    faults = system.sim.faults
    job_read = faults.delay("get", "jobs", seconds=SLOW, times=10, url_contains=failed_job)
    faults.delay("list", "pods", seconds=SLOW, times=10, url_contains=failed_job)
    message = f"jobset failed due to one or more job failures (first failed job: {failed_job})"
    set_status(system, slow_jobset, "Failed", message)

    async def reading_slowly() -> bool:
        return job_read.times is not None and job_read.times < 10

    await eventually(reading_slowly, True, within=10)
    changed = time.monotonic()
    for jobset in other_jobsets:
        set_status(system, jobset, "Completed")

    async def states() -> list[WorkUnitState]:
        return [await system.state(name) for name in others]

    await eventually(states, [S.COMPLETED] * len(others), within=PROMPT)
    assert time.monotonic() - changed < SLOW, "the others landed while the slow read was out"

    # The slow JobSet still ends FAILED once its reads answer.
    await eventually(lambda: system.state(slow), S.FAILED, within=3 * SLOW)
