"""The dashboard in headless Chromium against the whole stack (ESS + Actuator + Reconciler
+ kubesim): find an experiment on the start page, open it, watch a unit go RUNNING →
COMPLETED without a reload, stop a running unit and see STOPPED, open a (failed) unit and
see its messages. Screenshots of the three pages go to a temporary directory, or to
``XMC_UI_SCREENSHOTS``: ``make screenshots`` runs this test with it set to docs/screenshots,
which docs/ui.md shows (a plain ``make test`` leaves the tree as it is).

Chromium is Debian's (``apt-get install chromium``), driven by Playwright through
``executable_path``: nothing downloads a browser. Without it the test is skipped, except
under CI (``CI=true``), where a missing browser is a failure.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from tests.integration.support import forever_work_unit, minimal_work_unit
from tests.integration.system import ALICE, System, running_system
from tests.integration.ui_support import running_ui
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

# Headless Chromium against the whole stack: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

#: Where the screenshots go ('' = a temporary directory); ``make screenshots`` sets it.
SCREENSHOTS = os.environ.get("XMC_UI_SCREENSHOTS", "")
#: Milliseconds a page condition may take: scheduling + start + run in kubesim at scale 1.
WITHIN = 60_000


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory, controllers=True) as started:
        yield started


def finite_work_unit(behavior: dict[str, Any]) -> WorkUnit:
    """A unit whose container behaves as kubesim's ``behavior`` annotation says."""
    unit = minimal_work_unit()
    job = unit.executable.jobset.jobs[0]
    job.annotations["kubesim.xmc/behavior"] = json.dumps(behavior)
    job.termination_grace_period_seconds = 1
    return unit


async def launch(system: System, title: str, units: list[WorkUnit]) -> int:
    api = system.ess.api
    experiment = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title=title, tags=["browser"])),
        metadata=ALICE,
    )
    for unit in units:
        await api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=unit), metadata=ALICE
        )
    return int(experiment.name.split("/")[1])


def unit_state(page: Page, wid: int) -> Any:
    return page.locator(f'tr[data-wid="{wid}"] .badge')


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    where = Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    where.mkdir(parents=True, exist_ok=True)
    return where


async def test_dashboard_in_a_browser(system: System, browser: Browser, shots: Path) -> None:
    xid = await launch(
        system,
        "browser sweep",
        [
            # Long enough to be seen RUNNING on a loaded machine, where the page can take
            # seconds to open.
            finite_work_unit({"run_seconds": 20}),
            forever_work_unit(),
            finite_work_unit({"run_seconds": 1, "exit_code": 3}),
        ],
    )
    async with running_ui(system.ess.channel) as base:
        page = await browser.new_page(viewport={"width": 1280, "height": 800})

        await page.goto(f"{base}/")
        row = page.locator(f'tr[data-xid="{xid}"]')
        await expect(row).to_contain_text("browser sweep")
        await page.screenshot(path=str(shots / "experiments.png"), full_page=True)
        await row.locator("a.title").click()
        await expect(page).to_have_url(f"{base}/experiments/{xid}")

        # A marker on the window survives only while the page is never reloaded.
        await page.evaluate("window.__notReloaded = true")
        await expect(unit_state(page, 1)).to_have_text("RUNNING", timeout=WITHIN)
        await expect(unit_state(page, 3)).to_have_text("FAILED", timeout=WITHIN)
        await expect(page.locator('tr[data-wid="3"] .message')).to_contain_text(
            "exited with code 3"
        )
        await expect(unit_state(page, 1)).to_have_text("COMPLETED", timeout=WITHIN)
        assert await page.evaluate("window.__notReloaded === true")

        # The stop is a form: its answer is a new page.
        await expect(unit_state(page, 2)).to_have_text("RUNNING", timeout=WITHIN)
        await page.locator('tr[data-wid="2"] button.stop').click()
        await expect(page.locator(".notice")).to_contain_text("stop of work unit 2 requested")
        await expect(unit_state(page, 2)).to_have_text("STOPPED", timeout=WITHIN)
        await page.screenshot(path=str(shots / "experiment.png"), full_page=True)

        await page.locator('tr[data-wid="3"] a').first.click()
        await expect(page).to_have_url(f"{base}/experiments/{xid}/workUnits/3")
        message = page.locator(".timeline li.message").first
        await expect(message).to_contain_text("ERROR")
        await expect(message).to_contain_text("exited with code 3")
        await expect(page.locator(".executions tbody tr")).to_have_count(1)
        await expect(page.locator(".executions tbody tr")).to_contain_text("ACTIVE")
        await expect(page.locator(".meta .badge")).to_have_text("FAILED")
        await page.screenshot(path=str(shots / "work_unit.png"), full_page=True)
