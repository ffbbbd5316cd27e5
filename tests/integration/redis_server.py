"""A private ``redis-server`` process for tests that stop, kill or restart Redis (the
machine's shared Redis serves every other test and must never be touched)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.stack import free_port


class RedisServer:
    """One redis-server without persistence (as the machine's): a restart loses every key."""

    def __init__(
        self, directory: Path, *, host: str = "127.0.0.1", prefix: tuple[str, ...] = ()
    ) -> None:
        """``host``/``prefix``: listen there, run behind ``prefix`` (``ip netns exec NS``:
        ``tests/ha/netns.py``)."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self._binary = binary
        self._directory = directory
        self._host, self._prefix = host, prefix
        self.port = free_port()
        self._process: asyncio.subprocess.Process | None = None

    @property
    def url(self) -> str:
        return f"redis://{self._host}:{self.port}/0"

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            *self._prefix, self._binary,
            "--port", str(self.port), "--bind", self._host, "--save", "",
            "--appendonly", "no", "--dir", str(self._directory),
            # off the loopback (a namespace's address), only the test's own clients connect
            "--protected-mode", "no" if self._prefix else "yes",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        client = aioredis.Redis.from_url(self.url)
        try:
            async with asyncio.timeout(10):
                while True:
                    try:
                        if await client.ping():
                            return
                    except (RedisConnectionError, OSError):
                        await asyncio.sleep(0.02)  # not listening yet: poll again
        finally:
            await client.aclose()

    async def stop(self) -> None:
        """Kill it (SIGKILL: nothing is flushed, as in a crash)."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
            await self._process.wait()
        self._process = None

    async def restart(self) -> None:
        await self.stop()
        await self.start()
