""" "Stopped by" in headless Chromium (Debian's, as in test_ui_browser.py): alice opens her
unit's page on the dashboard (which calls the ESS with her token), clicks Stop, and the
page says who stopped it, with the request id the dashboard gave the click on hover
(docs/audit.md)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, expect

from tests.integration.ess_harness import Ess, metadata
from tests.integration.support import minimal_work_unit
from tests.integration.test_ui_browser import shots  # noqa: F401  (a fixture)
from tests.integration.ui_support import running_ui
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# Headless Chromium: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow


async def test_the_unit_page_says_who_stopped_it(ess: Ess, browser: Browser, shots: Path) -> None:  # noqa: F811
    alice = metadata("alice")
    experiment = await ess.api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="who")), metadata=alice
    )
    operation = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit()),
        metadata=alice,
    )
    unit = operation.name.split("/operations/")[0]
    async with running_ui(ess.channel, token="token-alice") as base:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        await page.goto(f"{base}/{unit}")
        created = page.locator('.attribution[data-verb="created"]')
        await expect(created).to_contain_text("created by alice@example.com")
        await expect(page.locator('.attribution[data-verb="stopped"]')).to_have_count(0)
        await page.locator("button.stop").click()
        await page.goto(f"{base}/{unit}")
        stopped = page.locator('.attribution[data-verb="stopped"]')
        await expect(stopped).to_contain_text("stopped by alice@example.com at")
        await expect(stopped).to_have_attribute("title", re.compile(r"^request [0-9a-f]{32}$"))
        await page.locator(".attributions").screenshot(path=str(shots / "stopped_by.png"))
