"""The audit trail end to end (docs/audit.md): an ESS and an xmc-ui as OS processes with
static tokens; alice stops one unit through the published client's gRPC call and one
through the dashboard, each with her own request id, and both stops are "by alice" on the
unit page, in the history, on the Operation and in the admin's audit list — though the
dashboard has an admin account of its own (XMC_UI_TOKEN); non-admins are refused."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import grpc
import pytest
from google.protobuf.timestamp_pb2 import Timestamp

from ess.service import ExperimentStateService
from tests.integration.ess_harness import EssFactory
from tests.integration.ess_harness import metadata as harness_metadata
from tests.integration.support import fetch_all, minimal_work_unit
from tests.integration.ui_support import ess_and_ui_processes
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.xmc.v1 import audit_pb2, audit_pb2_grpc, timeline_pb2, timeline_pb2_grpc

BIN = Path(sys.executable).parent
ALICE = "alice@example.com"
TOKENS = {
    "token-alice": ALICE,
    "token-bob": "bob@example.com",
    "token-root": "root@example.com",
    # The dashboard's own account (XMC_UI_TOKEN), an admin: what a visitor without a
    # token of their own acts as, and what a signed-in person's stop must not be put on.
    "token-dashboard": "dashboard@robots.example.com",
}


def published(token: str, email: str, request_id: str = "") -> tuple[tuple[str, str], ...]:
    """What the published client sends (bearer token, its user's email), and a request id."""
    metadata = (("authorization", f"Bearer {token}"), ("x-goog-user-email", email))
    return (*metadata, ("x-request-id", request_id)) if request_id else metadata


@dataclass
class Stack:
    ui: str
    channel: grpc.aio.Channel
    database_url: str


@pytest.fixture
async def stack(database_url: str, tmp_path: Path) -> AsyncIterator[Stack]:
    env = {
        "XMC_AUTH_STATIC_TOKENS": ",".join(f"{t}={e}" for t, e in TOKENS.items()),
        "XMC_AUTH_ADMINS": "root@example.com,dashboard@robots.example.com",
        "XMC_UI_TOKEN": "token-dashboard",
    }
    async with ess_and_ui_processes(database_url, tmp_path, env) as live:
        channel = grpc.aio.insecure_channel(f"127.0.0.1:{live.ess_port}")
        try:
            yield Stack(live.ui, channel, database_url)
        finally:
            await channel.close()


async def _unit(api: api_pb2_grpc.ExperimentStateServiceStub, parent: str) -> str:
    request = api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=minimal_work_unit())
    operation = await api.CreateWorkUnit(request, metadata=published("token-alice", ALICE))
    name: str = operation.name
    return name.split("/operations/")[0]


async def test_a_stop_is_attributed_to_alice_everywhere(stack: Stack) -> None:
    api = api_pb2_grpc.ExperimentStateServiceStub(stack.channel)
    alice = published("token-alice", ALICE)
    experiment = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="audited")), metadata=alice
    )
    xid = int(experiment.name.split("/")[1])
    by_grpc, by_dashboard = [await _unit(api, experiment.name) for _ in range(2)]

    # 1. The published client's StopWorkUnit, with alice's token and request id; the ESS
    #    returns the id in the trailing metadata.
    call = api.StopWorkUnit(
        api_pb2.StopWorkUnitRequest(name=by_grpc),
        metadata=published("token-alice", ALICE, "alice-grpc-stop-1"),
    )
    operation = await call
    assert ("x-request-id", "alice-grpc-stop-1") in tuple(await call.trailing_metadata())

    # 2. The dashboard's Stop button, behind a proxy that signs alice in (Authorization)
    #    and names the request (X-Request-Id).
    browser = {"Authorization": "Bearer token-alice", "X-Request-Id": "alice-dash-stop-1"}
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{stack.ui}/{by_dashboard}/stop", headers=browser, allow_redirects=False
        ) as response:
            assert response.status in (302, 303), await response.text()
            assert response.headers["X-Request-Id"] == "alice-dash-stop-1"
        # 3. The unit page says who stopped it.
        for unit in (by_grpc, by_dashboard):
            async with http.get(f"{stack.ui}/{unit}", headers=browser) as page:
                text = await page.text()
                assert page.status == 200, text
                assert f"stopped by <b>{ALICE}</b>" in text
                assert f"created by <b>{ALICE}</b>" in text

    # 4. The history rows and the Operations carry principal and request id.
    rows = await fetch_all(
        stack.database_url,
        """SELECT wid, principal, request_id FROM work_unit_status_history
           WHERE xid = $1 AND new_state = 6 ORDER BY wid""",
        xid,
    )
    assert [(r["principal"], r["request_id"]) for r in rows] == [
        (ALICE, "alice-grpc-stop-1"),
        (ALICE, "alice-dash-stop-1"),
    ]
    ops = await fetch_all(
        stack.database_url,
        "SELECT name, original_requester, request_id FROM operations WHERE action_type = 2 "
        "AND xid = $1 ORDER BY wid",
        xid,
    )
    assert [(o["original_requester"], o["request_id"]) for o in ops] == [
        (ALICE, "alice-grpc-stop-1"),
        (ALICE, "alice-dash-stop-1"),
    ]
    assert ops[0]["name"] == operation.name

    # 5. The timeline carries the principal per change.
    timelines = timeline_pb2_grpc.TimelineServiceStub(stack.channel)
    timeline = await timelines.GetWorkUnitTimeline(
        timeline_pb2.GetWorkUnitTimelineRequest(name=by_grpc), metadata=alice
    )
    last = timeline.executions[-1].changes[-1]
    assert (last.principal, last.request_id) == (ALICE, "alice-grpc-stop-1")
    assert timeline.stopped.principal == ALICE

    # 6. An edit without history row or Operation lands in the audit log.
    edit = api_pb2.UpdateExperimentRequest(
        experiment=Experiment(name=experiment.name, title="renamed")
    )
    edit.update_mask.paths.append("title")
    await api.UpdateExperiment(edit, metadata=published("token-alice", ALICE, "alice-edit-1"))

    # 7. The admin's audit list, over REST and gRPC.
    root = {"Authorization": "Bearer token-root"}
    since = {"principal": ALICE, "since": "2000-01-01T00:00:00Z"}
    future = {"principal": ALICE, "since": "2999-01-01T00:00:00Z"}
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{stack.ui}/v1/audit", params=since, headers=root) as response:
            body = await response.json()
            assert response.status == 200, body
        async with http.get(f"{stack.ui}/v1/audit", params=future, headers=root) as response:
            assert (await response.json()).get("events", []) == []
    seen = {(e["action"], e["requestId"]) for e in body["events"]}
    assert {
        ("StopWorkUnit", "alice-grpc-stop-1"),
        ("StopWorkUnit", "alice-dash-stop-1"),
        ("UpdateExperiment", "alice-edit-1"),
    } <= seen
    assert {e["action"] for e in body["events"]} >= {"CreateExperiment", "CreateWorkUnit"}
    assert {e["principal"] for e in body["events"]} == {ALICE}
    audit = audit_pb2_grpc.AuditServiceStub(stack.channel)
    page = await audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(experiment=experiment.name, page_size=2),
        metadata=published("token-root", "root@example.com"),
    )
    assert len(page.events) == 2
    assert page.next_page_token
    assert page.events[0].action == "UpdateExperiment", "newest first"
    assert all(e.principal == ALICE for e in page.events)
    rest = await audit.ListAuditEvents(
        audit_pb2.ListAuditEventsRequest(
            experiment=experiment.name, page_size=100, page_token=page.next_page_token
        ),
        metadata=published("token-root", "root@example.com"),
    )
    walked = [(e.action, e.target) for e in (*page.events, *rest.events)]
    # The experiment, two units, two stops, one edit: each once across the pages.
    assert len(walked) == len(set(walked)) == 6, walked
    assert not rest.next_page_token


async def test_only_admins_read_the_audit_trail(stack: Stack) -> None:
    audit = audit_pb2_grpc.AuditServiceStub(stack.channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await audit.ListAuditEvents(
            audit_pb2.ListAuditEventsRequest(), metadata=published("token-bob", "bob@example.com")
        )
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "not an admin" in (refused.value.details() or "")
    bob = {"Authorization": "Bearer token-bob"}
    async with aiohttp.ClientSession() as http:
        for path in ("/v1/audit", "/audit"):
            async with http.get(f"{stack.ui}{path}", headers=bob) as response:
                assert response.status == 403, (path, await response.text())
        async with http.get(
            f"{stack.ui}/audit", headers={"Authorization": "Bearer token-root"}
        ) as response:
            assert response.status == 200


async def test_a_malformed_request_id_is_refused_naming_it(stack: Stack) -> None:
    api = api_pb2_grpc.ExperimentStateServiceStub(stack.channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await api.ListExperiments(
            api_pb2.ListExperimentsRequest(),
            metadata=published("token-alice", ALICE, "x" * 129),
        )
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith("x-request-id:")
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{stack.ui}/", headers={"Authorization": "Bearer token-alice", "X-Request-Id": "a b"}
        ) as response,
    ):
        assert response.status == 400
        assert "x-request-id" in await response.text()


async def test_an_internal_error_names_the_callers_request_id(
    ess_factory: EssFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message of an INTERNAL answer names the request id the caller sent (and the
    ESS logged), so a user's report finds the server's log line."""

    async def broken(self: object, request: object, context: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(ExperimentStateService, "GetExperiment", broken)
    ess = await ess_factory()
    call = ess.api.GetExperiment(
        api_pb2.GetExperimentRequest(name="experiments/1"),
        metadata=(*harness_metadata("alice"), ("x-request-id", "report-me-42")),
    )
    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await call
    assert failed.value.code() == grpc.StatusCode.INTERNAL
    assert (failed.value.details() or "").endswith("(request id report-me-42)")
    assert ("x-request-id", "report-me-42") in tuple(await call.trailing_metadata())


@pytest.mark.parametrize(
    ("request_", "names"),
    [
        pytest.param(audit_pb2.ListAuditEventsRequest(experiment="nope"), "experiment", id="exp"),
        pytest.param(
            audit_pb2.ListAuditEventsRequest(
                since=Timestamp(seconds=200), until=Timestamp(seconds=100)
            ),
            "until",
            id="range backwards",
        ),
        pytest.param(audit_pb2.ListAuditEventsRequest(page_size=-1), "page_size", id="size"),
        pytest.param(audit_pb2.ListAuditEventsRequest(page_token="forged"), "page_token", id="tok"),
        pytest.param(audit_pb2.ListAuditEventsRequest(filter="colour = 1"), "filter", id="filter"),
    ],
)
async def test_a_bad_audit_request_names_its_field(
    ess_factory: EssFactory, request_: audit_pb2.ListAuditEventsRequest, names: str
) -> None:
    ess = await ess_factory()
    audit = audit_pb2_grpc.AuditServiceStub(ess.channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await audit.ListAuditEvents(request_, metadata=harness_metadata("root"))
    assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (refused.value.details() or "").startswith(f"{names}:"), refused.value.details()
