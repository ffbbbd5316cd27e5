"""ListWorkUnits sorted by ``runtime`` and ``time_in_state`` over real gRPC: the orders,
and page tokens that keep a walk's "now" so running units cannot slip past the cursor
while the clock moves (docs/decisions/0037-the-sweep-table.md)."""

from __future__ import annotations

from datetime import timedelta

import grpc
import pytest

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import T0, minimal_work_unit
from tests.integration.test_ess_api import expect_error
from tests.integration.test_timelines import observe
from xmc.model.states import WorkUnitState as S
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ALICE = metadata("alice")


async def six_units(ess: Ess) -> str:
    """Units 1..6 created 10 s apart from T0; 4 completes at T0 + 35 s (runtime 5 s), 2 at
    T0 + 165 s (155 s); the others run. The clock is left at T0 + 200 s: runtimes
    1: 200, 2: 155, 3: 180, 4: 5, 5: 160, 6: 150 s."""
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="sweep")), metadata=ALICE
    )
    for _ in range(6):
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
            metadata=ALICE,
        )
        ess.clock.advance(10)
    for wid, start, end in ((4, 31, 35), (2, 11, 165)):
        unit = f"{experiment.name}/workUnits/{wid}"
        await observe(ess, unit, 1, S.RUNNING, start)
        ess.clock.now = T0 + timedelta(seconds=end)  # complete_time is the ESS's clock
        await observe(ess, unit, 1, S.COMPLETED, end)
    ess.clock.now = T0 + timedelta(seconds=200)
    return str(experiment.name)


async def walk(ess: Ess, parent: str, order_by: str, *, advance: float = 0) -> list[int]:
    """Every unit in ``order_by``, two a page, the ESS clock moved ``advance`` s per page."""
    seen: list[int] = []
    token = ""
    while True:
        response = await ess.api.ListWorkUnits(
            api_pb2.ListWorkUnitsRequest(
                parent=parent, order_by=order_by, page_size=2, page_token=token
            ),
            metadata=ALICE,
        )
        seen.extend(int(w.name.rsplit("/", 1)[1]) for w in response.work_units)
        token = response.next_page_token
        if not token:
            return seen
        ess.clock.advance(advance)


@pytest.mark.parametrize(
    ("order_by", "expected"),
    [
        ("runtime", [4, 6, 2, 5, 3, 1]),
        ("runtime desc", [1, 3, 5, 2, 6, 4]),
        # Shortest in its state first: 1, 3, 5, 6 INITIALIZING since creation, 4 and 2
        # COMPLETED at T0 + 35 s and T0 + 165 s.
        ("time_in_state", [2, 6, 5, 4, 3, 1]),
        ("time_in_state desc", [1, 3, 4, 5, 6, 2]),
        ("state, runtime desc", [1, 3, 5, 6, 2, 4]),
    ],
)
async def test_orders(ess: Ess, order_by: str, expected: list[int]) -> None:
    parent = await six_units(ess)
    assert await walk(ess, parent, order_by) == expected


async def test_a_walk_keeps_its_now_while_the_clock_moves(ess: Ess) -> None:
    """Page 1 ends at unit 3 (180 s). Measured to a "now" 1,000 s later, units 5 and 6
    would have run longer than that and a descending walk would skip them."""
    parent = await six_units(ess)
    assert await walk(ess, parent, "runtime desc", advance=1000) == [1, 3, 5, 2, 6, 4]
    # A new walk measures to the new now: the running units now outrun unit 2.
    assert await walk(ess, parent, "runtime desc") == [1, 3, 5, 6, 2, 4]


@pytest.mark.parametrize("field", ["runtime", "time_in_state"])
async def test_sort_only(ess: Ess, field: str) -> None:
    parent = await six_units(ess)
    call = ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent, filter=f"{field} > 5"), metadata=ALICE
    )
    await expect_error(call, grpc.StatusCode.INVALID_ARGUMENT, f"'{field}' can be sorted on")
