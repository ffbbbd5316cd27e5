"""The work-unit page shows a unit's retries against a real ESS over gRPC (no browser):
the attempt, the policy, each verdict, and the attempt on each execution's timeline."""

from __future__ import annotations

import re

import aiohttp

from tests.integration.ess_harness import Ess
from tests.integration.test_retries import POLICY, experiment, failed, send, unit
from tests.integration.ui_support import running_ui


async def page(ui: str, path: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(f"{ui}/{path}") as response:
        body = await response.text()
        assert response.status == 200, body
        return body


async def test_the_unit_page_shows_attempts_and_verdicts(ess: Ess) -> None:
    parent = await experiment(ess, unit(POLICY), unit())
    name = f"{parent}/workUnits/1"
    await send(ess, failed(ess, name, 1, code=137))
    await send(ess, failed(ess, name, 2, code=2))
    async with running_ui(ess.channel) as ui:
        html = await page(ui, name)
        bare = await page(ui, f"{parent}/workUnits/2")

    source = "policy of the work unit&#39;s annotation"  # escaped, as everything is
    assert re.search(rf"attempt <b>2</b> of <b>3</b> · {source}", html)
    rows = re.findall(r'<tr data-eid="(\d+)" data-verdict="(\w+)">', html)
    assert rows == [("1", "retry"), ("2", "never")]
    assert "exit code 2 is never retried" in html
    assert '<small class="attempt">attempt 2, retried after exit code 137</small>' in html
    assert '<p class="meta retry-verdict" data-verdict="never">not retried:' in html
    assert "No retry policy: a failure is final" in bare


async def test_the_rest_routes_set_and_read_a_default_and_the_attempts(ess: Ess) -> None:
    parent = await experiment(ess, unit())
    alice = {"Authorization": "Bearer token-alice"}
    async with running_ui(ess.channel) as ui, aiohttp.ClientSession(headers=alice) as http:
        url = f"{ui}/v1/{parent}/retryPolicy"
        async with http.put(url, json={"policy": '{"max_attempts": 2}'}) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["policy"].startswith('{"max_attempts": 2')
        async with http.put(url, json={"policy": '{"max_attempts": 2, "x": 1}'}) as response:
            body = await response.json()
            assert response.status == 400, body
            assert "policy.x: unknown key" in body["error"]["message"]
        await send(ess, failed(ess, f"{parent}/workUnits/1", 1, code=9))
        async with http.get(f"{ui}/v1/{parent}/workUnits/1/retries") as response:
            found = await response.json()
    assert response.status == 200, found
    assert found["policySource"] == "experiment"
    assert [(d["executionId"], d["verdict"], d["exitCode"]) for d in found["decisions"]] == [
        ("1", "retry", 9)
    ]
