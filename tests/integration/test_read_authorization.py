"""Restricted reads over real gRPC against a real ESS and Postgres (decision 0048): a caller
who may not read an experiment gets, from every RPC that names it, the NOT_FOUND a missing
one gets; the owner, a group member and an admin read it; the listing is filtered in SQL
with full pages and tokens another caller cannot use; ACL changes take effect at once;
readers are backfilled from the ACL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import asyncpg
import grpc
import jwt
import pytest
from google.longrunning import operations_grpc_pb2
from google.longrunning import operations_proto_pb2 as ops
from google.protobuf.duration_pb2 import Duration
from google.protobuf.field_mask_pb2 import FieldMask

from tests.integration.ess_harness import Ess, EssFactory
from tests.integration.read_auth_support import (
    ALICE,
    BOB,
    CAROL,
    HS256_SECRET,
    ROOT,
    Metadata,
    World,
    build_world,
    create_experiment,
    refusal,
    refused_with,
    set_acls,
)
from tests.integration.support import minimal_work_unit
from xmc.store.migrate import migrate
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.xid_pb2 import XidAcls
from xmc_api.xmc.v1 import (
    logs_pb2,
    logs_pb2_grpc,
    notifications_pb2,
    notifications_pb2_grpc,
    retry_pb2,
    retry_pb2_grpc,
    spec_pb2,
    spec_pb2_grpc,
    sweep_pb2,
    sweep_pb2_grpc,
    timeline_pb2,
    timeline_pb2_grpc,
    watch_pb2,
    watch_pb2_grpc,
)

Names = dict[str, str]  # experiment, unit, operation
Call = Callable[[Ess, Names, Metadata], Any]
MISSING = "experiments/999999"


def _api(method: str, request: Callable[[Names], Any]) -> Call:
    return lambda ess, n, md: getattr(ess.api, method)(request(n), metadata=md)


def _stub(stub: Any, method: str, request: Callable[[Names], Any]) -> Call:
    return lambda ess, n, md: getattr(stub(ess.channel), method)(request(n), metadata=md)


A = api_pb2
READS: list[Any] = [
    pytest.param(_api("GetExperiment", lambda n: A.GetExperimentRequest(name=n["x"])), id="get"),
    pytest.param(
        _api("GetExperimentStatus", lambda n: A.GetExperimentStatusRequest(name=n["x"])),
        id="status",
    ),
    pytest.param(_api("GetWorkUnit", lambda n: A.GetWorkUnitRequest(name=n["u"])), id="unit"),
    pytest.param(
        _api(
            "GetCurrentWorkUnitExecution",
            lambda n: A.GetCurrentWorkUnitExecutionRequest(name=n["u"]),
        ),
        id="current execution",
    ),
    pytest.param(
        _api("ListWorkUnitExecutions", lambda n: A.ListWorkUnitExecutionsRequest(parent=n["u"])),
        id="executions",
    ),
    pytest.param(_api("ListWorkUnits", lambda n: A.ListWorkUnitsRequest(parent=n["x"])), id="wus"),
    pytest.param(
        _api("SearchWorkUnits", lambda n: A.ListWorkUnitsRequest(parent=n["x"])), id="search wus"
    ),
    pytest.param(
        _api("ListArtifacts", lambda n: A.ListArtifactsRequest(parent=n["x"])), id="artifacts"
    ),
    pytest.param(
        _api("ListStatusMessages", lambda n: A.ListStatusMessagesRequest(parent=n["u"])),
        id="messages",
    ),
    pytest.param(
        _stub(
            operations_grpc_pb2.OperationsStub,
            "ListOperations",
            lambda n: ops.ListOperationsRequest(name=n["x"]),
        ),
        id="operations",
    ),
    pytest.param(
        _stub(
            operations_grpc_pb2.OperationsStub,
            "GetOperation",
            lambda n: ops.GetOperationRequest(name=n["o"]),
        ),
        id="operation",
    ),
    pytest.param(
        _stub(
            operations_grpc_pb2.OperationsStub,
            "WaitOperation",
            lambda n: ops.WaitOperationRequest(name=n["o"], timeout=Duration(seconds=0)),
        ),
        id="wait operation",
    ),
    pytest.param(
        _stub(
            timeline_pb2_grpc.TimelineServiceStub,
            "GetWorkUnitTimeline",
            lambda n: timeline_pb2.GetWorkUnitTimelineRequest(name=n["u"]),
        ),
        id="timeline",
    ),
    pytest.param(
        _stub(
            timeline_pb2_grpc.TimelineServiceStub,
            "GetExperimentTimings",
            lambda n: timeline_pb2.GetExperimentTimingsRequest(name=n["x"]),
        ),
        id="timings",
    ),
    pytest.param(
        _stub(
            logs_pb2_grpc.LogServiceStub,
            "ListContainerLogs",
            lambda n: logs_pb2.ListContainerLogsRequest(parent=n["u"]),
        ),
        id="container logs",
    ),
    pytest.param(
        _stub(
            logs_pb2_grpc.LogServiceStub,
            "ReadWorkUnitLogs",
            lambda n: logs_pb2.ReadWorkUnitLogsRequest(name=n["u"]),
        ),
        id="read logs (a stream)",
    ),
    pytest.param(
        _stub(
            logs_pb2_grpc.LogServiceStub,
            "ListExitCodes",
            lambda n: logs_pb2.ListExitCodesRequest(parent=n["x"], work_unit_ids=[1]),
        ),
        id="exit codes",
    ),
    pytest.param(
        _stub(
            spec_pb2_grpc.SpecServiceStub,
            "GetExecutionManifest",
            lambda n: spec_pb2.GetExecutionManifestRequest(name=f"{n['u']}/executions/1"),
        ),
        id="manifest",
    ),
    pytest.param(
        _stub(
            sweep_pb2_grpc.SweepServiceStub,
            "ListArgKeys",
            lambda n: sweep_pb2.ListArgKeysRequest(parent=n["x"]),
        ),
        id="arg keys",
    ),
    pytest.param(
        _stub(
            sweep_pb2_grpc.SweepServiceStub,
            "ListArgGroups",
            lambda n: sweep_pb2.ListArgGroupsRequest(parent=n["x"], key="lr"),
        ),
        id="arg groups",
    ),
    pytest.param(
        _stub(
            retry_pb2_grpc.RetryServiceStub,
            "GetExperimentRetryPolicy",
            lambda n: retry_pb2.GetExperimentRetryPolicyRequest(name=n["x"]),
        ),
        id="retry policy",
    ),
    pytest.param(
        _stub(
            retry_pb2_grpc.RetryServiceStub,
            "GetWorkUnitRetries",
            lambda n: retry_pb2.GetWorkUnitRetriesRequest(name=n["u"]),
        ),
        id="retry info",
    ),
    pytest.param(
        _stub(
            notifications_pb2_grpc.NotificationServiceStub,
            "ListWebhooks",
            lambda n: notifications_pb2.ListWebhooksRequest(parent=n["x"]),
        ),
        id="webhooks",
    ),
    pytest.param(
        _stub(
            notifications_pb2_grpc.NotificationServiceStub,
            "ListDeliveries",
            lambda n: notifications_pb2.ListDeliveriesRequest(parent=n["x"]),
        ),
        id="webhook delivery log",
    ),
    pytest.param(
        _stub(
            watch_pb2_grpc.WatchServiceStub,
            "WatchExperiments",
            lambda n: watch_pb2.WatchRequest(experiment=n["x"], once=True),
        ),
        id="watch one experiment (a stream)",
    ),
    # Writes: a caller who may not read learns nothing from trying to change.
    pytest.param(_api("StopWorkUnit", lambda n: A.StopWorkUnitRequest(name=n["u"])), id="stop"),
    pytest.param(
        _api(
            "CreateWorkUnit",
            lambda n: A.CreateWorkUnitRequest(parent=n["x"], work_unit=minimal_work_unit()),
        ),
        id="create unit",
    ),
    pytest.param(
        _api(
            "UpdateExperiment",
            lambda n: A.UpdateExperimentRequest(
                experiment=Experiment(name=n["x"], title="mine"),
                update_mask=FieldMask(paths=["title"]),
            ),
        ),
        id="update",
    ),
    pytest.param(
        _stub(
            retry_pb2_grpc.RetryServiceStub,
            "SetExperimentRetryPolicy",
            lambda n: retry_pb2.SetExperimentRetryPolicyRequest(name=n["x"], policy=""),
        ),
        id="set retry policy",
    ),
]


def names(world: World, experiment: str) -> Names:
    unit = world.unit.replace(world.private, experiment)
    return {"x": experiment, "u": unit, "o": world.operation.replace(world.private, experiment)}


@pytest.mark.parametrize("call", READS)
async def test_someone_elses_experiment_is_not_found_on_every_rpc(world: World, call: Call) -> None:
    ess = world.ess
    refused = await refusal(call(ess, names(world, world.private), BOB))
    details = refused_with(refused, grpc.StatusCode.NOT_FOUND)
    # Word for word what an experiment that does not exist gets: existence is not confirmed.
    missing = await refusal(call(ess, names(world, MISSING), BOB))
    assert details == refused_with(missing, grpc.StatusCode.NOT_FOUND).replace(
        MISSING, world.private
    )


@pytest.mark.parametrize("who", [ALICE, ROOT], ids=["the creator", "an admin"])
@pytest.mark.parametrize("call", READS)
async def test_the_creator_and_admins_pass_the_gate(
    world: World, call: Call, who: Metadata
) -> None:
    refused = await refusal(call(world.ess, names(world, world.private), who))
    # Some calls fail for their own reasons (no manifest is stored without an Actuator).
    assert refused is None or f"{world.private} does not exist" not in (refused.details() or "")


async def test_artifacts_and_webhooks_by_their_own_names(world: World) -> None:
    ess = world.ess
    get = ess.api.GetArtifact(api_pb2.GetArtifactRequest(name=world.artifact), metadata=BOB)
    refused = await refusal(get)
    assert (
        refused_with(refused, grpc.StatusCode.NOT_FOUND) == f"name: {world.artifact} does not exist"
    )
    gone = await refusal(ess.api.GetArtifact(api_pb2.GetArtifactRequest(name="artifacts/999999"),
                                             metadata=BOB))  # fmt: skip
    assert refused_with(gone, grpc.StatusCode.NOT_FOUND) == "name: artifacts/999999 does not exist"
    hooks = notifications_pb2_grpc.NotificationServiceStub(ess.channel)
    delete = hooks.DeleteWebhook(notifications_pb2.DeleteWebhookRequest(name=world.webhook),
                                 metadata=BOB)  # fmt: skip
    refused = await refusal(delete)
    assert (
        refused_with(refused, grpc.StatusCode.NOT_FOUND) == f"name: {world.webhook} does not exist"
    )
    assert (await ess.api.GetArtifact(api_pb2.GetArtifactRequest(name=world.artifact),
                                      metadata=ALICE)).name == world.artifact  # fmt: skip


async def test_a_group_member_reads_what_the_group_may(world: World) -> None:
    ess = world.ess
    shared = api_pb2.GetExperimentRequest(name=world.shared)
    assert (await ess.api.GetExperiment(shared, metadata=CAROL)).name == world.shared
    refused = await refusal(ess.api.GetExperiment(shared, metadata=BOB))
    refused_with(refused, grpc.StatusCode.NOT_FOUND)
    refused = await refusal(
        ess.api.GetExperiment(api_pb2.GetExperimentRequest(name=world.private), metadata=CAROL)
    )
    refused_with(refused, grpc.StatusCode.NOT_FOUND)


async def test_a_tokens_groups_claim_grants_read(world: World) -> None:
    def token(groups: list[str]) -> Metadata:
        claims = {"email": "dave@example.com", "exp": 4102444800, "groups": groups}
        return (("authorization", f"Bearer {jwt.encode(claims, HS256_SECRET, 'HS256')}"),)

    shared = api_pb2.GetExperimentRequest(name=world.shared)
    assert (await world.ess.api.GetExperiment(shared, metadata=token(["ml-team"]))).name
    refused = await refusal(world.ess.api.GetExperiment(shared, metadata=token(["other"])))
    refused_with(refused, grpc.StatusCode.NOT_FOUND)


async def listed(
    ess: Ess, who: Metadata, page_size: int = 0, token: str = ""
) -> tuple[list[str], str]:
    found = await ess.api.SearchExperiments(
        api_pb2.ListExperimentsRequest(page_size=page_size, page_token=token), metadata=who
    )
    return [e.name for e in found.experiments], found.next_page_token


async def test_the_listing_holds_what_each_caller_may_read(world: World) -> None:
    ess = world.ess
    everything = {world.private, world.shared, world.bobs}
    assert set((await listed(ess, ALICE))[0]) == {world.private, world.shared}
    assert (await listed(ess, BOB))[0] == [world.bobs]
    assert (await listed(ess, CAROL))[0] == [world.shared]
    assert set((await listed(ess, ROOT))[0]) == everything


async def test_pages_are_full_and_a_token_serves_only_its_caller(world: World) -> None:
    ess = world.ess
    bobs = [world.bobs]
    for _ in range(3):  # interleaved with alice's, so a post-filter would leave holes
        await create_experiment(ess, ALICE)
        bobs.append(await create_experiment(ess, BOB))
    walked, token = [], ""
    while True:
        page, token = await listed(ess, BOB, page_size=2, token=token)
        assert len(page) == 2 or not token, "a page came back short"
        walked += page
        if not token:
            break
    assert sorted(walked) == sorted(bobs)  # each once
    assert len(set(walked)) == len(walked)
    _, alices_token = await listed(ess, ALICE, page_size=1)
    refused = await refusal(
        ess.api.SearchExperiments(
            api_pb2.ListExperimentsRequest(page_size=1, page_token=alices_token), metadata=BOB
        )
    )
    details = refused_with(refused, grpc.StatusCode.INVALID_ARGUMENT)
    assert "page_token: does not match" in details


async def test_an_acl_change_takes_effect_at_once(world: World) -> None:
    ess = world.ess
    get = api_pb2.GetExperimentRequest(name=world.private)
    await set_acls(ess, world.private, XidAcls(readers=[XidAcls.Role(user="Bob@example.com")]))
    assert (await ess.api.GetExperiment(get, metadata=BOB)).name == world.private
    assert world.private in (await listed(ess, BOB))[0]
    await set_acls(ess, world.private, XidAcls())
    refused = await refusal(ess.api.GetExperiment(get, metadata=BOB))
    refused_with(refused, grpc.StatusCode.NOT_FOUND)
    assert world.private not in (await listed(ess, BOB))[0]


async def test_a_reader_who_may_not_write_is_refused_as_before(world: World) -> None:
    refused = await refusal(
        world.ess.api.StopWorkUnit(
            api_pb2.StopWorkUnitRequest(name=world.unit.replace(world.private, world.shared)),
            metadata=CAROL,
        )
    )
    refused_with(refused, grpc.StatusCode.PERMISSION_DENIED)


async def test_readers_are_backfilled_from_the_acl(world: World) -> None:
    ess = world.ess
    conn = await asyncpg.connect(ess.database_url)
    try:  # as an ESS older than migration 0015 leaves them
        await conn.execute("UPDATE experiments SET readers = NULL")
        refused = await refusal(
            ess.api.GetExperiment(api_pb2.GetExperimentRequest(name=world.shared), metadata=ALICE)
        )
        refused_with(refused, grpc.StatusCode.NOT_FOUND)
        await migrate(ess.database_url)
        rows = await conn.fetch("SELECT xid, readers FROM experiments ORDER BY xid")
    finally:
        await conn.close()
    assert [r["readers"] for r in rows] == [
        ["alice@example.com"],
        ["alice@example.com", "group:ml-team"],
        ["bob@example.com"],
    ]


async def test_without_restricted_reads_everyone_reads_everything(ess_factory: EssFactory) -> None:
    plain = await build_world(await ess_factory())
    for call in READS[:12]:
        refused = await refusal(call.values[0](plain.ess, names(plain, plain.private), BOB))
        assert refused is None or "does not exist" not in (refused.details() or "")
    assert len((await listed(plain.ess, BOB))[0]) == 3
