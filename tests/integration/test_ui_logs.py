"""The work unit's Logs tab against the whole loop in one event loop (ESS → Actuator →
kubesim → Reconciler, tests/integration/system.py) and a live xmc-ui: the kept log of a
unit whose pods are gone, shown as text (markup escaped, control characters as symbols)
with its exit code; the download, byte for byte; a malformed view refused with 400; and in
Debian's Chromium the live tail, following a running unit's lines as they are written.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from playwright.async_api import Browser, ConsoleMessage, expect

from tests.integration.support import behaving_unit
from tests.integration.system import System, running_system
from tests.integration.test_container_logs import gone
from tests.integration.test_failure_reasons import create, failed
from tests.integration.test_ui_browser import shots  # noqa: F401  (a fixture)
from tests.integration.ui_support import running_ui
from tests.waiting import eventually
from xmc.model.states import WorkUnitState

pytestmark = pytest.mark.slow

S = WorkUnitState
HOSTILE = '<img src=x onerror="document.title=1"> & \x1b[31mred\x1b[0m'


@pytest.fixture
async def system(ess_factory: Any) -> AsyncIterator[System]:
    async with running_system(ess_factory) as made:
        yield made


async def test_the_logs_tab_shows_the_kept_log_as_text_and_downloads_it(system: System) -> None:
    behavior = {"logs": ["epoch 1", HOSTILE], "log_every_seconds": 0.2, "run_seconds": 1,
                "exit_code": 3, "message": "boom"}  # fmt: skip
    name = await create(system, behaving_unit(behavior))
    await failed(system, name)
    assert await system.reconciler.collect_orphans() == 1
    await eventually(lambda: gone(system, name), True, within=30)
    async with running_ui(system.ess.channel) as base, aiohttp.ClientSession() as http:
        async with http.get(f"{base}/{name}") as overview:
            page = await overview.text()
        assert f'href="/{name}/logs"' in page, "the Logs tab"
        assert '<span class="exit-code">exit code 3</span>' in page
        async with http.get(f"{base}/{name}/logs") as answer:
            assert answer.status == 200
            page = await answer.text()
        assert "&lt;img src=x onerror=" in page
        assert "<img src=x" not in page
        assert "\u241b[31mred\u241b[0m" in page
        assert "\x1b" not in page
        assert '<td class="exit-code">3</td>' in page
        assert "boom" in page
        assert "Live tail" not in page, "an ended execution has no live tail"

        async with http.get(f"{base}/{name}/logs/download") as download:
            assert download.status == 200
            assert download.headers["Content-Disposition"].startswith("attachment; filename=")
            body = await download.read()
        assert HOSTILE.encode() + b"\nboom\n" in body, "the bytes as kept"

        async with http.get(f"{base}/{name}/logs", params={"execution": "x"}) as bad:
            assert bad.status == 400
            assert "execution" in await bad.text()
        async with http.get(f"{base}/{name}/logs", params={"execution": "9"}) as missing:
            assert missing.status == 404


async def test_the_live_tail_follows_a_running_unit(
    system: System,
    browser: Browser,
    shots: Path,  # noqa: F811
) -> None:
    lines = ["step 1", HOSTILE, *(f"step {i}" for i in range(3, 11))]
    name = await create(system, behaving_unit({"logs": lines, "log_every_seconds": 0.5,
                                          "run_seconds": 6}))  # fmt: skip
    await eventually(lambda: system.state(name), S.RUNNING, within=30)
    async with running_ui(system.ess.channel) as base:
        page = await browser.new_page(viewport={"width": 1280, "height": 900})
        console: list[str] = []

        def on_console(message: ConsoleMessage) -> None:
            console.append(message.text)

        page.on("console", on_console)
        await page.goto(f"{base}/{name}/logs")
        log = page.locator("#log-text")
        await page.locator("button.follow").click()
        await expect(log).to_contain_text("step 3", timeout=20_000)
        assert await system.state(name) == S.RUNNING, "lines arrive while the unit runs"
        await expect(log).to_contain_text("step 10", timeout=30_000)
        await expect(page.locator(".follow-state")).to_have_text(
            "ended: the execution is over", timeout=30_000
        )
        assert await log.locator("img").count() == 0, "markup in a log is text"
        await expect(log).to_contain_text('<img src=x onerror="document.title=1"> & \u241b[31m')
        assert await page.title() != "1"
        await page.screenshot(path=str(shots / "work_unit_logs.png"))
        assert not [text for text in console if "Content Security Policy" in text], console
