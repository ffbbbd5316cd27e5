"""The queue pages in headless Chromium against the whole stack (ESS + Actuator +
Reconciler + kubesim; docs/queues.md): the index lists the ClusterQueue with its quota and
fill, its page lists who is admitted and who waits in Kueue's order, and an admin's ▲
moves a waiting unit ahead — the live region shows the new order once the Actuator has
relabelled the JobSet and Kueue re-ordered the queue. A researcher's ▲ is refused with
the ESS's PERMISSION_DENIED. Every wait is a Playwright ``expect`` with a deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect

from tests.integration.system import System, running_system
from tests.integration.test_queue_view import launch_contended
from tests.integration.test_ui_browser import shots  # noqa: F401  (a fixture)
from tests.integration.ui_support import running_ui

pytestmark = pytest.mark.slow

#: Milliseconds a page condition may take: a relabel and Kueue's next pass in kubesim.
WITHIN = 30_000


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory, controllers=True) as started:
        yield started


def pending(page: Page) -> Any:
    return page.locator("table.pending tbody tr[data-workload]")


async def expect_pending(page: Page, wids: list[int]) -> None:
    await expect(pending(page)).to_have_count(len(wids), timeout=WITHIN)
    for index, wid in enumerate(wids):
        row = pending(page).nth(index)
        await expect(row).to_have_attribute("data-wid", str(wid), timeout=WITHIN)
        await expect(row.locator(".position")).to_have_text(str(index + 1))


async def test_the_queue_pages_in_a_browser(
    system: System,
    browser: Browser,
    shots: Path,  # noqa: F811
) -> None:
    await launch_contended(system, "browser queue sweep")
    async with running_ui(system.ess.channel, token="token-alice") as base:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(f"{base}/queues")
        summary = page.locator('section.queue-summary[data-queue="cluster-queue"]')
        cpu = summary.locator('tr[data-resource="cpu"]')
        await expect(cpu.locator(".nominal")).to_have_text("64")
        await expect(cpu.locator(".reserved")).to_contain_text("40", timeout=WITHIN)
        await expect(cpu.locator(".reserved")).to_contain_text("62%")
        await page.screenshot(path=str(shots / "queues.png"), full_page=True)

        await summary.get_by_role("link", name="cluster-queue").click()
        await expect_pending(page, [2, 3])
        admitted = page.locator("table.admitted tbody tr[data-workload]")
        await expect(admitted).to_have_count(1)
        await expect(admitted.first).to_have_attribute("data-wid", "1")
        await expect(admitted.first).to_contain_text("browser queue sweep")
        await expect(pending(page).first.locator(".wait")).not_to_be_empty()

        # A researcher may look, not reorder: the ESS's refusal is the page's message.
        await pending(page).nth(1).locator("button.raise").click()
        await expect(page.locator('p.error[data-status="403"]')).to_contain_text(
            "PERMISSION_DENIED"
        )

    async with running_ui(system.ess.channel, token="token-root") as base:
        page = await browser.new_page(viewport={"width": 1400, "height": 900})
        await page.goto(f"{base}/queues/cluster-queue")
        await expect_pending(page, [2, 3])
        raise_third = pending(page).nth(1).locator("button.raise")
        await expect(raise_third).to_have_attribute("value", "xmc-priority-normal-normal")
        await raise_third.click()
        await expect(page.locator(".notice")).to_contain_text(
            "xmc-priority-normal-normal requested"
        )
        await expect_pending(page, [3, 2])  # the live region follows Kueue's new order
        await expect(pending(page).first.locator(".priority")).to_have_text("500")
        await page.screenshot(path=str(shots / "queue.png"), full_page=True)
