"""Scale-out figures (issue 14, point 5): one sweep through the whole stack, as OS
processes, in several topologies on this machine, each on a fresh database and Redis.

The sweep (``sweep``, also what ``tests/integration/test_scale_out.py`` asserts on):
``units`` work units, a fifth that run until stopped (S), a tenth until restarted (R), the
rest complete on their own (C). Three waves: S, R and 30 % more C created; once S and R
run, every S stopped, every R restarted and 20 % more C created; optionally one of each
XMC service SIGKILLed (the ESS named ``ess``, the Actuator ``actuator``, the Reconciler
holding the Lease), and the last C created through the survivors. Then it polls until
every unit is in its end state (``bench/faults.py``: C COMPLETED on execution 1, S STOPPED
with its JobSet gone, R RUNNING on execution 2) and counts lost, duplicated and stuck.

Topologies: one of each service on one Redis (the baseline); one of each on a private
3-master Redis Cluster; two of each (Reconcilers electing a leader) on one Redis; the
same with one of each killed. Figures, not a test: no asserts.

    .venv/bin/python bench/scale_out.py [--units 500] [--runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from bench.fault_api import Client, poll
from bench.fault_counts import Counts, Intent, count

from tests.integration.redis_cluster import LocalRedisCluster
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit, minimal_work_unit
from tests.servers import ADMIN_DSN
from tests.stack import JobSetLedger, Stack, StackOptions, create_database, drop_database
from xmc.model.states import WorkUnitState

S = WorkUnitState
LEASE = "/apis/coordination.k8s.io/v1/namespaces/default/leases/xmc-reconciler"
#: Fast reclaim and repair, as in the fault matrix.
OPTIONS = StackOptions(claim_idle=5.0, repair_after=10.0, repair_interval=2.0)


@dataclass(frozen=True)
class SweepResult:
    counts: Counts
    #: Seconds from the first create until every unit was in its end state (None: never).
    wall: float | None
    #: Seconds from the first create until every unit to stop or restart ran.
    ramp: float
    #: The processes killed, and those of the rest that were not running at the end.
    killed: tuple[str, ...]
    died: tuple[str, ...]
    #: CPU seconds of each process that ran to the end (user + system).
    cpu: dict[str, float]


async def sweep(stack: Stack, *, units: int, kill: bool, within: float = 300.0) -> SweepResult:
    """Run the sweep of the module docstring on a started ``stack``."""
    n_stop, n_restart = units // 5, units // 10
    waves = [int(units * 0.3), int(units * 0.2)]
    waves.append(units - n_stop - n_restart - sum(waves))
    async with aiohttp.ClientSession() as http:
        client, ledger = Client(stack, http), JobSetLedger(stack.kube_url)
        ledger.start()
        try:
            began = time.monotonic()
            parent = await client.experiment()
            first = await asyncio.gather(
                *(client.create(parent, forever_work_unit()) for _ in range(n_stop + n_restart)),
                *(client.create(parent, minimal_work_unit()) for _ in range(waves[0])),
            )
            to_stop = [i.unit for i in first[:n_stop]]
            to_restart = [i.unit for i in first[n_stop : n_stop + n_restart]]
            roles = {i.unit: "complete" for i in first[n_stop + n_restart :]}
            roles |= {u: "stop" for u in to_stop} | {u: "restart" for u in to_restart}

            async def running() -> bool:
                seen = (await client.observe(parent, ledger)).units
                return all(seen.get(u, (0, None))[1] == S.RUNNING for u in to_stop + to_restart)

            if not await poll(running, within=within):
                raise RuntimeError("the units to stop and restart never all ran")
            ramp = time.monotonic() - began
            killed: tuple[str, ...] = ()
            if kill:
                killed = ("ess", "actuator", await lease_holder(http, stack.kube_url))
            second = await asyncio.gather(
                *(client.stop(u) for u in to_stop),
                *(client.restart(u) for u in to_restart),
                *(client.create(parent, minimal_work_unit()) for _ in range(waves[1])),
            )
            # Mid-sweep: the tasks of those intents are on the stream or being carried out.
            for name in killed:
                await stack.kill(name)
            third = await asyncio.gather(
                *(client.create(parent, minimal_work_unit()) for _ in range(waves[2]))
            )
            roles |= {i.unit: "complete" for i in (*second, *third) if i.kind == "create"}
            intents: list[Intent] = [*first, *second, *third]

            async def converged() -> bool:
                counts = count(roles, intents, await client.observe(parent, ledger))
                return counts.lost == counts.stuck == 0

            done = await poll(converged, within=within)
            wall = time.monotonic() - began if done else None
            await asyncio.sleep(3)  # a quiet window, not a synchronisation: late effects show
            counts = count(roles, intents, await client.observe(parent, ledger))
            died = tuple(n for n, up in stack.alive().items() if not up and n not in killed)
            cpu = {
                n: cpu_seconds(p.pid) for n, p in stack.processes.items() if p.returncode is None
            }
            return SweepResult(counts, wall, ramp, killed, died, cpu)
        finally:
            await ledger.stop()
            await client.channel.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (``/proc/<pid>/stat``, Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def lease_holder(http: aiohttp.ClientSession, kube_url: str) -> str:
    """The Reconciler that leads (the Lease's holder), once there is one."""
    holder = ""

    async def held() -> bool:
        nonlocal holder
        async with http.get(kube_url + LEASE) as response:
            if response.status != 200:
                return False
            holder = str(((await response.json()).get("spec") or {}).get("holderIdentity", ""))
        return bool(holder)

    if not await poll(held, within=30):
        raise RuntimeError("no Reconciler took the Lease")
    return holder


@dataclass(frozen=True)
class Topology:
    name: str
    replicas: int
    cluster: bool
    kill: bool


TOPOLOGIES = (
    Topology("1 of each, Redis (baseline)", 1, cluster=False, kill=False),
    Topology("1 of each, Redis Cluster x3", 1, cluster=True, kill=False),
    Topology("2 of each, Redis", 2, cluster=False, kill=False),
    Topology("2 of each, Redis, 1 of each killed", 2, cluster=False, kill=True),
)


async def run_once(topology: Topology, units: int, workdir: Path) -> SweepResult:
    """One sweep on a fresh database, a fresh Redis (or cluster) and a fresh stack."""
    await asyncio.to_thread((workdir / "redis").mkdir, parents=True)
    redis: RedisServer | LocalRedisCluster
    if topology.cluster:
        redis = LocalRedisCluster(workdir / "redis")
        extra = {"XMC_REDIS_CLUSTER_NODES": redis.nodes}
        url = "redis://127.0.0.1:1/0"  # unused: nothing listens there
    else:
        redis = RedisServer(workdir / "redis")
        extra, url = {}, redis.url
    options = dataclasses.replace(
        OPTIONS, replicas=topology.replicas, leader_election=topology.replicas > 1,
        extra_env=extra,
    )  # fmt: skip
    database = await create_database(ADMIN_DSN)
    stack = Stack(database_url=database, redis_url=url, log_dir=workdir / "logs", options=options)
    try:
        await redis.start()
        await stack.start()
        return await sweep(stack, units=units, kill=topology.kill)
    finally:
        await stack.stop()
        await redis.stop()
        await drop_database(ADMIN_DSN, database)


async def main_async(args: argparse.Namespace) -> None:
    base = Path(tempfile.mkdtemp(prefix="xmc-scale-out-"))
    rows: list[str] = []
    for topology in TOPOLOGIES:
        walls, bad = [], 0
        for index in range(args.runs):
            result = await run_once(topology, args.units, base / f"{len(rows)}-{index}")
            c = result.counts
            bad += c.lost + c.duplicated + c.stuck + len(result.died)
            if result.wall is not None:
                walls.append(result.wall)
            wall = "never" if result.wall is None else f"{result.wall:.1f} s"
            cpu = ", ".join(f"{n} {v:.1f}" for n, v in result.cpu.items())
            print(
                f"{topology.name}: {wall} (ramp {result.ramp:.1f} s); lost {c.lost} "
                f"dup {c.duplicated} stuck {c.stuck} died {list(result.died)} "
                f"killed {list(result.killed)}; CPU s: {cpu}",
                flush=True,
            )
        median = f"{statistics.median(walls):.1f}" if walls else "-"
        rows.append(f"{topology.name:<38} {median:>8} {bad:>6}")
    print(f"\n{args.units} units, median of {args.runs} run(s); logs in {base}")
    print(f"{'topology':<38} {'wall s':>8} {'faults':>6}", *rows, sep="\n")


def main() -> None:
    parser = argparse.ArgumentParser(description="Scale-out sweep figures.")
    parser.add_argument("--units", type=int, default=500)
    parser.add_argument("--runs", type=int, default=1)
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
