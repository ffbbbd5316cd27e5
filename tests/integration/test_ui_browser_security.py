"""The dashboard against pages of other origins, in headless Chromium (issue 24): what
another site makes the browser send — a no-cors ``fetch`` POST, an auto-submitted
``text/plain`` form whose body is valid JSON, the dashboard's own forms — changes nothing,
and the dashboard cannot be framed; the dashboard's own buttons and same-origin ``fetch``
still act, and its pages run under the Content-Security-Policy with no violation.

The ESS runs as ``make run`` runs it (authentication disabled, so every request could act,
as one carrying an auth proxy's cookie would). The attacker is a small aiohttp server on
another port, opened as ``http://localhost:PORT`` (another site) and as
``http://127.0.0.1:PORT`` (the same site, another origin), so both ``Sec-Fetch-Site:
cross-site`` and ``same-site`` are tried. Chromium is Debian's, as in test_ui_browser.py.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from playwright.async_api import Browser, Page, expect

from tests.integration.ess_harness import Ess, EssFactory, metadata
from tests.integration.support import minimal_work_unit
from tests.integration.ui_support import running_ui
from ui.main import start_site
from xmc.auth_settings import AuthSettings
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# Headless Chromium: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

ALICE = metadata("alice")
#: The attacker's pages: ``{ui}`` and ``{xid}`` are filled in per request.
ATTACKS = {
    # The REST face, as the issue reproduced it.
    "rest-stop": """<script>
fetch("{ui}/v1/experiments/{xid}/workUnits/1:stop", {{method: "POST", mode: "no-cors"}});
</script>""",
    "rest-create": """<script>
fetch("{ui}/v1/experiments", {{method: "POST", mode: "no-cors",
  body: JSON.stringify({{title: "forged"}})}});
</script>""",
    # text/plain sends "name=value": the name and value below make that valid JSON.
    "rest-batch-stop": """<form method="post" enctype="text/plain"
  action="{ui}/v1/experiments/{xid}/workUnits:batchStop">
<input name='{{"filter": "state = INITIALIZING OR wid ' value=' 1"}}'></form>
<script>document.forms[0].submit();</script>""",
    # The dashboard's own forms.
    "form-stop": """<form method="post" action="{ui}/experiments/{xid}/workUnits/2/stop"></form>
<script>document.forms[0].submit();</script>""",
    "form-batch-stop": """<form method="post" action="{ui}/experiments/{xid}/stop">
<input name="confirm" value="on"></form><script>document.forms[0].submit();</script>""",
}
#: Every page of the dashboard, framed by the attacker.
PAGES = (
    "/",
    "/experiments/{xid}",
    "/experiments/{xid}/workUnits/1",
    "/scheduling",
    "/webhooks",
)


@pytest.fixture
async def open_ess(ess_factory: EssFactory) -> Ess:
    """The ESS as ``make run`` starts it: anyone may act."""
    started: Ess = await ess_factory(auth=AuthSettings(disabled=True))
    return started


@contextlib.asynccontextmanager
async def attacker(ui: str, xid: int) -> AsyncIterator[int]:
    """The attacker's server (its port): ``/attack/{name}`` and ``/frame/{n}``."""

    async def attack(request: web.Request) -> web.Response:
        html = ATTACKS[request.match_info["name"]].format(ui=ui, xid=xid)
        return web.Response(text=f"<!doctype html><body>{html}</body>", content_type="text/html")

    async def frame(request: web.Request) -> web.Response:
        src = ui + PAGES[int(request.match_info["n"])].format(xid=xid)
        html = f'<!doctype html><body><iframe src="{src}" width="800" height="600"></iframe>'
        return web.Response(text=html, content_type="text/html")

    app = web.Application()
    app.router.add_get("/attack/{name}", attack)
    app.router.add_get(r"/frame/{n:\d}", frame)
    runner, port = await start_site(app, "127.0.0.1:0")
    try:
        yield port
    finally:
        await runner.cleanup()


async def sweep(ess: Ess, units: int) -> int:
    created = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="target")), metadata=ALICE
    )
    for _ in range(units):
        await ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=minimal_work_unit()),
            metadata=ALICE,
        )
    return int(created.name.split("/")[1])


async def states(ess: Ess, xid: int) -> list[str]:
    found = await ess.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=f"experiments/{xid}"), metadata=ALICE
    )
    return [
        WorkUnitState(u.current_work_unit_execution.status.state).name for u in found.work_units
    ]


async def titles(ess: Ess) -> list[str]:
    found = await ess.api.ListExperiments(api_pb2.ListExperimentsRequest(), metadata=ALICE)
    return [e.title for e in found.experiments]


async def test_other_origins_cannot_write(open_ess: Ess, browser: Browser) -> None:
    xid = await sweep(open_ess, units=3)
    async with running_ui(open_ess.channel, token="") as ui, attacker(ui, xid) as port:
        for evil in (f"http://localhost:{port}", f"http://127.0.0.1:{port}"):
            page = await browser.new_page()
            for name in ATTACKS:
                # The dashboard's answer to what the attacker's page made Chromium send.
                async with page.expect_response(lambda r: r.url.startswith(ui)) as answer:
                    await page.goto(f"{evil}/attack/{name}")
                status = (await answer.value).status
                assert status in (403, 415), (evil, name, status)
            await page.close()
        assert await states(open_ess, xid) == ["INITIALIZING"] * 3, "a unit was stopped"
        assert await titles(open_ess) == ["target"], "an experiment was created"


async def test_no_page_renders_in_another_sites_frame(open_ess: Ess, browser: Browser) -> None:
    xid = await sweep(open_ess, units=1)
    async with running_ui(open_ess.channel, token="") as ui, attacker(ui, xid) as port:
        page = await browser.new_page()
        for n, path in enumerate(PAGES):
            await page.goto(f"http://localhost:{port}/frame/{n}")
            await page.wait_for_load_state("load")
            framed = page.frames[1]
            # The framed document is Chromium's error page, not the dashboard.
            assert await framed.locator("a.brand").count() == 0, f"{path} rendered in a frame"
            assert not framed.url.startswith(ui), framed.url
        await page.close()


async def violations(page: Page) -> list[Any]:
    found: list[Any] = await page.evaluate("window.__violations")
    return found


async def test_same_origin_writes_still_work_under_the_policy(
    open_ess: Ess, browser: Browser
) -> None:
    xid = await sweep(open_ess, units=3)
    async with running_ui(open_ess.channel, token="") as ui:
        page = await browser.new_page()
        await page.add_init_script(
            "window.__violations = [];"
            "document.addEventListener('securitypolicyviolation',"
            " e => window.__violations.push([e.violatedDirective, e.blockedURI]));"
        )
        refusals: list[str] = []
        page.on(
            "console",
            lambda m: refusals.append(m.text) if "Content Security Policy" in m.text else None,
        )
        for path in PAGES:
            await page.goto(ui + path.format(xid=xid))
            await expect(page.locator("a.brand")).to_be_visible()
            assert await violations(page) == [], path
        await page.goto(f"{ui}/experiments/{xid}")
        live = page.locator("#live")  # ui.js runs: the live region is refreshed
        await expect(live).to_have_attribute("data-live-updated", re.compile(r"\d+"))
        bar = page.locator("svg.bar rect").first
        assert await bar.get_attribute("width") == "100.0"
        box = await bar.bounding_box()
        assert box is not None
        assert box["width"] > 100, "the bar is drawn"

        await page.locator('tr[data-wid="1"] button.stop').click()  # the dashboard's form
        await expect(page.locator(".notice")).to_contain_text("stop of work unit 1 requested")
        answer = await page.evaluate(
            """async (path) => {
                const r = await fetch(path, {method: "POST", body: "{}",
                                             headers: {"Content-Type": "application/json"}});
                return [r.status, await r.json()];
            }""",
            f"/v1/experiments/{xid}/workUnits/2:stop",
        )
        assert answer[0] == 200, answer
        created = await page.evaluate(
            """async () => {
                const r = await fetch("/v1/experiments", {method: "POST",
                    body: JSON.stringify({title: "same origin"}),
                    headers: {"Content-Type": "application/json"}});
                return [r.status, await r.json()];
            }"""
        )
        assert created[0] == 200, created
        assert await violations(page) == []
        assert refusals == [], "the console reports a Content-Security-Policy violation"
        assert await states(open_ess, xid) == ["STOPPING", "STOPPING", "INITIALIZING"]
        assert sorted(await titles(open_ess)) == ["same origin", "target"]
