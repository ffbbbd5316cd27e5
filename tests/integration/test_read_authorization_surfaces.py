"""Restricted reads beyond unary gRPC (decision 0048): the push API (a watcher of all
experiments sees only readable ones' events, live and in a catch-up), and xmc-ui — its
REST face, its Server-Sent Events and its pages act as the signed-in person, never as the
dashboard, and answer 404 for what that person may not read."""

from __future__ import annotations

import json

import aiohttp
import grpc

from tests.integration.read_auth_support import BOB, World, refusal, refused_with
from tests.integration.test_watch import new_unit
from tests.integration.ui_support import running_ui
from tests.integration.watching import Watcher, describe, observe
from xmc.model.states import WorkUnitState
from xmc_api.xmc.v1 import watch_pb2, watch_pb2_grpc

HEADERS = {who: {"Authorization": f"Bearer token-{who}"} for who in ("alice", "bob", "root")}


def experiments_of(events: list[watch_pb2.WatchEvent]) -> set[str]:
    return {e.experiment for e in events if e.WhichOneof("kind") != "sync"}


async def test_a_watcher_of_all_sees_only_what_it_may_read(world: World) -> None:
    ess = world.ess
    bobs = Watcher(ess, who="bob", all_experiments=True)
    roots = Watcher(ess, who="root", all_experiments=True)
    await bobs.started()
    await roots.started()
    try:
        await observe(ess, world.unit, WorkUnitState.RUNNING, 10)  # alice's: first
        bobs_unit = await new_unit(ess, world.bobs, BOB)  # then bob's
        # Commit order: had alice's change leaked, it would be in before bob's arrives.
        await bobs.until(1)
        assert experiments_of(bobs.events) == {world.bobs}
        await roots.until(2)
        assert experiments_of(roots.events) == {world.private, world.bobs}
        assert ("state", bobs_unit, 1, "WORK_UNIT_STATE_UNSPECIFIED", "INITIALIZING", True) in [
            describe(e) for e in bobs.change_events()
        ]
    finally:
        await bobs.close()
        await roots.close()


async def test_a_catch_up_from_a_cursor_reads_only_what_it_may(world: World) -> None:
    ess = world.ess
    stub = watch_pb2_grpc.WatchServiceStub(ess.channel)

    async def once(cursor: str = "") -> list[watch_pb2.WatchEvent]:
        request = watch_pb2.WatchRequest(all_experiments=True, once=True, cursor=cursor)
        return [e async for batch in stub.WatchExperiments(request, metadata=BOB)
                for e in batch.events]  # fmt: skip

    cursor = (await once())[-1].cursor
    await observe(ess, world.unit, WorkUnitState.RUNNING, 10)
    await new_unit(ess, world.bobs, BOB)
    assert experiments_of(await once(cursor)) == {world.bobs}


async def test_a_watch_of_one_unreadable_experiment_is_not_found(world: World) -> None:
    stub = watch_pb2_grpc.WatchServiceStub(world.ess.channel)
    call = stub.WatchExperiments(watch_pb2.WatchRequest(experiment=world.private), metadata=BOB)
    details = refused_with(await refusal(call), grpc.StatusCode.NOT_FOUND)
    assert details == f"experiment: {world.private} does not exist"


async def status(session: aiohttp.ClientSession, url: str, who: str) -> tuple[int, str]:
    async with session.get(url, headers=HEADERS[who]) as response:
        return response.status, await response.text()


async def test_rest_acts_as_the_caller(world: World) -> None:
    xid = world.private.split("/")[1]
    async with running_ui(world.ess.channel, token="") as base, aiohttp.ClientSession() as http:
        for path in (
            f"/v1/{world.private}",
            f"/v1/{world.unit}",
            f"/v1/{world.private}/workUnits",
            f"/v1/{world.unit}/containerLogs",
        ):
            assert (await status(http, base + path, "alice"))[0] == 200, path
            code, body = await status(http, base + path, "bob")
            assert code == 404, (path, body)
            assert f"experiments/{xid} does not exist" in json.loads(body)["error"]["message"]
        code, body = await status(http, f"{base}/v1/experiments", "bob")
        assert code == 200
        assert [e["name"] for e in json.loads(body)["experiments"]] == [world.bobs]
        watch = {**HEADERS["bob"], "Accept": "text/event-stream"}
        async with http.get(f"{base}/v1/{world.private}:watch", headers=watch) as response:
            assert response.status == 404


async def test_the_dashboard_shows_each_person_their_own(world: World) -> None:
    xid = world.private.split("/")[1]
    pages = (
        f"/experiments/{xid}",
        f"/experiments/{xid}/workUnits/1",
        f"/experiments/{xid}/workUnits/1/logs",
    )
    async with running_ui(world.ess.channel, token="") as base, aiohttp.ClientSession() as http:
        for page in pages:
            assert (await status(http, base + page, "alice"))[0] == 200, page
            code, html = await status(http, base + page, "bob")
            assert code == 404, page
            assert "does not exist" in html
        _, listing = await status(http, f"{base}/", "bob")
        assert f'href="/experiments/{xid}"' not in listing
        assert f'href="/experiments/{world.bobs.split("/")[1]}"' in listing
        _, listing = await status(http, f"{base}/", "root")
        assert f'href="/experiments/{xid}"' in listing
        async with http.get(f"{base}/experiments/{xid}") as anonymous:  # no credentials
            assert anonymous.status == 401
