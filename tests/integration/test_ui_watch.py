"""The push API through a live xmc-ui with a real HTTP client (docs/watch.md):
Server-Sent Events whose ids are cursors, a reconnect with ``Last-Event-ID`` that misses
nothing and repeats nothing, newline-delimited JSON for other callers, and refusals."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from tests.integration.ess_harness import Ess
from tests.integration.test_watch import new_experiment, new_unit
from tests.integration.ui_support import running_ui
from tests.integration.watching import observe
from xmc.model.states import WorkUnitState

S = WorkUnitState
ALICE = {"Authorization": "Bearer token-alice"}
SSE = {**ALICE, "Accept": "text/event-stream"}


async def events(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The SSE events of a response as {"id", "event", "data"} (data parsed), skipping the
    ``retry:`` preamble."""
    fields: dict[str, Any] = {}
    async for raw in response.content:
        line = raw.decode().rstrip("\n")
        if not line:
            if "data" in fields:
                fields["data"] = json.loads(fields["data"])
                yield fields
            fields = {}
            continue
        name, _, value = line.partition(": ")
        fields[name] = value


async def read(response: aiohttp.ClientResponse, count: int) -> list[dict[str, Any]]:
    """The next ``count`` events that are not Syncs."""
    found: list[dict[str, Any]] = []
    async for event in events(response):
        if event.get("event") != "sync":
            found.append(event)
        if len(found) == count:
            break
    return found


def summary(event: dict[str, Any]) -> tuple[str, str]:
    data = event["data"]
    if event["event"] == "state_change":
        return (data["stateChange"]["workUnit"], data["stateChange"]["toState"])
    return (event["event"], data["experiment"])


async def test_server_sent_events_resume_from_the_last_event_id(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    url_path = f"/v1/{experiment}:watch"
    async with running_ui(ess.channel) as base, aiohttp.ClientSession() as session:
        async with session.get(f"{base}{url_path}", headers=SSE) as response:
            assert response.status == 200
            assert response.content_type == "text/event-stream"
            opening = await anext(events(response))
            assert opening["event"] == "sync"
            assert opening["id"] == opening["data"]["cursor"]
            units = [await new_unit(ess, experiment) for _ in range(2)]
            first = await read(response, 2)
        assert [summary(e) for e in first] == [(u, "INITIALIZING") for u in units]
        assert all(e["id"] == e["data"]["cursor"] for e in first)

        # Away: changes happen; back with Last-Event-ID, as a browser reconnects.
        for unit in units:
            await observe(ess, unit, S.RUNNING, 10)
        headers = {**SSE, "Last-Event-ID": first[-1]["id"]}
        async with session.get(f"{base}{url_path}", headers=headers) as response:
            resumed_open = await anext(events(response))
            assert resumed_open["id"] == first[-1]["id"]
            await observe(ess, units[0], S.COMPLETED, 20)
            rest = await read(response, 3)
        assert [summary(e) for e in rest] == [
            (units[0], "RUNNING"),
            (units[1], "RUNNING"),
            (units[0], "COMPLETED"),
        ]
        ids = [e["id"] for e in first + rest]
        assert len(set(ids)) == len(ids)


async def test_newline_delimited_json_and_the_callers_experiments(ess: Ess) -> None:
    async with (
        running_ui(ess.channel) as base,
        aiohttp.ClientSession(headers=ALICE) as session,
        session.get(f"{base}/v1/experiments:watch") as response,
    ):
        assert response.status == 200
        assert response.content_type == "application/x-ndjson"
        first = json.loads(await response.content.readline())
        assert "sync" in first["result"]["events"][0]
        experiment = await new_experiment(ess)
        line = json.loads(await response.content.readline())
        while "sync" in line["result"]["events"][0]:
            line = json.loads(await response.content.readline())
        (created,) = line["result"]["events"]
        assert created["experiment"] == experiment
        assert created["experimentChange"]["created"] is True


async def test_refusals_are_json_errors_with_their_status(ess: Ess) -> None:
    experiment = await new_experiment(ess)
    async with running_ui(ess.channel) as base, aiohttp.ClientSession() as session:
        cases = [
            ("/v1/experiments/999:watch", SSE, 404, "experiments/999"),
            (f"/v1/{experiment}:watch?cursor=nope", SSE, 400, "cursor"),
            (f"/v1/{experiment}:watch", {**SSE, "Last-Event-ID": "nope"}, 400, "cursor"),
            (f"/v1/{experiment}:watch", {"Accept": "text/event-stream"}, 401, ""),
        ]
        for path, headers, status, fragment in cases:
            async with session.get(f"{base}{path}", headers=headers) as response:
                body = await response.json()
                assert response.status == status, (path, body)
                assert fragment in body["error"]["message"], (path, body)


async def test_the_pages_name_their_stream(ess: Ess) -> None:
    """The experiment and work-unit pages' live regions carry the stream ui.js follows
    (data-watch-url; data-watch-unit narrows it to one unit), and it answers as SSE."""
    experiment = await new_experiment(ess)
    unit = await new_unit(ess, experiment)
    xid, wid = experiment.split("/")[1], unit.split("/")[-1]
    watch = f"/v1/experiments/{xid}:watch"
    async with running_ui(ess.channel) as base, aiohttp.ClientSession(headers=ALICE) as session:
        for page, narrowed in (
            (f"/experiments/{xid}", ""),
            (f"/experiments/{xid}/workUnits/{wid}", f' data-watch-unit="{unit}"'),
        ):
            async with session.get(f"{base}{page}") as response:
                html = await response.text()
            assert f'data-watch-url="{watch}"{narrowed}>' in html, page
        async with session.get(f"{base}{watch}", headers=SSE) as response:
            assert (await anext(events(response)))["event"] == "sync"
