"""No ghosts, in one event loop: ESS (gRPC, Postgres) → Actuator → kubesim (HTTP, its
simulators) → Reconciler, with the vanished-JobSet sweep on a 2 s grace. A JobSet removed
behind XMC's back (its finalizer stripped, then deleted through kubesim's API) ends its
execution FAILED, saying so; a parked create, a live JobSet and a stop through the
finalizer are left alone."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from reconciler import metrics
from reconciler.vanished import VanishedSettings
from tests.integration.ess_harness import metadata
from tests.integration.system import System, running_system
from tests.integration.test_reconciler_e2e import create, running_forever
from tests.waiting import eventually
from xmc.kube import JOBSETS
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1 import scheduling_pb2

# A vanished JobSet's grace at real time: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState
ALICE, SERVICE = metadata("alice"), metadata("reconciler")
GRACE = timedelta(seconds=2)


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    vanished = VanishedSettings(interval=0.2, grace=GRACE)
    async with running_system(ess_factory, controllers=True, vanished=vanished) as started:
        yield started


def _ended() -> float:
    return float(metrics.VANISHED_JOBSETS_TOTAL._value.get())


def _sweeps() -> float:
    return float(metrics.VANISHED_SWEEPS_TOTAL.labels("done")._value.get())


async def force_remove(system: System, name: str) -> str:
    """What a namespace force-delete or a hand-removed finalizer does: the JobSet leaves
    without XMC's finalizer path. Returns its uid."""
    xid, wid = name.split("/")[1::2]
    jobset = f"xmc-{xid}-{wid}"
    current = await system.kube.get(JOBSETS, "default", jobset)
    assert current is not None
    await system.kube.patch(JOBSETS, "default", jobset, {"metadata": {"finalizers": []}})
    await system.kube.delete(JOBSETS, "default", jobset, propagation_policy="Background")
    assert await system.kube.get(JOBSETS, "default", jobset) is None
    return str(current["metadata"]["uid"])


async def test_a_jobset_removed_behind_xmcs_back_ends_failed_and_nothing_else_does(
    system: System,
) -> None:
    ghost = await create(system, running_forever())
    alive = await create(system, running_forever())
    stopped = await create(system, running_forever())
    for name in (ghost, alive, stopped):
        await eventually(functools.partial(system.state, name), S.RUNNING, within=30)
    await system.ess.scheduling.PauseScheduling(
        scheduling_pb2.PauseSchedulingRequest(reason="upgrade"), metadata=SERVICE
    )
    parked = await create(system, running_forever())
    await eventually(lambda: system.state(parked), S.SCHEDULING_PAUSED, within=30)
    before = _ended()

    uid = await force_remove(system, ghost)
    await system.ess.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=stopped), metadata=ALICE)

    await eventually(lambda: system.state(ghost), S.FAILED, within=30)
    message = await system.system_message(ghost)
    assert message.severity == StructuredMessage.ERROR
    assert message.source == StructuredMessage.XMANAGER_BACKEND
    xid, wid = ghost.split("/")[1::2]
    assert message.user_facing_text.startswith(
        f"JobSet xmc-{xid}-{wid} (uid {uid}) of execution 1 disappeared from the cluster "
        "without XMC's finalizer"
    )
    assert _ended() == before + 1
    await eventually(lambda: system.state(stopped), S.STOPPED, within=30)

    # Several graces later the others are as they were: nothing else was failed.
    sweeps = _sweeps()

    async def graces_later() -> bool:
        return _sweeps() >= sweeps + 3 * GRACE.total_seconds() / 0.2

    await eventually(graces_later, True, within=30)
    assert await system.state(alive) == S.RUNNING
    assert await system.state(parked) == S.SCHEDULING_PAUSED
    assert await system.state(stopped) == S.STOPPED
    assert _ended() == before + 1
    history = [state for _eid, state in await system.history(ghost)]
    assert history[-1] == S.FAILED
    assert history.count(S.FAILED) == 1
