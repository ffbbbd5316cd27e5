"""The ESS's leader fence over real gRPC and Postgres (decision 0054): a write carrying an
older generation than the newest seen is refused with FAILED_PRECONDITION and writes
nothing; the fence lives in Postgres, so every ESS replica agrees, and a stale write
already past the check commits before the newer term's first write, never after."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import asyncpg
import grpc

from ess.leader_fence import FENCE_CHECKS
from tests.integration.ess_harness import Ess
from tests.integration.test_ess_api import expect_error
from tests.integration.test_ess_internal import SERVICE, experiment_with_work_units, observation
from tests.waiting import eventually, holds_for
from xmc.model.fence import GENERATION_HEADER, LEASE_HEADER, Fence, FenceDecision
from xmc.model.states import WorkUnitState
from xmc.store.transactions import check_fence
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.internal.v1 import executions_pb2

S = WorkUnitState
LEASE = "default/xmc-reconciler"
NOW = datetime(2026, 12, 3, tzinfo=UTC)


def refused() -> float:
    return FENCE_CHECKS.labels(FenceDecision.REFUSE.value)._value.get()  # type: ignore[no-any-return]


async def write(
    ess: Ess, unit: str, state: WorkUnitState, seconds: float, fence: Fence | None
) -> executions_pb2.UpdateWorkUnitExecutionsResponse:
    request = executions_pb2.UpdateWorkUnitExecutionsRequest(
        writer="reconciler", updates=[observation(unit, 1, state, ess, seconds=seconds)]
    )
    extra = () if fence is None else fence.metadata()
    response: executions_pb2.UpdateWorkUnitExecutionsResponse = (
        await ess.executions.UpdateWorkUnitExecutions(request, metadata=SERVICE + extra)
    )
    return response


async def state_of(ess: Ess, unit: str) -> WorkUnitState:
    work_unit = await ess.api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=unit), metadata=SERVICE)
    return S(work_unit.current_work_unit_execution.status.state)


async def test_a_deposed_leaders_write_is_refused_and_writes_nothing(ess: Ess) -> None:
    unit = f"{await experiment_with_work_units(ess, 1)}/workUnits/1"
    await write(ess, unit, S.SCHEDULING, 1, Fence(LEASE, 1))
    await write(ess, unit, S.RUNNING, 2, Fence(LEASE, 2))  # a new leader's term
    before = refused()

    # The old leader's write, newer by its time stamp than anything stored: only the
    # fence stands between it and the unit.
    error = await expect_error(
        write(ess, unit, S.COMPLETED, 3, Fence(LEASE, 1)),
        grpc.StatusCode.FAILED_PRECONDITION,
        "stale leader generation 1 of lease default/xmc-reconciler: the ESS has seen generation 2",
    )
    assert error.details()
    assert refused() == before + 1
    assert await state_of(ess, unit) is S.RUNNING, "the refused write changed the unit"

    await write(ess, unit, S.COMPLETED, 3, Fence(LEASE, 2))  # the current term's lands
    assert await state_of(ess, unit) is S.COMPLETED


async def test_a_write_without_a_token_is_accepted(ess: Ess) -> None:
    """An older Reconciler (or the Actuator, or a person's tool) sends none (0054)."""
    unit = f"{await experiment_with_work_units(ess, 1)}/workUnits/1"
    await write(ess, unit, S.SCHEDULING, 1, Fence(LEASE, 5))
    await write(ess, unit, S.RUNNING, 2, None)
    assert await state_of(ess, unit) is S.RUNNING


async def test_a_malformed_token_is_invalid_argument(ess: Ess) -> None:
    unit = f"{await experiment_with_work_units(ess, 1)}/workUnits/1"
    request = executions_pb2.UpdateWorkUnitExecutionsRequest(
        writer="reconciler", updates=[observation(unit, 1, S.SCHEDULING, ess)]
    )
    bad = (*SERVICE, (LEASE_HEADER, LEASE), (GENERATION_HEADER, "soon"))
    await expect_error(
        ess.executions.UpdateWorkUnitExecutions(request, metadata=bad),
        grpc.StatusCode.INVALID_ARGUMENT,
        GENERATION_HEADER,
    )


async def test_every_stale_write_past_the_check_commits_before_the_newer_term(
    database_url: str,
) -> None:
    """Two ESS replicas, two connections: a write of term 1 that passed the fence holds
    it until it commits; term 2's first write waits for that, then term 1 is refused."""
    old, new, late = [await asyncpg.connect(database_url) for _ in range(3)]
    try:
        async with old.transaction():
            assert (await check_fence(old, Fence(LEASE, 1), now=NOW))[0] is FenceDecision.ADVANCE
        stale = old.transaction()
        await stale.start()
        assert (await check_fence(old, Fence(LEASE, 1), now=NOW)) == (FenceDecision.ACCEPT, 1)

        async def newer_term() -> tuple[FenceDecision, int]:
            async with new.transaction():
                return await check_fence(new, Fence(LEASE, 2), now=NOW)

        waiting = asyncio.create_task(newer_term())
        await holds_for(lambda: not waiting.done(), during=0.5, what="term 2 waits")
        await stale.commit()
        await eventually(waiting.done, what="term 2 proceeds")
        assert waiting.result() == (FenceDecision.ADVANCE, 2)

        async with late.transaction():
            assert await check_fence(late, Fence(LEASE, 1), now=NOW) == (FenceDecision.REFUSE, 2)
            assert await check_fence(late, Fence("other/lease", 1), now=NOW) == (
                FenceDecision.ADVANCE, 1,
            )  # fmt: skip
    finally:
        for conn in (old, new, late):
            await conn.close()
