"""Harness of the fenced-leader tests and fault scenario (decision 0054): a TCP proxy that
can hold one direction of a connection, and what a test reads of a running stack (the
Lease's holder, a process's Prometheus counters).

Why a proxy. A leader SIGSTOPped at a random instant almost never stops between its "am I
leading?" check and the moment its write leaves: it wakes, sees its Lease is stale and
sends nothing. To prove the ESS refuses such a write, the test makes the window wide:
the leader's bytes to the ESS are held in the proxy (its write has left the process, as
it would sit in a socket buffer or a slow network), the leader is paused past its Lease,
a standby takes over and writes, and only then are the held bytes let through.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from tests.stack import Stack


class HoldingProxy:
    """Forwards 127.0.0.1:``port`` to ``target_port``; while held, what the clients send
    is kept in order (nothing lost, nothing reordered) and let through on release.
    ``connections`` counts the connections accepted."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self.held_bytes = 0
        self.connections = 0
        self._open = asyncio.Event()
        self._open.set()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def hold(self) -> None:
        self.held_bytes = 0
        self._open.clear()

    def release(self) -> None:
        self._open.set()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        for task in (
            asyncio.create_task(self._pipe(reader, up_writer, holdable=True)),
            asyncio.create_task(self._pipe(up_reader, writer, holdable=False)),
        ):
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, holdable: bool
    ) -> None:
        try:
            while chunk := await reader.read(65536):
                if holdable and not self._open.is_set():
                    self.held_bytes += len(chunk)
                    await self._open.wait()
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            pass  # one side went away: the other is closed below
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()


async def lease_holder(stack: Stack, lease: str = "xmc-reconciler") -> str:
    """The Lease's ``holderIdentity`` ("" when there is none yet); the stack's
    Reconcilers use their process names as identities."""
    url = f"{stack.kube_url}/apis/coordination.k8s.io/v1/namespaces/default/leases/{lease}"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        if response.status == 404:
            return ""
        response.raise_for_status()
        body = await response.json()
    return str((body.get("spec") or {}).get("holderIdentity") or "")


async def metric(stack: Stack, process: str, sample: str, **labels: str) -> float:
    """The sum of the samples named ``sample`` (matching ``labels``) on ``process``'s
    /metrics; 0 when the process does not answer (it is paused, say)."""
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http,
            http.get(stack.ops_url(process, "/metrics")) as response,
        ):
            text = await response.text()
    except (aiohttp.ClientError, TimeoutError):
        return 0.0
    total = 0.0
    for family in text_string_to_metric_families(text):
        for found in family.samples:
            if found.name == sample and labels.items() <= found.labels.items():
                total += found.value
    return total
