"""The /usage page in headless Chromium (Debian's, as in test_ui_browser.py) against a real
ESS: the table per user with its total, the chart's bars per hour in proportion to the
GPU-hours of each, the form regrouping by queue, a bad time refused with the field named,
the resource columns of the sweep table, and no Content-Security-Policy violation."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import Browser, ConsoleMessage, expect

from tests.integration.ess_harness import Ess
from tests.integration.test_ui_browser import shots  # noqa: F401  (a fixture)
from tests.integration.test_usage import build
from tests.integration.ui_support import running_ui

# Headless Chromium: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

RANGE = "since=2026-05-01T11:00Z&until=2026-05-01T15:00Z"


async def test_usage_page_in_a_browser(ess: Ess, browser: Browser, shots: Path) -> None:  # noqa: F811
    scenario = await build(ess)
    # gpu's execution 2 has run since 12:03:30; now 14:05: 4 GPUs over three hours.
    ess.clock.advance(2 * 3600)
    async with running_ui(ess.channel) as base:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        console: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            console.append(message.text)

        page.on("console", on_console)
        await page.goto(f"{base}/")
        await page.locator("header nav a", has_text="Usage").click()
        await expect(page.locator("h1")).to_have_text("Usage")

        await page.goto(f"{base}/usage?{RANGE}&bucket=hour")
        alice = page.locator('table.usage tr[data-key="alice@example.com"]')
        # 60 + 7200 + 90 s of 4 GPUs.
        await expect(alice.locator(".gpu")).to_have_text(f"{(60 + 7290) * 4 / 3600:,.2f}")
        await expect(alice.locator(".executions")).to_have_text("3")
        # Bob's run stamped ahead of the ESS's clock has begun by now: 5 executions.
        await expect(page.locator("table.usage tfoot .total .executions")).to_have_text("5")
        bars = page.locator("svg rect.usage-bar")
        await expect(bars).to_have_count(3)  # 12:00, 13:00, 14:00
        await expect(bars.nth(1)).to_have_attribute("data-value", "4.00")  # a full hour
        heights = await bars.evaluate_all("rs => rs.map(r => r.getBBox().height)")
        assert heights[1] == max(heights)
        assert heights[2] == pytest.approx(heights[1] * (300 / 3600), rel=0.05)
        await expect(page.locator("svg .chart-top")).to_have_text("4.00")
        await page.locator("figure.usage-chart").screenshot(path=str(shots / "usage.png"))

        await page.locator('select[name="by"]').select_option("queue")
        await page.locator(".usage-form button").click()
        keys = page.locator("table.usage tbody tr")
        await expect(keys).to_have_count(3)
        await expect(page.locator('tr[data-key="tpu-queue"] .tpu')).to_have_text("0.13")

        await page.goto(f"{base}/usage?since=someday")
        await expect(page.locator("main")).to_contain_text("since: 'someday' is neither a time")

        xid = scenario.alice.split("/")[1]
        await page.goto(f"{base}/experiments/{xid}")
        gpu_row = page.locator("table.units tbody tr[data-wid='1']")
        columns = await page.locator("table.units thead th").evaluate_all(
            "ths => ths.map(th => th.dataset.col || '')"
        )
        cells = gpu_row.locator("td")
        await expect(cells.nth(columns.index("gpus"))).to_have_text("4 × nvidia-tesla-a100")
        cpu_row = page.locator("table.units tbody tr[data-wid='2']")
        await expect(cpu_row.locator("td").nth(columns.index("cpus"))).to_have_text("2")
        await page.goto(f"{base}/{scenario.gpu}")
        await expect(page.locator("#spec .requested-gpus")).to_have_text("4 × nvidia-tesla-a100")
        assert not [text for text in console if "Content Security Policy" in text], console
