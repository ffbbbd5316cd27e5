"""GET /v1/usage on a live xmc-ui over a real ESS: query parameters in the proto3 JSON
mapping (groupBy, since, until, bucket), the JSON shape, and errors naming the field."""

from __future__ import annotations

import aiohttp
import pytest

from tests.integration.ess_harness import Ess
from tests.integration.test_ui_rest_timelines import ALICE, get
from tests.integration.test_usage import HOUR, build
from tests.integration.ui_support import running_ui

RANGE = {"since": "2026-05-01T12:00:00Z", "until": "2026-05-01T13:00:00Z"}


async def test_usage_over_rest(ess: Ess) -> None:
    scenario = await build(ess)
    async with running_ui(ess.channel) as base, aiohttp.ClientSession(headers=ALICE) as session:
        report = await get(
            session,
            f"{base}/v1/usage",
            params={"groupBy": "EXPERIMENT", "bucket": "DAY", **RANGE},
        )
        assert report["groupBy"] == "EXPERIMENT"
        assert (report["since"], report["until"]) == (RANGE["since"], RANGE["until"])
        groups = {g["key"]: g["usage"] for g in report["groups"]}
        assert groups[scenario.alice]["gpuHours"] == pytest.approx(600 / HOUR)
        assert groups[scenario.alice]["executions"] == "3"  # int64: a JSON string
        assert groups[scenario.bob]["acceleratorHours"] == {
            "tpu-v5-lite-podslice": pytest.approx(480 / HOUR)
        }
        assert [b["startTime"] for b in report["buckets"]] == ["2026-05-01T00:00:00Z"]

        only = await get(session, f"{base}/v1/usage", params={"experiment": scenario.bob, **RANGE})
        assert [g["key"] for g in only["groups"]] == ["bob@example.com"]

        backwards = await get(
            session,
            f"{base}/v1/usage",
            status=400,
            params={"since": RANGE["until"], "until": RANGE["since"]},
        )
        assert backwards["error"]["status"] == "INVALID_ARGUMENT"
        assert backwards["error"]["message"].startswith("since, until:")
        unknown = await get(session, f"{base}/v1/usage", status=400, params={"groupBy": "TEAM"})
        assert "groupBy" in unknown["error"]["message"]


async def test_usage_needs_a_caller(ess: Ess) -> None:
    async with running_ui(ess.channel) as base, aiohttp.ClientSession() as session:
        refused = await get(session, f"{base}/v1/usage", status=401)
        assert refused["error"]["status"] == "UNAUTHENTICATED"
