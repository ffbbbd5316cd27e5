"""A Reconciler leader that loses its Lease while holding observations (paused past the
lease, its ESS unreachable meanwhile) sends none of them when it wakes: a standby leads by
then, and a stale ``detailed_status`` or scheduling information would overwrite the new
leader's. Real ESS over gRPC, real kubesim over HTTP, two replicas on a short Lease."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Sequence
from typing import Any

import grpc
import pytest

from kubesim.resources import JOBSET
from kubesim.resources import LEASE as LEASE_RESOURCE
from reconciler.app import Reconciler
from reconciler.ess_client import EssClient, EssUnavailable
from reconciler.leader import LeaseSettings
from reconciler.observation import Observation
from tests.integration.support import forever_work_unit
from tests.integration.system import ALICE, System, running_system
from tests.integration.test_ess_internal import SERVICE
from tests.waiting import eventually
from xmc.model.fence import Fence
from xmc.model.states import WorkUnitState
from xmc.timestamps import utc_now
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.internal.v1 import executions_pb2

LEASE = LeaseSettings(
    lease_seconds=1, renew_seconds=0.2, retry_seconds=0.1, renew_deadline_seconds=0.6
)


class CountingEss:
    """The real ESS client behind a switch (network down), counting what reached the ESS."""

    def __init__(self, real: EssClient) -> None:
        self.real = real
        self.down = False
        self.delivered = 0

    async def update(self, observations: Sequence[Observation], *, writer: str) -> Any:
        if self.down:
            raise EssUnavailable(grpc.StatusCode.UNAVAILABLE, "ESS is down")
        results = await self.real.update(observations, writer=writer)
        self.delivered += len(observations)
        return results

    async def work_unit(self, xid: int, wid: int) -> Any:
        return await self.real.work_unit(xid, wid)


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory, controllers=True) as started:
        yield started


async def test_a_deposed_leader_drops_what_it_held(system: System) -> None:
    await system.reconciler.stop()  # replaced by two replicas on a short Lease
    real = system.reconciler._ess
    ess_a = CountingEss(real)

    def replica(identity: str, ess: Any) -> Reconciler:
        options = dataclasses.replace(system.reconciler.options, lease=LEASE)
        return Reconciler(system.kube, ess, identity=identity, clock=utc_now, options=options)

    a = replica("r-a", ess_a)
    await a.start()
    await eventually(lambda: a.leading, within=10, what="A leads")
    b = replica("r-b", real)
    await b.start()
    try:
        experiment: Experiment = await system.ess.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
        )
        operation = await system.ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(
                parent=experiment.name, work_unit=forever_work_unit(1000)
            ),
            metadata=ALICE,
        )
        name = str(operation.name).split("/operations/")[0]
        await eventually(lambda: system.state(name), WorkUnitState.RUNNING, within=30)

        # A's ESS becomes unreachable; a change of the JobSet leaves A holding observations.
        ess_a.down = True
        xid, wid = name.split("/")[1::2]
        system.sim.store.update(
            JOBSET, "default", f"xmc-{xid}-{wid}",
            lambda js: js["metadata"]["labels"].update(touched="yes"),
        )  # fmt: skip
        await eventually(lambda: a.batcher.pending > 0, within=10, what="A holds observations")

        # A freezes the way a SIGSTOP freezes it: its elector stops renewing, its batcher
        # still holds the items. B takes the Lease once it expires.
        election = next(t for t in a._tasks if t.get_name() == "leader election")
        election.cancel()
        await eventually(lambda: b.leading, within=10, what="B leads")

        # A wakes with its ESS reachable again: nothing it held may reach the ESS.
        delivered = ess_a.delivered
        ess_a.down = False
        await eventually(lambda: not a.batcher.pending, within=10, what="A holds nothing")
        assert ess_a.delivered == delivered, "a deposed leader sent what it held"
        assert not a.leading
    finally:
        await a.abort()
        await b.stop()


async def test_a_leader_whose_lease_count_went_back_is_fenced_once_then_writes(
    system: System,
) -> None:
    """The Lease was re-created (or etcd restored): its count restarts below the newest
    generation the ESS has seen. The leader's first write is refused; it steps down, takes
    its own Lease again one generation above the one the ESS named, and writes from then
    on: the fence never locks the rightful leader out (decision 0054)."""
    await system.reconciler.stop()  # replaced by one fenced replica
    ess = system.reconciler._ess
    options = dataclasses.replace(system.reconciler.options, lease=LEASE)
    leader = Reconciler(system.kube, ess, identity="r-a", clock=utc_now, options=options)
    assert leader.elector is not None
    ess.fencing = leader.elector
    # A generation from before the Lease was re-created: newer than any its count gives.
    await system.ess.executions.UpdateWorkUnitExecutions(
        executions_pb2.UpdateWorkUnitExecutionsRequest(writer="earlier-leader"),
        metadata=(*SERVICE, *Fence("default/xmc-reconciler", 9).metadata()),
    )
    await leader.start()
    try:
        experiment: Experiment = await system.ess.api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
        )
        operation = await system.ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=forever_work_unit()),
            metadata=ALICE,
        )
        name = str(operation.name).split("/operations/")[0]
        await eventually(lambda: system.state(name), WorkUnitState.RUNNING, within=30)
        assert leader.elector.generation == 10
        lease = system.sim.store.find(LEASE_RESOURCE, "default", "xmc-reconciler")
        assert lease is not None
        assert lease["spec"]["leaseTransitions"] == 10
    finally:
        ess.fencing = None
        await leader.stop()
