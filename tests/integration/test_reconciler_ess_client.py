"""EssClient against a real ESS: typed per-item results, error classification and the
work-unit snapshot the orphan check reads (SPEC §2.3, §2.4, §8.6)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import grpc
import pytest

from reconciler.ess_client import EssClient, EssFenced, EssRejected, EssUnavailable
from reconciler.observation import Observation, Source
from reconciler.observe import WorkUnitSnapshot
from tests.integration.ess_harness import TOKENS, Ess, metadata
from tests.integration.support import minimal_work_unit
from xmc.model.fence import Fence
from xmc.model.states import WorkUnitState
from xmc.names import parse_work_unit_name
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.internal.v1.executions_pb2 import UpdateWorkUnitExecutionResult as Result

S = WorkUnitState
ALICE = metadata("alice")
WRITER = "reconciler/jobset"
ClientFactory = Callable[..., EssClient]


@pytest.fixture
async def clients(ess: Ess) -> AsyncIterator[ClientFactory]:
    """EssClients to ``ess`` as the reconciler service account (``who`` overridable)."""
    opened: list[EssClient] = []

    def connect(who: str = "reconciler") -> EssClient:
        assert who in TOKENS
        client = EssClient(f"127.0.0.1:{ess.server.port}", token=f"token-{who}", deadline=5)
        opened.append(client)
        return client

    yield connect
    for client in opened:
        await client.close()


async def new_work_unit(ess: Ess) -> tuple[int, int]:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment()), metadata=ALICE
    )
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    # The operation is named ``experiments/{xid}/workUnits/{wid}/operations/{id}``.
    return parse_work_unit_name(str(operation.name).split("/operations/")[0])


def observed(ess: Ess, xid: int, wid: int, eid: int, state: WorkUnitState) -> Observation:
    execution = WorkUnitExecution()
    execution.status.state = int(state)  # type: ignore[assignment]
    execution.status.state_update_time.FromDatetime(ess.clock.now + timedelta(seconds=1))
    return Observation(xid, wid, eid, Source.JOBSET, execution, ("status.state",))


async def test_update_applies_and_returns_one_result_per_item(
    ess: Ess, clients: ClientFactory
) -> None:
    xid, wid = await new_work_unit(ess)
    results = await clients().update(
        [
            observed(ess, xid, wid, 1, S.SCHEDULING),
            observed(ess, xid, wid, 9, S.RUNNING),
            observed(ess, xid, wid + 100, 1, S.RUNNING),
        ],
        writer=WRITER,
    )
    assert [(r.work_unit, r.execution_id, r.outcome, r.state_changed) for r in results] == [
        (f"experiments/{xid}/workUnits/{wid}", 1, Result.APPLIED, True),
        (f"experiments/{xid}/workUnits/{wid}", 9, Result.STALE_EXECUTION, False),
        (f"experiments/{xid}/workUnits/{wid + 100}", 1, Result.NOT_FOUND, False),
    ]
    assert S(results[0].state) == S.SCHEDULING


async def test_update_as_a_user_is_rejected(ess: Ess, clients: ClientFactory) -> None:
    xid, wid = await new_work_unit(ess)
    with pytest.raises(EssRejected) as info:
        await clients("alice").update([observed(ess, xid, wid, 1, S.RUNNING)], writer=WRITER)
    assert info.value.code == grpc.StatusCode.PERMISSION_DENIED


async def test_stopped_ess_is_unavailable(ess: Ess, clients: ClientFactory) -> None:
    xid, wid = await new_work_unit(ess)
    client = clients()
    assert await client.work_unit(xid, wid) is not None  # the channel was connected
    await ess.server.stop(grace=0)
    with pytest.raises(EssUnavailable) as info:
        await client.update([observed(ess, xid, wid, 1, S.RUNNING)], writer=WRITER)
    assert info.value.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
    with pytest.raises(EssUnavailable):
        await client.work_unit(xid, wid)


async def test_work_unit_snapshot_and_missing_work_unit(ess: Ess, clients: ClientFactory) -> None:
    xid, wid = await new_work_unit(ess)
    client = clients()
    await client.update([observed(ess, xid, wid, 1, S.RUNNING)], writer=WRITER)
    assert await client.work_unit(xid, wid) == WorkUnitSnapshot(eid=1, state=S.RUNNING)
    assert await client.work_unit(xid, wid + 100) is None
    assert await client.work_unit(xid + 1000, 1) is None


class Term:
    """A LeaderElector's fencing half: the term's token, and what the ESS refused."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.refusals: list[tuple[int, int]] = []

    def fence(self) -> Fence:
        return Fence("default/xmc-reconciler", self.generation)

    def fenced(self, refused: int, newest: int) -> None:
        self.refusals.append((refused, newest))


async def test_a_deposed_leaders_write_is_fenced_and_told_to_its_election(
    ess: Ess, clients: ClientFactory
) -> None:
    xid, wid = await new_work_unit(ess)
    new, old = clients(), clients()
    new.fencing, old.fencing = Term(3), Term(2)
    await new.update([observed(ess, xid, wid, 1, S.SCHEDULING)], writer=WRITER)

    with pytest.raises(EssFenced) as info:
        await old.update([observed(ess, xid, wid, 1, S.RUNNING)], writer=WRITER)
    assert (info.value.refused, info.value.newest) == (2, 3)
    assert info.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert isinstance(old.fencing, Term)
    assert old.fencing.refusals == [(2, 3)]
