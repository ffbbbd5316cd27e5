"""TimelineService's REST routes on a live xmc-ui (the dashboard app, REST hooks and all)
over a real ESS: JSON shape, the stuck_limit query parameter, errors (docs/rest.md)."""

from __future__ import annotations

from typing import Any

import aiohttp

from tests.integration.ess_harness import Ess
from tests.integration.test_timelines import build_scenario
from tests.integration.ui_support import running_ui

ALICE = {"Authorization": "Bearer token-alice"}


async def get(session: aiohttp.ClientSession, url: str, *, status: int = 200, **kwargs: Any) -> Any:
    async with session.get(url, **kwargs) as response:
        assert response.content_type == "application/json"
        body = await response.json()
        assert response.status == status, body
        return body


async def test_timeline_and_timings_over_rest(ess: Ess) -> None:
    scenario = await build_scenario(ess)
    async with running_ui(ess.channel) as base, aiohttp.ClientSession(headers=ALICE) as session:
        timeline = await get(session, f"{base}/v1/{scenario.preempted}/timeline")
        assert timeline["name"] == scenario.preempted
        first, second = timeline["executions"]
        assert first["state"] == "COMPLETED"
        assert first["terminal"] is True
        assert [c["toState"] for c in first["changes"]] == [
            "INITIALIZING",
            "SCHEDULING",
            "RUNNING",
            "DESCHEDULING",
            "SCHEDULING",
            "RUNNING",
            "COMPLETED",
        ]
        assert first["phases"] == {
            "queueWait": "10s",
            "startup": "0s",
            "run": "90s",
            "requeue": "30s",
            "preemptions": 1,
        }
        assert second["segments"][-1] == {
            "state": "RUNNING",
            "startTime": "2026-05-01T12:03:30Z",
            "duration": "90s",
            "ongoing": True,
        }

        timings = await get(
            session, f"{base}/v1/{scenario.experiment}/timings", params={"stuckLimit": "1"}
        )
        assert timings["workUnits"] == "2"  # int64 is a JSON string (proto3 JSON mapping)
        assert timings["queueWait"] == {
            "median": "155s",
            "p90": "271s",
            "count": "2",
            "ongoing": "1",
        }
        assert [(u["name"], u["state"], u["duration"]) for u in timings["stuck"]] == [
            (scenario.queued, "SCHEDULING", "295s")
        ]

        missing = await get(
            session, f"{base}/v1/experiments/999999/workUnits/1/timeline", status=404
        )
        assert "experiments/999999/workUnits/1" in missing["error"]["message"]
        bad = await get(
            session,
            f"{base}/v1/{scenario.experiment}/timings",
            params={"stuckLimit": "1000"},
            status=400,
        )
        assert "stuck_limit" in bad["error"]["message"]
    async with running_ui(ess.channel) as base, aiohttp.ClientSession() as anonymous:
        await get(anonymous, f"{base}/v1/{scenario.experiment}/timings", status=401)
