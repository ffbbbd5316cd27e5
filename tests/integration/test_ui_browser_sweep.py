"""The experiment page's sweep table in headless Chromium against the whole stack (ESS +
Actuator + Reconciler + kubesim): filter by an arg, sort by an arg's header, group by an
arg with state counts, tick two units and stop them until they really are STOPPED, and
open a shared URL to see the same view (docs/ui.md). Every wait is a Playwright ``expect``
with a deadline; Chromium is Debian's (``tests/integration/browser.py``)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from tests.integration.support import forever_work_unit
from tests.integration.sweep_args import SWEEP
from tests.integration.system import ALICE, System, running_system
from tests.integration.test_ui_browser import shots  # noqa: F401  (a fixture)
from tests.integration.ui_support import running_ui
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

pytestmark = pytest.mark.slow

#: Milliseconds a page condition may take: scheduling, start and a stop in kubesim.
WITHIN = 60_000


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory, controllers=True) as started:
        yield started


async def launch_sweep(system: System) -> int:
    """The six trials of ``SWEEP``, each running until stopped."""
    api = system.ess.api
    experiment = await api.CreateExperiment(
        api_pb2.CreateExperimentRequest(experiment=Experiment(title="browser lr sweep")),
        metadata=ALICE,
    )
    for args in SWEEP:
        unit = forever_work_unit()
        unit.executable.jobset.jobs[0].spec.args.update(args)
        await api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=unit), metadata=ALICE
        )
    return int(experiment.name.split("/")[1])


def rows(page: Page) -> Any:
    return page.locator("table.units tbody tr[data-wid]")


async def expect_wids(page: Page, wids: list[int]) -> None:
    await expect(rows(page)).to_have_count(len(wids))
    for index, wid in enumerate(wids):
        await expect(rows(page).nth(index)).to_have_attribute("data-wid", str(wid))


def state_of(page: Page, wid: int) -> Any:
    return page.locator(f'tr[data-wid="{wid}"] .badge')


async def test_the_sweep_table_in_a_browser(
    system: System,
    browser: Browser,
    shots: Path,  # noqa: F811
) -> None:
    xid = await launch_sweep(system)
    async with running_ui(system.ess.channel) as base:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(f"{base}/experiments/{xid}")
        await expect(page.locator("table.units thead th[data-col^='args.']")).to_have_count(3)
        for wid in range(1, 7):
            await expect(state_of(page, wid)).to_have_text("RUNNING", timeout=WITHIN)

        # Filter by an arg: the filter box, and the URL keeps it.
        await page.get_by_label("unit filter").fill("args.lr > 0.01")
        await page.get_by_role("button", name="Show").click()
        await expect_wids(page, [1, 4])
        assert "filter=args.lr+%3E+0.01" in page.url

        # Sort by an arg: one click ascending, another descending (0.1 before 1e-1 by text).
        await page.get_by_label("unit filter").fill("")
        await page.get_by_role("button", name="Show").click()
        await expect_wids(page, [1, 2, 3, 4, 5, 6])
        await page.locator("th[data-col='args.lr'] a.sort").click()
        await expect(page).to_have_url(re.compile(r"order_by=args\.lr"))
        await expect_wids(page, [3, 2, 1, 4, 5, 6])
        await page.locator("th[data-col='args.lr'] a.sort").click()
        await expect_wids(page, [6, 5, 4, 1, 2, 3])
        await expect(page.locator("th[data-col='args.lr'] .arrow")).to_have_text("▼")

        # Group by an arg: a row per value with its state counts; its link filters.
        await page.get_by_label("group by").select_option("opt")
        await page.get_by_role("button", name="Show").click()
        groups = page.locator("table.groups tbody tr")
        await expect(groups).to_have_count(2)
        await expect(groups.nth(0).locator(".count")).to_have_text("4")
        await expect(groups.nth(0)).to_contain_text("RUNNING 4")
        await expect(groups.nth(1).locator(".count")).to_have_text("2")
        await groups.nth(1).locator("a.group-link").click()
        await expect_wids(page, [5, 2])  # still sorted by lr descending
        await expect(page.get_by_label("unit filter")).to_have_value('args.opt = "sgd"')

        # Tick two units and stop them: they really stop, the others run on.
        await page.goto(f"{base}/experiments/{xid}")
        await page.get_by_label("select unit 2").check()
        await page.get_by_label("select unit 5").check()
        # A poll redraws the table (runtimes tick) and keeps the ticks.
        live = page.locator("#live")
        await expect(live).to_have_attribute("data-live-updated", re.compile(r"\d"))
        polled = await live.get_attribute("data-live-updated") or ""
        await expect(live).not_to_have_attribute("data-live-updated", polled)
        await expect(page.get_by_label("select unit 2")).to_be_checked()
        await expect(page.get_by_label("select unit 5")).to_be_checked()
        await page.locator("button.stop-selected").click()
        await expect(page.locator(".notice")).to_contain_text("stop of 2 selected work unit(s)")
        for wid in (2, 5):
            await expect(state_of(page, wid)).to_have_text("STOPPED", timeout=WITHIN)
        for wid in (1, 3, 4, 6):
            await expect(state_of(page, wid)).to_have_text("RUNNING")

        # A shared URL opens on the same view in a fresh browser context.
        await page.get_by_label("unit filter").fill("args.layers >= 4")
        await page.get_by_label("group by").select_option("opt")
        await page.get_by_role("button", name="Show").click()
        await page.locator("th[data-col='args.layers'] a.sort").click()
        await expect_wids(page, [1, 3, 6, 4, 2])
        shared = page.url
        await page.screenshot(path=str(shots / "experiment_sweep.png"), full_page=True)
        other = await browser.new_context()
        try:
            fresh = await other.new_page()
            await fresh.goto(shared)
            await expect_wids(fresh, [1, 3, 6, 4, 2])
            await expect(fresh.get_by_label("unit filter")).to_have_value("args.layers >= 4")
            await expect(fresh.locator("table.groups tbody tr")).to_have_count(2)
            await expect(fresh.locator("table.groups tbody tr").nth(1)).to_contain_text("STOPPED 1")
        finally:
            await other.close()
