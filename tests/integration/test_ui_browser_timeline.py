"""The timelines in headless Chromium (Debian's, as in test_ui_browser.py) against a real
ESS: the experiment page's timings link the stuck unit, whose page draws its ongoing
state; the preempted unit's page draws RUNNING → DESCHEDULING → SCHEDULING → RUNNING with
widths in proportion to the time in each state, the re-queue marked in words, and no
Content-Security-Policy violation.

The history is built with observations through the internal UpdateWorkUnitExecutions
(``test_timelines.build_scenario``), on the ESS's test clock, so every duration is known.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.async_api import Browser, ConsoleMessage, Locator, Page, expect

from tests.integration.ess_harness import Ess
from tests.integration.test_timelines import build_scenario
from tests.integration.test_ui_browser import shots  # noqa: F401  (a fixture)
from tests.integration.ui_support import running_ui

# Headless Chromium: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

#: Execution 1 of the preempted unit: each segment's state and label, left to right.
PREEMPTED = [
    ("INITIALIZING", "INITIALIZING 2s"),
    ("SCHEDULING", "SCHEDULING 8s"),
    ("RUNNING", "RUNNING 30s"),
    ("DESCHEDULING", "DESCHEDULING 5s"),
    ("SCHEDULING", "SCHEDULING 25s"),
    ("RUNNING", "RUNNING 30s"),
    ("COMPLETED", "COMPLETED 0s"),
]


async def drawn_widths(execution: Locator) -> tuple[list[float], float]:
    """The drawn width in pixels of each segment (stroke left out: the re-queue's is
    wider) and of the whole bar, read at once: the live region may redraw between reads."""
    widths: tuple[list[float], float] = await execution.evaluate(
        """section => [
            [...section.querySelectorAll(".tl-seg rect")].map(rect => rect.getBBox().width),
            section.querySelector("svg.tl-bar").getBoundingClientRect().width,
        ]"""
    )
    return widths


async def redrawn(page: Page) -> None:
    """Wait for the live region's first poll, which may redraw the timeline (when the
    server's HTML differs from the browser's serialization of it); after that it redraws
    only when the history changes, which it does not here (the ESS's clock stands still)."""
    await expect(page.locator("#live")).to_have_attribute("data-live-updated", re.compile(r"\d"))


def timeline(page: Page, eid: int) -> Locator:
    return page.locator(f'section.execution-timeline[data-eid="{eid}"]')


async def test_timelines_in_a_browser(ess: Ess, browser: Browser, shots: Path) -> None:  # noqa: F811
    scenario = await build_scenario(ess)
    xid = scenario.experiment.split("/")[1]
    async with running_ui(ess.channel) as base:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        console: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            console.append(message.text)

        page.on("console", on_console)

        await page.goto(f"{base}/experiments/{xid}")
        timings = page.locator("#timings")
        await expect(timings.locator('tr[data-phase="queue wait"] .median')).to_have_text("2m35s")
        await expect(timings.locator('tr[data-phase="queue wait"] .p90')).to_have_text("4m31s")
        stuck = timings.locator(".stuck tbody tr")
        await expect(stuck.first).to_contain_text("SCHEDULING")
        await expect(stuck.first.locator(".duration")).to_have_text("4m55s")
        await timings.screenshot(path=str(shots / "experiment_timings.png"))
        await stuck.first.locator("a").click()
        await expect(page).to_have_url(f"{base}/experiments/{xid}/workUnits/2")
        await redrawn(page)
        queued = timeline(page, 1).locator(".tl-seg")
        await expect(queued.last).to_have_attribute("data-state", "SCHEDULING")
        await expect(queued.last).to_have_class("tl-seg st-pending ongoing")
        await expect(queued.last.locator("text")).to_have_text("SCHEDULING 4m55s …")

        await page.goto(f"{base}/{scenario.preempted}")
        await redrawn(page)
        first = timeline(page, 1)
        segments = first.locator(".tl-seg")
        await expect(segments).to_have_count(len(PREEMPTED))
        for i, (state, label) in enumerate(PREEMPTED):
            await expect(segments.nth(i)).to_have_attribute("data-state", state)
            await expect(segments.nth(i).locator("text")).to_have_text(label)
        # DESCHEDULING and SCHEDULING after the first admission: the re-queue.
        await expect(segments.nth(3)).to_have_class("tl-seg st-stopping requeue")
        await expect(segments.nth(4)).to_have_class("tl-seg st-pending requeue")
        widths, bar = await drawn_widths(first)
        assert sum(widths) == pytest.approx(bar, abs=2), (widths, bar)
        assert widths[2] == pytest.approx(6 * widths[3], rel=0.03)  # 30 s against 5 s
        assert widths[4] == pytest.approx(5 * widths[3], rel=0.03)  # 25 s against 5 s
        assert widths[6] == pytest.approx(0.02 * bar, rel=0.05)  # the end: the minimum
        rows = first.locator(".changes tbody tr")
        await expect(rows.nth(3).locator(".note")).to_have_text("preempted")
        await expect(rows.nth(4).locator(".note")).to_have_text("re-queued")
        await expect(rows.nth(3).locator(".duration")).to_have_text("5s")
        await expect(first.locator(".preemptions")).to_have_text("1 preemption")

        current = timeline(page, 2).locator(".tl-seg")
        await expect(current.last).to_have_class("tl-seg st-running ongoing")
        await expect(current.last.locator("text")).to_have_text("RUNNING 1m30s …")
        await page.locator("#timelines").screenshot(path=str(shots / "work_unit_timeline.png"))
        assert not [text for text in console if "Content Security Policy" in text], console
