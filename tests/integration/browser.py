"""Debian's Chromium for the dashboard's browser tests, driven by Playwright through
``executable_path``: nothing downloads a browser. Without it a test is skipped, except
under CI (``CI=true``), where a missing browser is a failure."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, async_playwright, expect

CHROMIUM = Path("/usr/bin/chromium")

#: Milliseconds an ``expect`` waits by default: one page step (a navigation, a redraw) on
#: a shared, loaded CI machine, where Playwright's 5 s was once too short for a page that
#: renders in well under a second on a quiet one. Only a failing test waits this long.
STEP_MS = 20_000


def need_chromium() -> None:
    if CHROMIUM.exists():
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{CHROMIUM} is missing on CI: .ci/run installs it (apt-get install chromium)")
    pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium chromium-driver")


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    need_chromium()
    expect.set_options(timeout=STEP_MS)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield launched
        finally:
            await launched.close()
