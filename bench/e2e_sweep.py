"""Benchmark: a sweep through the whole stack, at N = 500, 2,000 and 5,000 work units.

Each size runs on a fresh database, a fresh private Redis and a fresh ``tests.stack``
(kubesim, ESS, Actuator and Reconciler as OS processes, kubesim at ``--time-scale``).
64 clients create N work units that complete on their own; the bench times each unit's
stages on the wall clock:

- **created** — its CreateWorkUnit returned;
- **JobSet** — kubesim's watch delivered its JobSet's ADDED event;
- **RUNNING / COMPLETED stored** — a poll of the database (every ``--poll`` s, raw SQL)
  first shows the state; RUNNING can be coalesced away by the latest-wins batcher;
- **observation → stored** — from the watch event that showed the JobSet ``Completed``
  to the poll that showed COMPLETED stored (so it overstates by up to one poll).

Also per service: CPU seconds (``/proc``, user + system) per size and per unit, and the
peak RSS (``VmHWM``). The **raw kubesim baseline** of the same run: the same N JobSets
created straight into a fresh kubesim at the same time scale by 64 clients, until all are
Completed; the sweep's wall is printed as a ratio of it. Growth is wall(N) / wall(N_min)
against N / N_min. Figures, not a test: it asserts nothing.

    .venv/bin/python bench/e2e_sweep.py [--sizes 500,2000,5000] [--time-scale 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import asyncpg
import grpc

from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.integration.support import minimal_work_unit
from tests.stack import Stack, StackOptions, create_database, drop_database, free_port
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

CLIENTS = 64
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Sweep:
    size: int
    wall: float = 0.0
    created: dict[str, float] = field(default_factory=dict)
    jobset: dict[str, float] = field(default_factory=dict)
    completed_seen: dict[str, float] = field(default_factory=dict)
    running_stored: dict[str, float] = field(default_factory=dict)
    completed_stored: dict[str, float] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)
    rss_mb: dict[str, float] = field(default_factory=dict)
    raw_wall: float = 0.0


def _wid_of(jobset: dict[str, Any]) -> str | None:
    labels = (jobset.get("metadata") or {}).get("labels") or {}
    return labels.get("xmc.google.com/work-unit-id")


def _completed(jobset: dict[str, Any]) -> bool:
    conditions = (jobset.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Completed" and c.get("status") == "True" for c in conditions)


async def watch_jobsets(
    url: str, on_event: Callable[[str, dict[str, Any]], None], stop: asyncio.Event
) -> None:
    """kubesim's JobSet watch, resumed until ``stop``; every event to ``on_event``."""
    version = "0"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as http:
        while not stop.is_set():
            params = {"watch": "1", "resourceVersion": version, "timeoutSeconds": "30"}
            try:
                async with http.get(url + JOBSETS, params=params) as response:
                    async for line in response.content:
                        event = json.loads(line)
                        if event.get("type") == "ERROR":
                            version = "0"
                            break
                        obj = event.get("object") or {}
                        version = (obj.get("metadata") or {}).get("resourceVersion", version)
                        on_event(str(event.get("type")), obj)
            except aiohttp.ClientError:
                await asyncio.sleep(0.1)  # kubesim busy or restarting: watch again


def proc_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def proc_peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def until(probe: Callable[[], Awaitable[bool]], within: float, every: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if await probe():
            return True
        await asyncio.sleep(every)
    return False


async def all_ready(stack: Stack) -> None:
    """Every XMC service answers ``/readyz`` 200: the sweep times the system, not its
    start-up (an Actuator still importing would hold the first creates for seconds)."""
    async with aiohttp.ClientSession() as http:
        for name in stack.ops_ports:

            async def ready(name: str = name) -> bool:
                try:
                    async with http.get(stack.ops_url(name, "/readyz")) as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            if not await until(ready, within=60, every=0.1):
                raise RuntimeError(f"{name} not ready within 60 s")


async def in_parallel(count: int, make: Callable[[int], Awaitable[None]]) -> None:
    """``make(i)`` for i < count with CLIENTS in flight, as 64 clients would send them."""
    queue = iter(range(count))

    async def client() -> None:
        for i in queue:
            await make(i)

    await asyncio.gather(*(client() for _ in range(CLIENTS)))


async def sweep_once(size: int, pg: PostgresServer, work: Path, args: argparse.Namespace) -> Sweep:
    result = Sweep(size)
    (work / "redis").mkdir(parents=True)
    redis = RedisServer(work / "redis")
    database = await create_database(pg.admin_dsn)
    stack = Stack(
        database_url=database,
        redis_url=redis.url,
        log_dir=work / "logs",
        options=StackOptions(time_scale=args.time_scale),
    )
    stop = asyncio.Event()
    try:
        await redis.start()
        await stack.start()
        await all_ready(stack)

        def on_event(kind: str, jobset: dict[str, Any]) -> None:
            wid, now = _wid_of(jobset), time.monotonic()
            if wid is None:
                return
            result.jobset.setdefault(wid, now)
            if _completed(jobset):
                result.completed_seen.setdefault(wid, now)

        watcher = asyncio.create_task(watch_jobsets(stack.kube_url, on_event, stop))
        cpu0 = {n: proc_cpu(p.pid) for n, p in stack.processes.items()}
        db = await asyncpg.connect(database)
        async with grpc.aio.insecure_channel(stack.endpoint) as channel:
            api = api_pb2_grpc.ExperimentStateServiceStub(channel)
            xp = await api.CreateExperiment(
                api_pb2.CreateExperimentRequest(experiment=Experiment()), wait_for_ready=True
            )
            xid = int(xp.name.rsplit("/", 1)[1])
            began = time.monotonic()

            async def create(_i: int) -> None:
                request = api_pb2.CreateWorkUnitRequest(
                    parent=xp.name, work_unit=minimal_work_unit()
                )
                operation = await api.CreateWorkUnit(request, timeout=60)
                wid = operation.name.split("/workUnits/")[1].split("/")[0]
                result.created[wid] = time.monotonic()

            async def poll() -> bool:
                rows = await db.fetch(  # a unit's current execution lives in its row
                    "SELECT wid, state FROM work_units WHERE xid = $1", xid
                )
                now = time.monotonic()
                for row in rows:
                    wid = str(row["wid"])
                    if row["state"] == WorkUnitState.RUNNING:
                        result.running_stored.setdefault(wid, now)
                    elif row["state"] == WorkUnitState.COMPLETED:
                        result.completed_stored.setdefault(wid, now)
                return len(result.completed_stored) >= size

            creating = asyncio.create_task(in_parallel(size, create))
            done = await until(poll, within=args.deadline, every=args.poll)
            await creating
            result.wall = time.monotonic() - began
            if not done:
                print(f"  N={size}: only {len(result.completed_stored)} COMPLETED by the deadline")
        await db.close()
        for name, process in stack.processes.items():
            result.cpu[name] = proc_cpu(process.pid) - cpu0[name]
            result.rss_mb[name] = proc_peak_rss_mb(process.pid)
        stop.set()
        watcher.cancel()
    finally:
        await stack.stop()
        await redis.stop()
        await drop_database(pg.admin_dsn, database)
    result.raw_wall = await raw_kubesim(size, args)
    return result


async def raw_kubesim(size: int, args: argparse.Namespace) -> float:
    """Wall seconds for kubesim alone to run ``size`` JobSets to Completed."""
    port = free_port()
    binary = Path(sys.executable).parent / "xmc-kubesim"
    process = await asyncio.create_subprocess_exec(
        str(binary), "--port", str(port), "--time-scale", str(args.time_scale),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    done: set[str] = set()
    stop = asyncio.Event()
    try:
        async with aiohttp.ClientSession() as http:

            async def listening() -> bool:
                try:
                    async with http.get(url + "/healthz") as response:
                        return response.status == 200
                except aiohttp.ClientError:
                    return False

            await until(listening, within=30, every=0.05)

            def on_event(_kind: str, jobset: dict[str, Any]) -> None:
                if _completed(jobset):
                    done.add(jobset["metadata"]["name"])

            watcher = asyncio.create_task(watch_jobsets(url, on_event, stop))
            began = time.monotonic()

            async def create(i: int) -> None:
                body = raw_jobset(f"raw-{i}")
                async with http.post(url + JOBSETS, json=body) as response:
                    response.raise_for_status()

            await in_parallel(size, create)

            async def all_done() -> bool:
                return len(done) >= size

            await until(all_done, within=args.deadline, every=0.05)
            wall = time.monotonic() - began
            stop.set()
            watcher.cancel()
            return wall
    finally:
        process.terminate()
        await process.wait()


def raw_jobset(name: str) -> dict[str, Any]:
    """One replicated job, one pod, the default queue: what a work unit asks of kubesim."""
    container = {"name": "main", "image": "python:3.11", "command": ["python", "-c", "1"]}
    template = {"spec": {"containers": [container], "restartPolicy": "Never"}}
    job = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": template}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": "cpu-queue"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [{"name": "main", "replicas": 1, "template": {"spec": job}}],
        },
    }


def _p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _stage(label: str, later: dict[str, float], earlier: dict[str, float]) -> str:
    gaps = [later[w] - earlier[w] for w in later if w in earlier]
    return (
        f"    {label:<28} n={len(gaps):>5}  p50 {_p(gaps, 0.5) * 1000:>7.0f} ms"
        f"  p99 {_p(gaps, 0.99) * 1000:>7.0f} ms"
    )


def report(sweeps: list[Sweep]) -> None:
    first = sweeps[0]
    for s in sweeps:
        cpu = ", ".join(
            f"{n} {c:.1f} s ({c / s.size * 1000:.1f} ms/unit)" for n, c in s.cpu.items()
        )
        rss = ", ".join(f"{n} {m:.0f} MB" for n, m in s.rss_mb.items())
        print(
            f"N={s.size}: wall {s.wall:.1f} s; raw kubesim {s.raw_wall:.1f} s "
            f"(sweep / raw {s.wall / s.raw_wall:.2f}); "
            f"growth {s.wall / first.wall:.2f} for N ×{s.size / first.size:.0f}"
        )
        print(_stage("created → JobSet", s.jobset, s.created))
        print(_stage("JobSet → RUNNING stored", s.running_stored, s.jobset))
        print(_stage("JobSet → COMPLETED stored", s.completed_stored, s.jobset))
        print(_stage("observation → stored", s.completed_stored, s.completed_seen))
        print(f"    CPU: {cpu}")
        print(f"    peak RSS: {rss}")
    last = sweeps[-1]
    obs = [last.completed_stored[w] - last.completed_seen[w] for w in last.completed_stored
           if w in last.completed_seen]  # fmt: skip
    print(
        f"targets at N={last.size}: wall(N)/wall({first.size}) {last.wall / first.wall:.1f} "
        f"(≤ {1.3 * last.size / first.size:.0f}); observation → stored p99 "
        f"{_p(obs, 0.99) * 1000:.0f} ms (< 1000); Reconciler peak RSS "
        f"{last.rss_mb.get('reconciler', 0):.0f} MB (< 150)"
    )


async def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    pg = PostgresServer()
    pg.start()
    base = Path(tempfile.mkdtemp(prefix="xmc-sweep-"))
    try:
        sweeps = []
        for size in sizes:
            sweeps.append(await sweep_once(size, pg, base / str(size), args))
            print(f"  N={size} done in {sweeps[-1].wall:.1f} s", flush=True)
        report(sweeps)
    finally:
        pg.remove()
        if args.keep:
            print(f"logs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM: stop the stack and remove the private Postgres


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500,2000,5000")
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("--poll", type=float, default=0.1, help="database poll, seconds")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds per size")
    parser.add_argument("--keep", action="store_true", help="keep the services' logs")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
