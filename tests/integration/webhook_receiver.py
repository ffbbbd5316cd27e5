"""A real HTTP receiver for webhook tests: an aiohttp server on a local port (22000–22999)
whose paths answer as told — ``/ok``, ``/flaky/{n}`` (500 for the first ``n`` requests,
then 200), ``/hang`` (never answers), ``/hang-once`` (the first
request never answers, later ones 200), ``/gone`` (410) — and which records every request it
gets."""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    def __init__(self) -> None:
        self.requests: list[Received] = []
        self._flaky_seen: dict[str, int] = {}
        self._release = asyncio.Event()
        self.port = 0
        self._runner: web.AppRunner | None = None

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def at(self, path: str) -> list[Received]:
        return [r for r in self.requests if r.path == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.requests.append(Received(request.path, dict(request.headers), body))
        path = request.path
        if path.startswith("/flaky/"):
            seen = self._flaky_seen[path] = self._flaky_seen.get(path, 0) + 1
            if seen <= int(path.rsplit("/", 1)[1]):
                return web.Response(status=500, text="down for maintenance")
            return web.Response(text="ok")
        if path == "/hang" or (path == "/hang-once" and len(self.at(path)) == 1):
            await self._release.wait()
            return web.Response(text="too late")
        if path == "/gone":
            return web.Response(status=410, text="no such hook")
        return web.Response(text="ok")

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("POST", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        ports = list(range(22000, 23000))
        random.shuffle(ports)
        for port in ports:
            site = web.TCPSite(self._runner, "127.0.0.1", port)
            try:
                await site.start()
            except OSError:
                continue
            self.port = port
            return
        raise RuntimeError("no free port in 22000-22999")

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    started = Receiver()
    await started.start()
    yield started
    await started.stop()
