"""Benchmark: a sweep through the whole stack, on kubesim and on the real loopback cluster.

For each size N and each target (``--targets kubesim,real``), in one run: a fresh
database, a fresh private Redis and a fresh ``tests.stack`` (ESS, Actuator and Reconciler
as OS processes; on kubesim, kubesim at ``--time-scale``; on ``real``, the cluster of
``make cluster`` reached as k8s/base's ServiceAccounts through ``tests.stack.RealCluster``,
the Reconciler electing its leader, as ``tests/real`` runs them). 64 clients create N work
units that complete on their own (a pod that starts after 1 s and exits 0 after 3 s:
kubesim's model, and the real cluster's node agent runs the same one).

Where the time goes (``bench/sweep_timeline.py``): per unit, the moment its create
answered, its JobSet was created on the API server, its Workload admitted by Kueue, its
pod scheduled and Running (watches on the API server), RUNNING stored (a database poll
every ``--poll`` s, which the latest-wins batcher may coalesce away), its JobSet
Completed, COMPLETED stored. Printed per milestone: when half and all units had reached
it, the rate between 10 % and 90 %, the per-unit gap from the milestone before.

Also CPU seconds per process — XMC's services, and kubesim or each process of the real
control plane (``.cluster/pids/``: etcd, kube-apiserver, controller-manager, scheduler,
JobSet, Kueue, kwok, node agent) — and the **raw baseline** of each target: the same N
JobSets created straight into its API server (kubesim's, or the real one as cluster-admin)
by 64 clients until all are Completed, timed and watched the same way.

Fair comparison: the real cluster runs on the wall clock, so with ``real`` among the
targets kubesim runs at ``--time-scale 1`` unless told otherwise; a pod then lives 4 s on
both. Between sizes the real namespace is emptied as admin (``sweep_real.purge``); the
4 Nodes of ``make cluster`` hold 440 pods, so N=2000 wants ``XMC_CLUSTER_NODES=20``.
A unit asks for no resources, so ``cluster-queue``'s quota never holds one back. Figures,
not a test: it asserts nothing.

    .venv/bin/python bench/e2e_sweep.py [--sizes 500,2000,5000] [--targets kubesim,real]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import asyncpg
import grpc
from bench import sweep_real
from bench.sweep_report import Meter, Phase, Sweep, log_notes, report_raw, report_sweep
from bench.sweep_timeline import Timeline, Watches, proc_peak_rss_mb

from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.integration.support import minimal_work_unit
from tests.stack import Stack, StackOptions, create_database, drop_database, free_port
from xmc.kube import JOBSETS, KubeError
from xmc.kube_client import KubeClient
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

CLIENTS = 64
XMC_SERVICES = ("ess", "actuator", "reconciler")


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
    await sweep_real.in_parallel(count, CLIENTS, make)


async def sweep_once(
    target: str, size: int, pg: PostgresServer, work: Path, args: argparse.Namespace,
    first: Sweep | None,
) -> Sweep:  # fmt: skip
    """The XMC sweep on ``target``, then (unless ``--real-raw-max`` says no) the raw
    baseline; each part's figures printed as it ends."""
    result = Sweep(target, size)
    real = target == "real"
    admin = await sweep_real.admin_client() if real else None
    if admin is not None:
        await sweep_real.purge(admin)
    (work / "redis").mkdir(parents=True)
    redis = RedisServer(work / "redis")
    database = await create_database(pg.admin_dsn)
    options = (
        StackOptions(real=sweep_real.real_cluster(), leader_election=True)
        if real
        else StackOptions(time_scale=args.time_scale)
    )
    stack = Stack(
        database_url=database, redis_url=redis.url, log_dir=work / "logs", options=options
    )
    try:
        await redis.start()
        await stack.start()
        await all_ready(stack)
        kube = admin if admin is not None else await KubeClient.for_url(stack.kube_url)
        namespace = sweep_real.NAMESPACE if real else "default"
        timeline = result.sweep.timeline
        watches = Watches(kube, namespace, timeline)
        watches.start()
        pids = {n: p.pid for n, p in stack.processes.items()}
        pids |= sweep_real.control_plane_pids() if real else {}
        idle = Meter(pids)
        await asyncio.sleep(args.idle)  # a measuring window, not a wait for anything
        idle.read(idle_phase := Phase())
        result.idle = {n: c / args.idle for n, c in idle_phase.cpu.items()}
        meter = Meter(pids)
        before = (sweep_real.apiserver_counters(), sweep_real.log_sizes()) if real else None
        await run_units(size, stack, database, timeline, result, args)
        meter.read(result.sweep)
        result.rss_mb = {n: proc_peak_rss_mb(stack.processes[n].pid) for n in XMC_SERVICES}
        if before is not None:
            result.notes += sweep_real.server_notes(*before, size)
        result.notes += log_notes(work / "logs")
        await watches.stop()
        if admin is None:
            await kube.close()
    finally:
        await stack.stop()
        await redis.stop()
        await drop_database(pg.admin_dsn, database)
    report_sweep(result, first or result)
    print(flush=True)
    if admin is not None and size > args.real_raw_max:
        await admin.close()  # the namespace is left as it is: `make cluster-down` wipes it
        return result
    if admin is not None:
        try:
            seconds = await sweep_real.purge(admin)
            result.notes.append(f"namespace emptied as admin in {seconds:.0f} s")
            meter = Meter(sweep_real.control_plane_pids())
            before = (sweep_real.apiserver_counters(), sweep_real.log_sizes())
            await raw_run(admin, sweep_real.NAMESPACE, size, result.raw, args)
            meter.read(result.raw)
            result.notes += ["raw: " + n for n in sweep_real.server_notes(*before, size)]
            await sweep_real.purge(admin)
        finally:
            await admin.close()
    else:
        await raw_kubesim(size, result.raw, args)
    report_raw(result)
    print(flush=True)
    return result


async def run_units(
    size: int, stack: Stack, database: str, timeline: Timeline, result: Sweep,
    args: argparse.Namespace,
) -> None:  # fmt: skip
    """64 clients create ``size`` units; poll the database until all are COMPLETED."""
    db = await asyncpg.connect(database)
    try:
        async with grpc.aio.insecure_channel(stack.endpoint) as channel:
            api = api_pb2_grpc.ExperimentStateServiceStub(channel)
            xp = await api.CreateExperiment(
                api_pb2.CreateExperimentRequest(experiment=Experiment()), wait_for_ready=True
            )
            xid = int(xp.name.rsplit("/", 1)[1])
            timeline.began = time.monotonic()

            async def create(_i: int) -> None:
                request = api_pb2.CreateWorkUnitRequest(
                    parent=xp.name, work_unit=minimal_work_unit()
                )
                operation = await api.CreateWorkUnit(request, timeout=60)
                wid = operation.name.split("/workUnits/")[1].split("/")[0]
                timeline.mark_wid("created", wid, time.monotonic())

            async def poll() -> bool:
                rows = await db.fetch(  # a unit's current execution lives in its row
                    "SELECT wid, state FROM work_units WHERE xid = $1", xid
                )
                now, done = time.monotonic(), 0
                for row in rows:
                    if row["state"] == WorkUnitState.RUNNING:
                        timeline.mark_wid("running_stored", str(row["wid"]), now)
                    elif row["state"] == WorkUnitState.COMPLETED:
                        timeline.mark_wid("completed_stored", str(row["wid"]), now)
                        done += 1
                return done >= size

            creating = asyncio.create_task(in_parallel(size, create))
            finished = await until(poll, within=args.deadline, every=args.poll)
            await creating
            result.sweep.wall = time.monotonic() - timeline.began
            if not finished:
                result.notes.append("only part COMPLETED by the deadline")
    finally:
        await db.close()


async def raw_run(kube: KubeClient, namespace: str, size: int, phase: Phase,
                  args: argparse.Namespace) -> None:  # fmt: skip
    """``size`` JobSets straight into the API server by 64 clients, until all Completed."""
    timeline = phase.timeline
    watches = Watches(kube, namespace, timeline)
    watches.start()
    timeline.began = time.monotonic()

    async def create(i: int) -> None:
        name = f"raw-{size}-{i}"
        await kube.create(JOBSETS, namespace, sweep_real.raw_jobset(name))
        timeline.mark("created", name)

    async def all_done() -> bool:
        return len(timeline.marks["completed"]) >= size

    try:
        await in_parallel(size, create)
        await until(all_done, within=args.deadline, every=0.05)
        phase.wall = time.monotonic() - timeline.began
    finally:
        await watches.stop()


async def raw_kubesim(size: int, phase: Phase, args: argparse.Namespace) -> None:
    """The raw baseline on a fresh kubesim at the sweep's time scale."""
    port = free_port()
    binary = Path(sys.executable).parent / "xmc-kubesim"
    process = await asyncio.create_subprocess_exec(
        str(binary), "--port", str(port), "--time-scale", str(args.time_scale),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    kube = await KubeClient.for_url(f"http://127.0.0.1:{port}")
    try:

        async def listening() -> bool:
            try:
                await kube.request("GET", "/version", request_timeout=2)
                return True
            except KubeError:  # not listening yet
                return False

        await until(listening, within=30, every=0.05)
        meter = Meter({"kubesim": process.pid})
        await raw_run(kube, "default", size, phase, args)
        meter.read(phase)
    finally:
        await kube.close()
        process.terminate()
        await process.wait()


async def run(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    targets = args.targets.split(",")
    if args.time_scale is None:
        args.time_scale = 1.0 if "real" in targets else 10.0
    print(f"targets {targets}, sizes {sizes}, kubesim --time-scale {args.time_scale:g}")
    pg = PostgresServer()
    pg.start()
    base = Path(tempfile.mkdtemp(prefix="xmc-sweep-"))
    try:
        firsts: dict[str, Sweep] = {}
        for size in sizes:
            for target in targets:
                work = base / target / str(size)
                done = await sweep_once(target, size, pg, work, args, firsts.get(target))
                firsts.setdefault(target, done)
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
    parser.add_argument("--targets", default="kubesim", help="kubesim, real, or both")
    parser.add_argument(
        "--time-scale", type=float, default=None, help="kubesim's (default 10; 1 beside real)"
    )
    parser.add_argument("--poll", type=float, default=0.1, help="database poll, seconds")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds per size")
    parser.add_argument(
        "--real-raw-max", type=int, default=1_000_000,
        help="the real cluster's raw baseline only up to this N (it runs ~1 unit/s here)",
    )  # fmt: skip
    parser.add_argument("--idle", type=float, default=10.0, help="idle CPU window, seconds")
    parser.add_argument("--keep", action="store_true", help="keep the services' logs")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
