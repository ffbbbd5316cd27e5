"""Fault matrix: does a crash or a store restart lose, duplicate or strand an intent?

Each run starts the four services as OS processes (``tests.stack``) on a fresh database
and a fresh private Redis, at kubesim time scale 1, and drives one experiment:

1. create 10 work units that run until stopped (S), 5 that run until restarted (R), 10
   that complete on their own in ~3 s (C) and 3 that exit 137 after 1 s under a retry
   policy of 3 attempts (F, docs/retries.md); wait until every S and R is RUNNING;
2. at once: stop every S, restart every R, create 10 more C and 3 more F;
3. the fault, as soon as those RPCs have returned (their tasks are in flight): SIGKILL a
   service, ``--outage`` seconds, start it again; or SIGKILL the private Redis (no
   persistence: streams and consumer group are gone), ``--outage`` seconds, start it; or
   ``pg_ctl restart -m fast`` of the private Postgres; or (``pg-failover``, on a
   pg_auto_failover formation of its own) SIGKILL the primary's host while clients keep
   creating units (``tests/integration/pg_auto_failover.py``); or SIGKILL the Redis
   master under Sentinel or in a Redis Cluster, its replica having missed that wave's
   writes (``redis-failover``, ``redis-cluster-failover``: bench/faults_redis.py);
   ``baseline`` does nothing;
   ``rolling-restart`` runs its own harness (``bench/rolling_restart.py``: two of each
   service, this sweep plus 64 creating clients, every process restarted in turn).
   The HA deployment's faults (the store failovers, every ``net-*`` one, the paused
   leader, the ``-x2`` kills) run on two of every service and compare with a baseline
   on two (``bench/fault_table.py``, ``baseline_of``); the single-process crashes and
   restarts on one;
4. poll until every unit is in its end state (deadline: ``--deadline`` seconds after the
   fault), then watch ``--settle`` more seconds and count (a late redelivery that
   re-creates a stopped JobSet shows only then).

End states: C is COMPLETED on execution 1; S is STOPPED on execution 1 and its JobSet is
gone; R is RUNNING on execution 2 and a JobSet of execution 2 exists, not being deleted; F
is FAILED on execution 3, each of its three executions' JobSets created once (two
automatic retries of its failures: none lost, none twice).

Counts, from what the ESS (gRPC) and kubesim (its HTTP API and a JobSet watch) show:

- **lost** — per intent (RPC): a create (restart) whose JobSet of execution 1 (2) the
  cluster never saw; a stop whose JobSet still exists with no ``deletionTimestamp`` (no
  one ever deleted it); or any intent whose Operation is not done, or done with an error;
  per automatic retry: an F unit's execution 2 or 3 whose JobSet the cluster never saw,
  or a retry's Operation not done, or done with an error.
- **duplicated** — executions the cluster created more than once (``JobSetLedger``), plus
  units whose current execution is past the intended one.
- **stuck** — units not in their end state.
- **died** — services not running at the end (the killed one is restarted on purpose).
- **errors** — runs that broke (a service would not start, a workload RPC failed).

What clients see (``bench/fault_clients.py``): from 5 s before the fault until 3 s after
the first OK answer to a call begun after it, four clients keep creating units (every
acknowledged one joins the intents above, and must be in Postgres: a missing one is a
note and, its Operation gone, lost); the table gives their failed calls
by code and the longest time one client went without an OK answer.

One private Postgres cluster (initdb as the ``postgres`` user when run as root) serves
every run of every scenario but ``pg-failover``, a new database per run: every scenario
meets the same kind of server and the shared one on :5432 is never touched. The cluster
is removed at exit, the logs too unless a count is non-zero. Exit status 0 only if every
count is zero. Figures, not a test: no asserts.

    .venv/bin/python bench/faults.py [--runs 5] [--scenarios kill-ess,redis-restart]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
from bench.fault_api import Client, failing_unit, poll
from bench.fault_clients import ClientLoad, missing_acknowledged
from bench.fault_counts import Counts, count
from bench.fault_table import Run, table
from bench.faults_net import NET_SCENARIOS, Inject, net_run
from bench.faults_redis import REDIS_FAILOVERS, before_the_wave, failover_for, on_failover, redriven
from bench.faults_replicas import REPLICA_SCENARIOS, inject_replicas, options_for

from tests.ha.failover import Failover
from tests.integration.pg_auto_failover import AutoFailover, start_formation
from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit, minimal_work_unit
from tests.stack import JobSetLedger, Stack, StackOptions, create_database, drop_database
from xmc.model.states import WorkUnitState

S = WorkUnitState
SCENARIOS = (
    "baseline", "kill-ess", "kill-actuator", "kill-reconciler", "redis-restart",
    "postgres-restart", "pg-failover", *REDIS_FAILOVERS, *REPLICA_SCENARIOS,
    "rolling-restart", *NET_SCENARIOS,
)  # fmt: skip
OPTIONS = StackOptions(claim_idle=5.0, repair_after=10.0, repair_interval=2.0)


async def inject(
    scenario: str,
    stack: Stack,
    redis: RedisServer | Failover,
    pg: PostgresServer,
    outage: float,
    at_fault: Callable[[], None],
    ha: AutoFailover | None = None,
) -> None:
    """The fault of ``scenario``; ``at_fault`` is called the moment it takes effect (a
    kill has landed), before any outage is waited out."""
    if await inject_replicas(scenario, stack, outage, at_fault):
        return
    if scenario.startswith("kill-"):
        await stack.kill(scenario.removeprefix("kill-"))
        at_fault()
        await asyncio.sleep(outage)  # the outage itself, not a synchronisation
        await stack.start_service(scenario.removeprefix("kill-"))
    elif scenario == "redis-restart":
        await redis.stop()
        at_fault()
        await asyncio.sleep(outage)
        await redis.start()
    elif scenario == "postgres-restart":
        at_fault()
        await pg.restart()
    elif scenario == "pg-failover" and ha is not None:
        await ha.kill_primary()
    elif not isinstance(redis, RedisServer):  # redis-failover, redis-cluster-failover
        await redis.kill_master()


async def workload(
    scenario: str,
    stack: Stack,
    redis: RedisServer | Failover,
    pg: PostgresServer,
    args: argparse.Namespace,
    ha: AutoFailover | None = None,
    injection: Inject | None = None,
) -> Run:
    ledger = JobSetLedger(stack.kube_url)
    ledger.start()
    async with aiohttp.ClientSession() as http:
        client = Client(stack, http)
        try:
            began = time.monotonic()
            parent = await client.experiment()
            first = await asyncio.gather(
                *(client.create(parent, forever_work_unit()) for _ in range(15)),
                *(client.create(parent, minimal_work_unit()) for _ in range(10)),
                *(client.create(parent, failing_unit()) for _ in range(3)),
            )
            to_stop, to_restart = [i.unit for i in first[:10]], [i.unit for i in first[10:15]]
            roles = {i.unit: "complete" for i in first[15:25]}
            roles |= {i.unit: "retry" for i in first[25:]}
            roles |= {u: "stop" for u in to_stop} | {u: "restart" for u in to_restart}

            async def running() -> bool:
                units = (await client.observe(parent, ledger)).units
                return all(units.get(u, (0, None))[1] == S.RUNNING for u in to_stop + to_restart)

            ready = await poll(running, within=60)
            load = ClientLoad(client.api, parent)
            await load.start()
            if not isinstance(redis, RedisServer):
                await before_the_wave(redis, stack)
            second = await asyncio.gather(
                *(client.stop(u) for u in to_stop),
                *(client.restart(u) for u in to_restart),
                *(client.create(parent, minimal_work_unit()) for _ in range(10)),
                *(client.create(parent, failing_unit()) for _ in range(3)),
            )
            created = [i for i in second if i.kind == "create"]
            roles |= {i.unit: "complete" for i in created[:10]}
            roles |= {i.unit: "retry" for i in created[10:]}
            intents = [*first, *second]
            fault = time.monotonic()
            run = Run(scenario, Counts())
            # Calls begun from the fault's landing on meet it (the first mark counts).
            if injection is not None:  # returns once the fault is over (a net-* one healed)
                await injection(load.mark_fault)
            else:
                await inject(scenario, stack, redis, pg, args.outage, load.mark_fault, ha)
            load.mark_fault()  # a kill that returned, or no fault at all (a baseline)
            seen = await load.finish(within=args.deadline)
            run.figures = [f"{stack.options.replicas} of each service", *seen.lines()]
            # Every failed call of the run: those that failed as the kill landed end a
            # moment before its mark.
            run.client_errors = dict(Counter(seen.errors_before) + Counter(seen.errors_after))
            run.client_gap = seen.gap_after
            roles |= load.roles()
            intents += load.intents

            async def converged() -> bool:
                counts = count(roles, intents, await client.observe(parent, ledger))
                return counts.lost == counts.stuck == 0

            if await poll(converged, within=args.deadline):
                run.converged_after = time.monotonic() - fault
            run.wall = time.monotonic() - began
            await asyncio.sleep(args.settle)  # a quiet window: late effects show here
            run.counts = counts = count(roles, intents, await client.observe(parent, ledger))
            if not ready:
                counts.notes.insert(0, "setup: not every S/R unit was RUNNING within 60 s")
            dead = [name for name, up in stack.alive().items() if not up]
            counts.died, counts.notes = len(dead), counts.notes + [f"died {n}" for n in dead]
            missing = await missing_acknowledged(stack.database_url, intents)
            run.figures.append(f"acknowledged writes not in Postgres: {len(missing)}")
            counts.notes += [f"not in Postgres: {m}" for m in missing]
            return run
        finally:
            await client.channel.close()
            await ledger.stop()


async def run_once(
    scenario: str, pg: PostgresServer, workdir: Path, args: argparse.Namespace
) -> Run:
    """One run on a fresh database, a fresh private Redis and a fresh stack; pg-failover
    on a pg_auto_failover formation of its own (its primary dies), through its DSN."""
    if scenario == "rolling-restart":  # two of each under a create load: its own harness
        from bench.rolling_restart import run_in_matrix

        return await run_in_matrix(pg, workdir, args)
    options = options_for(scenario, OPTIONS, args.replicas)
    if scenario.startswith("net-"):  # in network namespaces, with stores of its own
        return await net_run(
            scenario, workdir, args, options,
            lambda stack, redis, pg, fault: workload(
                scenario, stack, redis, pg, args, injection=fault
            ),
        )  # fmt: skip
    (workdir / "redis").mkdir(parents=True)
    redis: RedisServer | Failover = RedisServer(workdir / "redis")
    if scenario in REDIS_FAILOVERS:
        redis = failover_for(scenario, workdir / "redis")
        options = on_failover(options, redis)
    ha = await start_formation() if scenario == "pg-failover" else None
    try:
        admin = pg.admin_dsn if ha is None else ha.admin_dsn
        database = await create_database(admin)
        stack = Stack(
            database_url=database, redis_url=redis.url, log_dir=workdir / "logs", options=options
        )
        try:
            await redis.start()
            await stack.start()
            run = await workload(scenario, stack, redis, pg, args, ha)
            if not isinstance(redis, RedisServer):
                run.counts.notes.append(await redriven(database))
        finally:
            await stack.stop()
            await redis.stop()
            await drop_database(admin, database)
    finally:
        if ha is not None:
            await ha.stop()
    if not run.clean and args.show_logs:
        stack.print_logs()
    return run


async def matrix(
    scenarios: list[str], pg: PostgresServer, base: Path, args: argparse.Namespace, runs: list[Run]
) -> None:
    """Every run of every scenario, in order, each appended to ``runs`` as it ends."""
    for scenario in scenarios:
        for index in range(1, args.runs + 1):
            workdir = base / f"{scenario}-{index}"
            try:
                run = await run_once(scenario, pg, workdir, args)
            except Exception as error:  # report it and carry on with the matrix
                run = Run(scenario, Counts(), error=f"{type(error).__name__}: {error}")
            runs.append(run)
            c = run.counts
            after = "never" if run.converged_after is None else f"{run.converged_after:.1f} s"
            print(
                f"{scenario} run {index}/{args.runs}: converged {after} after the fault "
                f"(workload {run.wall:.1f} s); lost {c.lost} dup {c.duplicated} "
                f"stuck {c.stuck} died {c.died}" + (f"; ERROR {run.error}" if run.error else ""),
                flush=True,
            )
            for line in [*run.figures, *c.notes]:
                print(f"    {line}")
            if not run.clean:
                print(f"    logs: {workdir / 'logs'}", flush=True)


def _terminate(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM: clean up as for Ctrl-C


def main() -> int:
    parser = argparse.ArgumentParser(description="Fault matrix: lost / duplicated / stuck.")
    parser.add_argument("--runs", type=int, default=5, help="runs per scenario")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS), help="comma-separated")
    parser.add_argument("--outage", type=float, default=2.0, help="seconds a killed part is down")
    parser.add_argument("--deadline", type=float, default=90.0, help="seconds after the fault")
    parser.add_argument("--net-hold", type=float, default=60.0, help="seconds a net-* fault lasts")
    parser.add_argument("--settle", type=float, default=5.0, help="quiet seconds, then count")
    parser.add_argument("--show-logs", action="store_true", help="print failed runs' log tails")
    parser.add_argument("--replicas", type=int, default=1, help="processes of each service")
    parser.add_argument("--keep", action="store_true", help="keep every run's logs")
    args = parser.parse_args()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    if unknown := [s for s in scenarios if s not in SCENARIOS]:
        parser.error(f"unknown scenarios {unknown}; known: {', '.join(SCENARIOS)}")
    signal.signal(signal.SIGTERM, _terminate)
    started, runs, interrupted = time.monotonic(), list[Run](), False
    base = Path(tempfile.mkdtemp(prefix="xmc-faults-"))
    pg = PostgresServer()
    try:
        pg.start()
        print(f"private Postgres on :{pg.port} ({pg.bin}); work in {base}", flush=True)
        asyncio.run(matrix(scenarios, pg, base, args, runs))
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: the table shows the runs that finished")
    finally:
        pg.remove()
        if runs and all(r.clean for r in runs) and not (args.keep or interrupted):
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"logs kept in {base}")
    print(f"\n{table(runs)}\n\ntotal {time.monotonic() - started:.0f} s")
    if interrupted:
        return 130
    return 0 if runs and all(r.clean for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
