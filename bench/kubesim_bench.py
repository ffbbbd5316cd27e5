"""Benchmark: kubesim API writes and watch delivery (issue 4).

N JobSets are created through kubernetes-asyncio (``create_namespaced_custom_object``, a
fixed number in flight) against kubesim with controllers off, while W watchers listen on
the same collection. Printed: writes/s, and watch delivery latency p50/p99 — the time from
the moment the creating client holds the 201 response to the moment each watcher holds the
ADDED event for that name (an event that beats the response counts as 0 ms).

Two client set-ups are measured: the stock kubernetes-asyncio ``ApiClient``, whose aiohttp
session has ``trust_env=True`` (so every request looks up ~/.netrc and the proxy variables
in worker threads — two thread hops per call, which dominate the client's cost), and the
same client with that session replaced by one with ``trust_env=False``.

By default kubesim runs as its own process (``xmc-kubesim``), as it does next to XMC;
``--in-process`` serves it on the bench's own event loop instead (client and server then
share one CPU core). Figures only: this is not a test and asserts nothing.

    .venv/bin/python bench/kubesim_bench.py [--jobsets 1000] [--in-flight 16] [--watchers 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, Configuration, CustomObjectsApi
from kubernetes_asyncio.watch import Watch

from kubesim.server import KubeSim

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
SCRIPT = Path(sys.executable).parent / "xmc-kubesim"


def jobset(name: str) -> dict[str, Any]:
    """A JobSet of the size XMC submits (one replicated job, one container)."""
    container = {
        "name": "worker",
        "image": "registry.example/trainer:1",
        "args": ["--steps", "1000"],
        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "labels": {"xmc.google.com/experiment-id": "1", "kueue.x-k8s.io/queue-name": "q"},
        },
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "main",
                    "replicas": 1,
                    "template": {"spec": {"template": {"spec": {"containers": [container]}}}},
                }
            ],
        },
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def kubesim(in_process: bool) -> AsyncIterator[str]:
    """A kubesim with controllers off; yields its URL."""
    if in_process:
        sim = KubeSim(controllers=False)
        try:
            yield await sim.start()
        finally:
            await sim.stop()
        return
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        str(SCRIPT),
        "--ephemeral",
        "--no-controllers",
        "--port",
        str(port),
        "--log-level",
        "WARNING",
    )
    url = f"http://127.0.0.1:{port}"
    try:
        await _until_healthy(url)
        yield url
    finally:
        process.send_signal(signal.SIGTERM)
        await process.wait()


async def _until_healthy(url: str) -> None:
    async with asyncio.timeout(15), aiohttp.ClientSession() as http:
        while True:
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with http.get(f"{url}/healthz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.05)


async def watcher(
    custom: CustomObjectsApi, arrivals: dict[str, float], total: int, live: asyncio.Event
) -> None:
    """Record when each ADDED event arrives, until ``total`` have; ``live`` is set by the
    bookmark that follows the (empty) initial state."""
    async with Watch() as watch:
        stream = watch.stream(
            custom.list_namespaced_custom_object,
            GROUP,
            VERSION,
            "default",
            PLURAL,
            allow_watch_bookmarks=True,
        )
        async for event in stream:
            live.set()
            if event["type"] == "ADDED":
                arrivals[event["raw_object"]["metadata"]["name"]] = time.perf_counter()
                if len(arrivals) == total:
                    return


async def create_all(custom: CustomObjectsApi, total: int, in_flight: int) -> dict[str, float]:
    """Create ``total`` JobSets, ``in_flight`` at a time; when each response arrived."""
    responded: dict[str, float] = {}
    names = iter(f"bench-{i:05d}" for i in range(total))

    async def worker() -> None:
        for name in names:
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, "default", PLURAL, jobset(name)
            )
            responded[name] = time.perf_counter()

    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return responded


async def without_trust_env(api: ApiClient) -> None:
    """Swap the client's aiohttp session for one that skips the per-request netrc and proxy
    look-ups (same connection limit and read buffer as kubernetes-asyncio's own)."""
    rest = api.rest_client
    stock = rest.pool_manager
    rest.pool_manager = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=api.configuration.connection_pool_maxsize),
        trust_env=False,
        read_bufsize=2**21,
    )
    await stock.close()


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(total: int, in_flight: int, watchers: int, in_process: bool, trust_env: bool) -> None:
    async with kubesim(in_process) as url, ApiClient(Configuration(host=url)) as api:
        if not trust_env:
            await without_trust_env(api)
        custom = CustomObjectsApi(api)
        arrivals: list[dict[str, float]] = [{} for _ in range(watchers)]
        live = [asyncio.Event() for _ in range(watchers)]
        tasks = [
            asyncio.create_task(watcher(custom, seen, total, ready))
            for seen, ready in zip(arrivals, live, strict=True)
        ]
        async with asyncio.timeout(10):  # every watch is connected before the clock starts
            await asyncio.gather(*(ready.wait() for ready in live))
        started = time.perf_counter()
        responded = await create_all(custom, total, in_flight)
        elapsed = time.perf_counter() - started
        async with asyncio.timeout(60):
            await asyncio.gather(*tasks)

    latencies = [
        max(0.0, seen[name] - responded[name]) * 1000 for seen in arrivals for name in responded
    ]
    early = sum(seen[name] < responded[name] for seen in arrivals for name in responded)
    where = "in-process" if in_process else "subprocess"
    client = "stock client" if trust_env else "client with trust_env=False"
    print(
        f"kubesim ({where}, {client}): {total} JobSets, {in_flight} in flight, {watchers} watchers"
    )
    print(f"  writes/s              {total / elapsed:10.0f}")
    print(f"  watch latency p50 ms  {statistics.median(latencies):10.2f}")
    print(f"  watch latency p99 ms  {percentile(latencies, 0.99):10.2f}")
    print(f"  watch latency max ms  {max(latencies):10.2f}")
    print(f"  events before the 201 {early:10d} of {len(latencies)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobsets", type=int, default=1000)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--watchers", type=int, default=3)
    parser.add_argument("--in-process", action="store_true")
    args = parser.parse_args()
    for trust_env in (True, False):
        asyncio.run(run(args.jobsets, args.in_flight, args.watchers, args.in_process, trust_env))


if __name__ == "__main__":
    main()
