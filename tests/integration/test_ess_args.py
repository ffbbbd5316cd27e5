"""ListWorkUnits and SearchWorkUnits filter and sort by ``args.<key>`` over real gRPC
(docs/decisions/0035-args-are-filterable.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc
import pytest

from tests.integration.ess_harness import Ess, metadata
from tests.integration.sweep_args import SWEEP, unit_with_args
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

ALICE = metadata("alice")
Listing = Callable[[api_pb2.ListWorkUnitsRequest], Awaitable[api_pb2.ListWorkUnitsResponse]]


async def sweep(ess: Ess, units: list[dict[str, str]]) -> str:
    experiment: Experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="sweep")), metadata=ALICE
    )
    for args in units:
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=unit_with_args(args)),
            metadata=ALICE,
        )
    return str(experiment.name)


def listing(ess: Ess, rpc: str) -> Listing:
    method = getattr(ess.api, rpc)

    async def call(request: api_pb2.ListWorkUnitsRequest) -> api_pb2.ListWorkUnitsResponse:
        response: api_pb2.ListWorkUnitsResponse = await method(request, metadata=ALICE)
        return response

    return call


def wids(response: api_pb2.ListWorkUnitsResponse) -> list[int]:
    return [int(w.name.rsplit("/", 1)[1]) for w in response.work_units]


@pytest.mark.parametrize("rpc", ["ListWorkUnits", "SearchWorkUnits"])
async def test_filter_and_order_by_args(ess: Ess, rpc: str) -> None:
    parent = await sweep(ess, SWEEP)
    call = listing(ess, rpc)

    async def matching(filter_text: str, order_by: str = "") -> list[int]:
        request = api_pb2.ListWorkUnitsRequest(parent=parent, filter=filter_text, order_by=order_by)
        return wids(await call(request))

    assert await matching("args.lr > 0.01") == [1, 4]
    assert await matching('args.opt = "adam" AND args.layers >= 4') == [1, 3, 4, 6]
    assert await matching("args.lr:* AND NOT args.opt = sgd") == [1, 3, 4]
    # OR binds tighter than AND.
    assert await matching("args.opt = sgd OR wid = 4 AND args.layers > 4") == [2, 4]
    assert await matching("args.lr > 0.001", order_by="args.lr desc") == [4, 1, 2]
    assert await matching("", order_by="args.lr") == [3, 2, 1, 4, 5, 6]
    # The listed units carry their args as created.
    response = await call(api_pb2.ListWorkUnitsRequest(parent=parent, filter="args.lr = auto"))
    (unit,) = response.work_units
    assert dict(unit.executable.jobset.jobs[0].spec.args) == SWEEP[4]


async def test_paging_by_an_arg_through_three_pages(ess: Ess) -> None:
    values = ["0.5", "2", "10"] * 3 + ["x", None, None]
    parent = await sweep(ess, [{} if v is None else {"lr": v} for v in values])
    call = listing(ess, "ListWorkUnits")
    seen: list[int] = []
    token, pages = "", 0
    while True:
        response = await call(
            api_pb2.ListWorkUnitsRequest(
                parent=parent, order_by="args.lr", page_size=4, page_token=token
            )
        )
        seen.extend(wids(response))
        pages += 1
        token = response.next_page_token
        if not token:
            break
    assert pages == 3
    assert seen == [1, 4, 7, 2, 5, 8, 3, 6, 9, 10, 11, 12]


@pytest.mark.parametrize(
    ("filter_text", "order_by", "fragment"),
    [
        ("args.1lr > 0", "", "invalid field name 'args.1lr'"),
        (f"args.{'k' * 65} = 1", "", f"key '{'k' * 65}' is not allowed"),
        ("args = 1", "", "unknown field 'args'"),
        ("args.lr > 0.*", "", "field 'args.lr': a trailing '*'"),
        ("", f"args.{'k' * 65}", "order_by: field"),
        ("", "args.lr sideways", "order_by: expected 'field' or 'field desc'"),
    ],
)
async def test_bad_arg_requests_are_invalid_argument(
    ess: Ess, filter_text: str, order_by: str, fragment: str
) -> None:
    parent = await sweep(ess, SWEEP[:1])
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await ess.api.SearchWorkUnits(
            api_pb2.ListWorkUnitsRequest(parent=parent, filter=filter_text, order_by=order_by),
            metadata=ALICE,
        )
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert fragment in (info.value.details() or ""), info.value.details()
