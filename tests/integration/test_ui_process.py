"""``xmc-ui`` as its own process: JSON log lines, the bound port, ready against a real
ESS, and a clean exit on SIGTERM."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.integration.ess_harness import Ess

# The dashboard as an OS process: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

XMC_UI = str(Path(sys.executable).with_name("xmc-ui"))


async def test_serves_and_stops_on_sigterm(ess: Ess) -> None:
    proc = await asyncio.create_subprocess_exec(
        XMC_UI, "--listen", "127.0.0.1:0", "--ess-target", f"127.0.0.1:{ess.server.port}",
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        async with asyncio.timeout(30):
            while True:
                line = json.loads(await proc.stderr.readline())
                if line["event"] == "dashboard serving":
                    port = line["port"]
                    assert line["service"] == "ui"
                    break
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/healthz") as alive:
                assert alive.status == 200
            async with http.get(f"http://127.0.0.1:{port}/readyz") as ready:
                assert ready.status == 200
            async with http.get(f"http://127.0.0.1:{port}/") as page:
                assert page.status == 401  # no token: the ESS's answer, as a page
                assert "UNAUTHENTICATED" in await page.text()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), timeout=30)
    assert code == 0
    rest = (await proc.stderr.read()).decode()
    assert "stopping" in rest
    assert "Traceback" not in rest
