"""The REST/JSON face against a real ESS: paths, verbs, bodies, query parameters, errors
and the caller's token, over real HTTP (a throwaway aiohttp app on a free port) and real
gRPC (the ESS fixture, with authentication on)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from google.protobuf import json_format

from tests.integration.ess_harness import Ess
from tests.integration.support import minimal_work_unit
from tests.integration.ui_support import running_ui
from tests.stack import free_port
from ui.rest import add_rest_routes, rest_routes

ALICE = {"Authorization": "Bearer token-alice"}
BOB = {"Authorization": "Bearer token-bob"}
JSON_ALICE = {**ALICE, "Content-Type": "application/json"}
WORK_UNIT = json_format.MessageToDict(minimal_work_unit())


async def _client(app: web.Application) -> TestClient[web.Request, web.Application]:
    client: TestClient[web.Request, web.Application] = TestClient(TestServer(app, port=0))
    await client.start_server()
    return client


@pytest.fixture
async def http(ess: Ess) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    """An app with nothing but the REST routes over the ESS fixture's channel."""
    app = web.Application()
    add_rest_routes(app, ess.channel)
    client = await _client(app)
    yield client
    await client.close()


Http = TestClient[web.Request, web.Application]


async def call(
    http: Http,
    method: str,
    path: str,
    *,
    status: int = 200,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> Any:
    sent = {**(ALICE if headers is None else headers)}
    if method != "GET":  # every REST write says it is JSON (ui.security)
        sent.setdefault("Content-Type", "application/json")
    response = await http.request(method, path, headers=sent, **kwargs)
    assert response.content_type == "application/json"
    body = await response.json()
    assert response.status == status, body
    return body


async def new_experiment(http: Http, title: str = "lr sweep") -> str:
    created = await call(http, "POST", "/v1/experiments", json={"title": title, "tags": ["lr"]})
    name: str = created["name"]
    return name


async def new_work_unit(http: Http, parent: str, **params: str) -> str:
    operation = await call(http, "POST", f"/v1/{parent}/workUnits", json=WORK_UNIT, params=params)
    assert operation["metadata"]["@type"].endswith("cloud.xmanager.v1.OperationMetadata")
    assert operation.get("done") is None, "a launch is not done when CreateWorkUnit answers"
    name: str = operation["name"].split("/operations/")[0]
    return name


async def test_create_get_and_update_an_experiment(http: Http) -> None:
    created = await call(http, "POST", "/v1/experiments", json={"title": "t", "priority": "HIGH"})
    assert created["creator"] == "alice@example.com", "the caller's token reached the ESS"
    assert created["name"].startswith("experiments/")
    assert "createTime" in created, "answers in lowerCamelCase"
    name = created["name"]
    assert await call(http, "GET", f"/v1/{name}") == created
    status = await call(http, "GET", f"/v1/{name}/status")
    assert status["activeState"] == "ACTIVE"

    updated = await call(
        http,
        "PATCH",
        f"/v1/{name}",
        json={"title": "renamed", "notes": "not in the mask"},
        params={"updateMask": "title"},
    )
    assert (updated["title"], updated.get("notes")) == ("renamed", None)
    done = await call(
        http, "POST", f"/v1/{name}:updateLaunchState", json={"launchState": "COMPLETED"}
    )
    assert done["status"]["launchState"] == "COMPLETED"


async def test_list_and_search_experiments_with_query_parameters(http: Http) -> None:
    for title in ("exp a", "exp b", "exp c"):
        await new_experiment(http, title)
    first = await call(http, "GET", "/v1/experiments", params={"pageSize": "2", "orderBy": "title"})
    assert [e["title"] for e in first["experiments"]] == ["exp a", "exp b"]
    rest = await call(
        http,
        "GET",
        "/v1/experiments",
        params={"page_size": "2", "order_by": "title", "pageToken": first["nextPageToken"]},
    )
    assert [e["title"] for e in rest["experiments"]] == ["exp c"]
    found = await call(http, "GET", "/v1/experiments:search", params={"filter": 'title:"exp b"'})
    assert [e["title"] for e in found["experiments"]] == ["exp b"]


async def test_work_units_list_filter_stop_and_restart(http: Http) -> None:
    parent = await new_experiment(http)
    names = [await new_work_unit(http, parent) for _ in range(3)]
    assert names[2] == f"{parent}/workUnits/3"
    again = await new_work_unit(http, parent, workUnitId="7")
    assert again == f"{parent}/workUnits/7", "work_unit_id from the query string"

    page = await call(http, "GET", f"/v1/{parent}/workUnits", params={"pageSize": "2"})
    assert [w["name"] for w in page["workUnits"]] == names[:2]
    assert page["nextPageToken"]

    stop = await call(http, "POST", f"/v1/{names[1]}:stop")
    assert stop["name"].startswith(f"{names[1]}/operations/")
    stopping = await call(
        http, "GET", f"/v1/{parent}/workUnits", params={"filter": "state = STOPPING"}
    )
    assert [w["name"] for w in stopping["workUnits"]] == [names[1]]
    searched = await call(
        http, "GET", f"/v1/{parent}/workUnits:search", params={"filter": "state = STOPPING"}
    )
    assert [w["name"] for w in searched["workUnits"]] == [names[1]]
    unit = await call(http, "GET", f"/v1/{names[1]}")
    assert unit["currentWorkUnitExecution"]["status"]["state"] == "STOPPING"

    await call(http, "POST", f"/v1/{names[0]}:restart", json={})
    executions = await call(http, "GET", f"/v1/{names[0]}/executions")
    assert [e["state"] for e in executions["workUnitExecutions"]] == ["INACTIVE", "ACTIVE"]
    current = await call(http, "GET", f"/v1/{names[0]}/currentExecution")
    assert current["status"]["state"] == "RESTARTING"

    batch = await call(
        http, "POST", f"/v1/{parent}/workUnits:batchStop", json={"filter": "wid = 3"}
    )
    assert batch["name"].startswith(f"{parent}/operations/")
    messages = await call(http, "GET", f"/v1/{parent}/statusMessages")
    assert isinstance(messages, dict)


async def test_grpc_errors_become_google_api_errors(http: Http) -> None:
    missing = await call(http, "GET", "/v1/experiments/987654321", status=404)
    assert missing["error"]["message"] == "name: experiments/987654321 does not exist"
    assert missing["error"]["status"] == "NOT_FOUND"
    assert missing["error"]["code"] == 404
    assert missing["error"]["message"]
    assert missing["error"]["details"] == []

    parent = await new_experiment(http)
    bad_filter = await call(
        http, "GET", f"/v1/{parent}/workUnits", params={"filter": "state = = x"}, status=400
    )
    assert bad_filter["error"]["status"] == "INVALID_ARGUMENT"

    name = await new_work_unit(http, parent)
    forbidden = await call(http, "POST", f"/v1/{name}:stop", headers=BOB, status=403)
    assert forbidden["error"]["status"] == "PERMISSION_DENIED", "bob's token, not alice's"


async def test_authentication_is_the_callers(http: Http) -> None:
    anonymous = await call(http, "GET", "/v1/experiments", headers={}, status=401)
    assert anonymous["error"]["status"] == "UNAUTHENTICATED"
    wrong = await call(
        http, "GET", "/v1/experiments", headers={"Authorization": "Bearer nope"}, status=401
    )
    assert wrong["error"]["status"] == "UNAUTHENTICATED"
    # Other schemes, and other headers, are not forwarded.
    basic = {"Authorization": "Basic dG9rZW4tYWxpY2U6", "X-Authorization": "Bearer token-alice"}
    await call(http, "GET", "/v1/experiments", headers=basic, status=401)
    await call(http, "GET", "/v1/experiments", headers={"Authorization": "bearer token-bob"})


#: (case, method, path, request arguments, a fragment the error message must contain).
BAD_REQUESTS: list[tuple[str, str, str, dict[str, Any], str]] = [
    ("unknown-field", "POST", "/v1/experiments", {"json": {"titel": "x"}}, "titel"),
    ("malformed-json", "POST", "/v1/experiments", {"data": "{not json"}, "not valid JSON"),
    ("not-utf-8", "POST", "/v1/experiments", {"data": b'{"title": "\xff"}'}, "not valid JSON"),
    ("wrong-type", "POST", "/v1/experiments", {"json": {"title": ["x"]}}, "title"),
    ("unknown-parameter", "GET", "/v1/experiments", {"params": {"pageSise": "5"}}, "pageSise"),
    ("bad-number", "GET", "/v1/experiments", {"params": {"pageSize": "many"}}, "pageSize"),
    (
        "repeated-singular",
        "GET",
        "/v1/experiments",
        {"params": [("filter", "a"), ("filter", "b")]},
        "2 times",
    ),
    ("body-on-get", "GET", "/v1/experiments", {"json": {"filter": "x"}}, "takes no request body"),
    ("body-not-object", "POST", "/v1/experiments/1/workUnits/1:stop", {"json": ["x"]}, "object"),
    ("unknown-star-field", "POST", "/v1/experiments/1:updateLaunchState", {"json": {"x": 1}}, "x"),
    ("bad-enum", "POST", "/v1/experiments", {"json": {"priority": "URGENT"}}, "priority"),
    # Each of these three was a 500 (issue 24): OverflowError, then RecursionError twice.
    ("overflow", "POST", "/v1/experiments", {"data": '{"priority": 1e400}'}, "out of range"),
    ("deep-100k", "POST", "/v1/experiments", {"data": "[" * 100_000 + "]" * 100_000}, "nests"),
    (
        "deep-200k",
        "POST",
        "/v1/experiments",
        {"data": '{"a":[' * 100_000 + "]}" * 100_000},  # 200,000 deep in 1 MB
        "nests",
    ),
    ("nan", "POST", "/v1/experiments", {"data": '{"priority": NaN}'}, "NaN"),
    ("long-int", "POST", "/v1/experiments", {"data": '{"priority": 1' + "0" * 5000 + "}"}, "JSON"),
]


async def test_bad_requests_are_400_naming_the_field(http: Http) -> None:
    """One ESS for the whole table: most of these never reach it."""
    for case, method, path, kwargs, fragment in BAD_REQUESTS:
        body = await call(http, method, path, status=400, **kwargs)
        assert body["error"]["status"] == "INVALID_ARGUMENT", case
        assert fragment in body["error"]["message"], (case, body)


async def test_unknown_paths_and_wrong_verbs(http: Http) -> None:
    unknown = await call(http, "GET", "/v1/nothing/here", status=404)
    assert unknown["error"]["status"] == "NOT_FOUND"
    await call(http, "GET", "/v1/experiments/1:explode", status=404)
    response = await http.get("/v1/experiments/1/workUnits/2:stop", headers=ALICE)
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    response = await http.delete("/v1/experiments/1", headers=JSON_ALICE)
    assert (response.status, response.headers["Allow"]) == (405, "GET, PATCH")
    assert (await response.json())["error"]["code"] == 405


async def test_artifacts_and_delete(http: Http) -> None:
    parent = await new_experiment(http)
    artifact = await call(
        http,
        "POST",
        f"/v1/{parent}/artifacts",
        json={"tags": ["ckpt"], "dataType": "MODEL_SNAPSHOTS", "notes": "step 10"},
    )
    assert await call(http, "GET", f"/v1/{artifact['name']}") == artifact
    listed = await call(http, "GET", f"/v1/{parent}/artifacts")
    assert [a["name"] for a in listed["artifacts"]] == [artifact["name"]]
    assert await call(http, "DELETE", f"/v1/{artifact['name']}") == {}
    await call(http, "GET", f"/v1/{artifact['name']}", status=404)


async def test_an_unreachable_ess_is_503() -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{free_port()}")
    app = web.Application()
    app.add_routes(rest_routes(lambda: channel, timeout=5))
    client = await _client(app)
    try:
        body = await call(client, "GET", "/v1/experiments", status=503)
        assert body["error"]["status"] == "UNAVAILABLE"
    finally:
        await client.close()
        await channel.close()


async def test_an_oversized_body_is_a_json_error(http: Http) -> None:
    big = {"title": "x" * (2 * 1024 * 1024)}
    response = await http.post("/v1/experiments", json=big, headers=JSON_ALICE)
    assert response.status == 413
    assert (await response.json())["error"]["code"] == 413


async def test_real_tcp_site_on_a_free_port(ess: Ess) -> None:
    """The routes on a real listener, as the dashboard serves them."""
    app = web.Application()
    add_rest_routes(app, ess.channel)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = f"http://127.0.0.1:{port}/v1/experiments"
        async with (
            aiohttp.ClientSession(headers=ALICE) as session,
            session.post(url, json={"title": "tcp"}) as response,
        ):
            assert response.status == 200
            assert (await response.json())["title"] == "tcp"
    finally:
        await runner.cleanup()


async def unit_state(http: Http, name: str) -> str:
    unit = await call(http, "GET", f"/v1/{name}")
    state: str = unit["currentWorkUnitExecution"]["status"]["state"]
    return state


async def test_rest_writes_without_the_json_content_type_are_415(http: Http) -> None:
    """What a page on another site can send without a CORS preflight — no body, a
    text/plain body that is valid JSON, a form — never acts (issue 24)."""
    parent = await new_experiment(http)
    name = await new_work_unit(http, parent)
    before = await unit_state(http, name)
    attempts: list[tuple[str, str, dict[str, str], str | None]] = [
        ("POST", f"/v1/{name}:stop", {}, None),
        ("POST", f"/v1/{parent}/workUnits:batchStop", {"Content-Type": "text/plain"}, "{}"),
        (
            "POST",
            "/v1/experiments",
            {"Content-Type": "application/x-www-form-urlencoded"},
            '{"title": "forged", "x": "="}',
        ),
        ("POST", "/v1/experiments", {"Content-Type": "text/plain;charset=UTF-8"}, '{"title": "f"}'),
        ("DELETE", "/v1/artifacts/1", {}, None),
    ]
    for method, path, headers, data in attempts:
        response = await http.request(method, path, headers={**ALICE, **headers}, data=data)
        body = await response.json()
        assert response.status == 415, (method, path, body)
        assert "Content-Type: application/json" in body["error"]["message"]
        assert body["error"]["status"] == "INVALID_ARGUMENT"
    assert await unit_state(http, name) == before
    listed = await call(http, "GET", "/v1/experiments", params={"filter": 'title = "forged"'})
    assert listed == {}
    # The same writes with the header act.
    await call(http, "POST", f"/v1/{name}:stop", headers=JSON_ALICE)
    assert await unit_state(http, name) == "STOPPING"


async def test_cross_site_rest_writes_are_refused_on_the_dashboard(ess: Ess) -> None:
    """On the dashboard's listener (``create_app``), a write whose ``Origin`` or
    ``Sec-Fetch-Site`` names another site is a 403 before it reaches the ESS; reads,
    same-origin writes and clients without those headers work."""
    async with running_ui(ess.channel, token="") as base, aiohttp.ClientSession() as session:

        async def send(method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
            sent = {**JSON_ALICE, **headers}
            async with session.request(method, f"{base}{path}", headers=sent, **kw) as response:
                return response.status, await response.json()

        status, created = await send("POST", "/v1/experiments", {}, json={"title": "mine"})
        assert status == 200, created
        name = created["name"]
        foreign = [
            {"Origin": "https://evil.example"},
            {"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site", "Origin": "http://other.127.0.0.1.nip.io"},
            {"Origin": "null"},
            {"Origin": base.replace("http://", "https://")},  # the scheme counts
        ]
        for headers in foreign:
            for method, path, body in (
                ("POST", f"/v1/{name}:updateLaunchState", {"launchState": "COMPLETED"}),
                ("POST", "/v1/experiments", {"title": "forged"}),
                ("PATCH", f"/v1/{name}?updateMask=title", {"title": "forged"}),
            ):
                status, answer = await send(method, path, headers, json=body)
                assert status == 403, (headers, path, answer)
                assert answer["error"]["status"] == "PERMISSION_DENIED"
                assert "another site" in answer["error"]["message"]
        status, answer = await send("GET", f"/v1/{name}", {"Origin": "https://evil.example"})
        assert (status, answer["title"]) == (200, "mine"), "reads are not writes"
        assert answer["status"]["launchState"] != "COMPLETED"
        status, found = await send(
            "GET", "/v1/experiments", {}, params={"filter": 'title = "forged"'}
        )
        assert (status, found) == (200, {})

        for headers in ({"Origin": base, "Sec-Fetch-Site": "same-origin"}, {"Origin": base}, {}):
            status, answer = await send(
                "PATCH", f"/v1/{name}?updateMask=title", headers, json={"title": "renamed"}
            )
            assert (status, answer.get("title")) == (200, "renamed"), (headers, answer)
