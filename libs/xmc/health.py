"""``/metrics``, ``/healthz`` and ``/readyz`` on each service's ``XMC_METRICS_LISTEN``.

Why aiohttp on the service's own event loop rather than prometheus_client's thread: a
probe answered by a separate thread stays green while the loop that does the work is
wedged. Served from the loop, ``/healthz`` answering at all proves the loop turns, and
``/readyz`` reads the live state of the service (watchers synced, leading or standing by,
stores reachable, not draining) at the moment it is asked.

- ``/healthz`` (liveness): 200 while the process serves. A task that died already ended
  the process (``xmc.supervise``), so nothing else is checked here; restarting a process
  because a dependency is down would only add restarts to the outage.
- ``/readyz`` (readiness): 200 when every check passes, else 503; the body lists each
  check as JSON either way, so ``curl`` tells an operator what is missing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest


@dataclass(frozen=True)
class Check:
    """One readiness condition; ``detail`` says what was seen (shown in ``/readyz``)."""

    name: str
    ok: bool
    detail: str = ""


Readiness = Callable[[], Awaitable[Sequence[Check]]]

#: Seconds a whole readiness evaluation may take before it counts as failed.
READY_TIMEOUT = 3.0


def ready_body(checks: Sequence[Check]) -> tuple[int, dict[str, object]]:
    """HTTP status and JSON body of ``/readyz`` for these checks (pure)."""
    ok = all(check.ok for check in checks)
    body: dict[str, object] = {
        "status": "ready" if ok else "not ready",
        "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in checks},
    }
    return (200 if ok else 503), body


async def probe(name: str, call: Awaitable[object] | None) -> Check:
    """One dependency round trip (``PING``, ``SELECT 1``) as a readiness check; None means
    the client was never connected."""
    if call is None:
        return Check(name, False, "not connected")
    try:
        await call
    except Exception as error:
        return Check(name, False, f"{type(error).__name__}: {error}")
    return Check(name, True, "answering")


async def evaluate(readiness: Readiness, *, limit: float = READY_TIMEOUT) -> list[Check]:
    """Run the readiness checks; one that raises or hangs is a failed check, not a 500."""
    try:
        async with asyncio.timeout(limit):
            return list(await readiness())
    except TimeoutError:
        return [Check("readiness", False, f"checks took longer than {limit:g}s")]
    except Exception as error:
        return [Check("readiness", False, f"{type(error).__name__}: {error}")]


class OpsServer:
    """The operations endpoints of one service; ``start()`` returns the bound port."""

    def __init__(self, listen: str, readiness: Readiness) -> None:
        self._listen = listen
        self._readiness = readiness
        self._runner: web.AppRunner | None = None
        self.port: int | None = None

    async def start(self) -> int | None:
        """Bind ``host:port`` ('' = off, port 0 = any free port)."""
        if not self._listen:
            return None
        host, _, port = self._listen.rpartition(":")
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host or "0.0.0.0", int(port), reuse_port=False)
        try:
            await site.start()
        except OSError as error:
            await runner.cleanup()
            message = f"metrics/health on {self._listen}: {error.strerror}"
            raise OSError(error.errno, message) from error
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "alive"})

    async def _readyz(self, _request: web.Request) -> web.Response:
        status, body = ready_body(await evaluate(self._readiness))
        return web.json_response(body, status=status, dumps=json.dumps)
