"""``xmc.v1.SweepService`` over real gRPC and on xmc-ui's REST face: an experiment's arg keys
with their spread, and its units grouped by one arg with state counts
(docs/decisions/0037-the-sweep-table.md)."""

from __future__ import annotations

import aiohttp
import grpc
import pytest

from tests.integration.ess_harness import Ess, metadata
from tests.integration.sweep_args import SWEEP
from tests.integration.test_ess_api import expect_error
from tests.integration.test_ess_args import sweep
from tests.integration.ui_support import running_ui
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.xmc.v1 import sweep_pb2, sweep_pb2_grpc

ALICE = metadata("alice")
S = WorkUnitStatus.WorkUnitState


def stub(ess: Ess) -> sweep_pb2_grpc.SweepServiceStub:
    return sweep_pb2_grpc.SweepServiceStub(ess.channel)


async def test_arg_keys_varying_first(ess: Ess) -> None:
    parent = await sweep(ess, [{**args, "data": "c4"} for args in SWEEP])
    keys = await stub(ess).ListArgKeys(sweep_pb2.ListArgKeysRequest(parent=parent), metadata=ALICE)
    assert keys.work_units == 6
    # lr: 5 values and a unit without it (6); layers: 4; opt: 2; data is constant.
    assert [(k.key, k.distinct_values, k.present, k.varying) for k in keys.keys] == [
        ("lr", 5, 5, True),
        ("layers", 4, 6, True),
        ("opt", 2, 6, True),
        ("data", 1, 6, False),
    ]
    assert [k.constant_value for k in keys.keys] == ["", "", "", "c4"]


async def test_groups_with_state_counts_in_arg_order(ess: Ess) -> None:
    parent = await sweep(ess, SWEEP)
    await ess.api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=f"{parent}/workUnits/2"), metadata=ALICE
    )
    stopped = (await ess.api.GetWorkUnit(
        api_pb2.GetWorkUnitRequest(name=f"{parent}/workUnits/2"), metadata=ALICE
    )).current_work_unit_execution.status.state  # fmt: skip

    async def groups(key: str, filter_text: str = "") -> list[tuple[str, int, dict[int, int]]]:
        request = sweep_pb2.ListArgGroupsRequest(parent=parent, key=key, filter=filter_text)
        answer = await stub(ess).ListArgGroups(request, metadata=ALICE)
        assert not answer.truncated
        return [
            (
                "-" if g.missing else g.value,
                g.count,
                {c.state: c.count for c in g.state_counts},
            )
            for g in answer.groups
        ]

    assert await groups("opt") == [
        ("adam", 4, {S.INITIALIZING: 4}),
        ("sgd", 2, {S.INITIALIZING: 1, stopped: 1}),
    ]
    # As order_by="args.lr" sorts: numbers (0.1 before 1e-1 by text), text, missing.
    assert [(v, n) for v, n, _ in await groups("lr")] == [
        ("0.001", 1),
        ("0.01", 1),
        ("0.1", 1),
        ("1e-1", 1),
        ("auto", 1),
        ("-", 1),
    ]
    assert await groups("layers", 'args.opt = "adam"') == [
        ("4", 3, {S.INITIALIZING: 3}),
        ("8", 1, {S.INITIALIZING: 1}),
    ]


@pytest.mark.parametrize(
    ("request_", "code", "fragment"),
    [
        (sweep_pb2.ListArgKeysRequest(parent="experiments/x"), "INVALID_ARGUMENT", "parent"),
        (sweep_pb2.ListArgKeysRequest(parent="experiments/999999"), "NOT_FOUND", "999999"),
        (sweep_pb2.ListArgGroupsRequest(parent="PARENT", key=""), "INVALID_ARGUMENT", "key"),
        (sweep_pb2.ListArgGroupsRequest(parent="PARENT", key="a'b"), "INVALID_ARGUMENT", "key"),
        (
            sweep_pb2.ListArgGroupsRequest(parent="PARENT", key="lr", filter="args.lr >"),
            "INVALID_ARGUMENT",
            "filter",
        ),
        (
            sweep_pb2.ListArgGroupsRequest(parent="experiments/999999", key="lr"),
            "NOT_FOUND",
            "999999",
        ),
    ],
    ids=["bad-parent", "no-experiment", "no-key", "bad-key", "bad-filter", "groups-no-experiment"],
)
async def test_refusals(
    ess: Ess,
    request_: sweep_pb2.ListArgKeysRequest | sweep_pb2.ListArgGroupsRequest,
    code: str,
    fragment: str,
) -> None:
    parent = await sweep(ess, SWEEP[:1])
    api = stub(ess)
    if isinstance(request_, sweep_pb2.ListArgGroupsRequest):
        if request_.parent == "PARENT":
            request_.parent = parent
        call = api.ListArgGroups(request_, metadata=ALICE)
    else:
        call = api.ListArgKeys(request_, metadata=ALICE)
    await expect_error(call, grpc.StatusCode[code], fragment)


async def test_over_rest(ess: Ess) -> None:
    parent = await sweep(ess, SWEEP)
    headers = {"Authorization": "Bearer token-alice"}
    async with running_ui(ess.channel) as base, aiohttp.ClientSession(headers=headers) as session:
        async with session.get(f"{base}/v1/{parent}/argKeys") as response:
            assert response.status == 200
            body = await response.json()
        assert [k["key"] for k in body["keys"]] == ["lr", "layers", "opt"]
        assert body["workUnits"] == "6"
        url = f"{base}/v1/{parent}/argGroups"
        async with session.get(url, params={"key": "opt", "filter": "args.layers > 4"}) as response:
            assert response.status == 200
            body = await response.json()
        assert body["groups"] == [
            {
                "value": "adam",
                "count": "1",
                "stateCounts": [{"state": "INITIALIZING", "count": "1"}],
            },
            {
                "value": "sgd",
                "count": "1",
                "stateCounts": [{"state": "INITIALIZING", "count": "1"}],
            },
        ]
        async with session.get(url, params={"key": "no such"}) as response:
            assert response.status == 400
            assert "key" in (await response.json())["error"]["message"]
