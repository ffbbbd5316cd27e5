"""The dashboard follows the push API in headless Chromium (issue 28, docs/watch.md): the
work-unit page opens the experiment's Server-Sent Events stream, switches its live region
to push mode, and redraws when a change is pushed — long before the page would poll.

The ESS runs as ``make run`` runs it (authentication disabled), so the browser's own
EventSource request is let through, as one carrying an auth proxy's cookie would be. The
page's polling interval is set to two minutes, and in push mode the region polls only
every 10 s while quiet: the change is made right after the region's last fetch, so a
redraw within 6 s can only have been pushed.
"""

from __future__ import annotations

import pytest
from playwright.async_api import Browser, Page

from tests.integration.ess_harness import Ess, EssFactory, metadata
from tests.integration.support import minimal_work_unit
from tests.integration.ui_support import running_ui
from tests.integration.watching import observe
from tests.waiting import eventually
from xmc.auth_settings import AuthSettings
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# Headless Chromium: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

ALICE = metadata("alice")
S = WorkUnitState


@pytest.fixture
async def open_ess(ess_factory: EssFactory) -> Ess:
    started: Ess = await ess_factory(auth=AuthSettings(disabled=True))
    return started


async def live(page: Page, key: str) -> str:
    value: str = await page.evaluate(f"document.getElementById('live').dataset.{key} || ''")
    return value


async def test_the_unit_page_redraws_on_a_pushed_change(open_ess: Ess, browser: Browser) -> None:
    created = await open_ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="pushed")), metadata=ALICE
    )
    await open_ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=created.name, work_unit=minimal_work_unit()),
        metadata=ALICE,
    )
    unit = f"{created.name}/workUnits/1"
    async with running_ui(open_ess.channel, token="", poll_seconds=120) as ui:
        page = await browser.new_page()
        await page.goto(f"{ui}/{unit}")
        assert await eventually(lambda: live(page, "liveMode"), "push", within=15) == "push"
        # The stream opened; the region read what changed before it once. From that read
        # on, the next poll is QUIET_MS (10 s) away.
        await eventually(lambda: live(page, "liveUpdated"), bool, within=10)
        badge = page.locator("#live .meta .badge").first
        assert "INITIALIZING" in await badge.inner_text()

        await observe(open_ess, unit, S.RUNNING, 5)
        await eventually(badge.inner_text, lambda text: "RUNNING" in text, within=6)
        assert await live(page, "liveMode") == "push"
        await page.close()
