"""Rolling restart (issue 30, point 5): every XMC service restarted one replica at a time
under a running sweep and a create load; do clients see failures, is anything lost?

Each run starts two of each service as OS processes (``tests.stack``: ESS x2 behind one
multi-address target ``ipv4:127.0.0.1:p1,127.0.0.1:p2``, Actuator x2, Reconciler x2
electing a leader) on a fresh database and a fresh private Redis, at kubesim time scale
1, then:

1. the fault matrix's sweep (``bench/faults.py``): 10 units to stop, 5 to restart, 10
   to complete, 3 to fail under a retry policy; once the 15 run, the stops, the restarts,
   10 more to complete and 3 more to fail;
2. ``--clients`` clients start creating work units in a loop into a second experiment
   (``bench/rolling_load.py``: each call as the published client makes it, with a
   client-chosen id, and retried by XMC's documented rule if it fails);
3. ``rolling``: each process in turn (:func:`roll_order`: the ESSs, the Actuators, the
   standby Reconciler, then the leader) gets SIGTERM; once it has exited it is started
   again, and the next one waits until its ``/readyz`` answers 200. ``baseline``: the
   same load for as long as the same run's roll took, no restart;
4. the load stops; every unit of both experiments must reach its end state (the load's
   units COMPLETED on execution 1), counted by ``bench/fault_counts.py`` (lost,
   duplicated, stuck) after ``--settle`` quiet seconds.

Exit status 0 only if no client call failed after the documented retry and every count
is zero. Figures, not a test: no asserts.

    .venv/bin/python bench/rolling_restart.py [--runs 2] [--clients 64] [--think 8]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiohttp
import grpc
from bench.fault_api import Client, failing_unit, poll
from bench.fault_counts import Counts, Intent, Observed, count
from bench.fault_table import Run
from bench.faults import OPTIONS
from bench.rolling_load import CreateLoad, Tally
from bench.scale_out import lease_holder
from google.longrunning.operations_proto_pb2 import ListOperationsRequest

from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit, minimal_work_unit
from tests.stack import JobSetLedger, Stack, create_database, drop_database
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2

S = WorkUnitState
#: Two of each, the Reconcilers electing a leader; the fault matrix's reclaim and repair.
ROLLING_OPTIONS = dataclasses.replace(OPTIONS, replicas=2, leader_election=True)
#: The private Redis and Postgres of a run: in this bench's port range (25000-25999); the
#: fault matrix's runs use their own Redis port, so both may run at once.
REDIS_PORT, POSTGRES_PORT, MATRIX_REDIS_PORT = 25379, 25432, 25381
#: Seconds a stopping process may take, and a started one until it is ready.
EXIT_WITHIN, READY_WITHIN = 60.0, 90.0


@dataclass(frozen=True)
class Step:
    """One process restarted: seconds until it exited (and how), and until it was ready."""

    name: str
    exit_code: int | None
    stopped_after: float
    ready_after: float


@dataclass
class RollingRun:
    mode: str  # "rolling" | "baseline"
    tally: Tally
    counts: Counts
    steps: list[Step] = field(default_factory=list)
    #: Seconds the load ran (the roll's length, or the baseline's hold).
    held: float = 0.0
    #: Seconds from the load's end until every unit was in its end state (None: never).
    converged_after: float | None = None
    error: str | None = None

    @property
    def clean(self) -> bool:
        c, t = self.counts, self.tally
        return (
            c.lost == c.duplicated == c.stuck == c.died == 0
            and t.failures(t.final) == 0
            and self.error is None
        )


def roll_order(names: list[str], leader: str) -> list[str]:
    """The restart order: every ESS, every Actuator, the standby Reconcilers, the leading
    Reconciler last, so leadership moves once (pure)."""
    services = [n for n in names if n != "kubesim"]
    reconcilers = [n for n in services if n.startswith("reconciler")]
    standbys = [n for n in reconcilers if n != leader]
    return (
        [n for n in services if n not in reconcilers]
        + standbys
        + [leader] * (leader in reconcilers)
    )


async def ready(http: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with http.get(url, timeout=aiohttp.ClientTimeout(total=5)) as response:
            return response.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def restart_gracefully(stack: Stack, http: aiohttp.ClientSession, name: str) -> Step:
    """SIGTERM ``name``, wait for its exit, start it again, wait until ``/readyz`` is 200."""
    process, began = stack.processes[name], time.monotonic()
    process.terminate()
    try:
        code: int | None = await asyncio.wait_for(process.wait(), timeout=EXIT_WITHIN)
    except TimeoutError:
        process.kill()
        await process.wait()
        code = None  # did not stop by itself
    stopped = time.monotonic() - began
    await stack.start_service(name)
    url = stack.ops_url(name, "/readyz")
    if not await poll(lambda: ready(http, url), within=READY_WITHIN):
        raise RuntimeError(f"{name} was not ready within {READY_WITHIN:.0f} s of its start")
    return Step(name, code, stopped, time.monotonic() - began - stopped)


async def observe(client: Client, parents: list[str], ledger: JobSetLedger) -> Observed:
    """:meth:`Client.observe` over several experiments and every page of each."""
    seen = await client.observe(parents[0], ledger)
    for parent in parents[1:]:
        token = ""
        while True:
            request = api_pb2.ListWorkUnitsRequest(parent=parent, page_size=1000, page_token=token)
            try:
                page = await client.api.ListWorkUnits(request, timeout=30)
            except grpc.aio.AioRpcError:
                return Observed(created=seen.created, duplicated=seen.duplicated)
            for unit in page.work_units:
                current = unit.current_work_unit_execution
                eid = int(current.name.rsplit("/", 1)[1]) if current.name else 0
                seen.units[str(unit.name)] = (eid, S(current.status.state))
            if not (token := page.next_page_token):
                break
        token = ""
        while True:
            ops = ListOperationsRequest(name=parent, page_size=1000, page_token=token)
            try:
                listed = await client.ops.ListOperations(ops, timeout=30)
            except grpc.aio.AioRpcError:
                return Observed(created=seen.created, duplicated=seen.duplicated)
            for op in listed.operations:
                code = op.error.code if op.HasField("error") else 0
                seen.operations[str(op.name)] = (bool(op.done), code)
            if not (token := listed.next_page_token):
                break
    return seen


async def sweep_started(
    client: Client, ledger: JobSetLedger
) -> tuple[str, dict[str, str], list[Intent]]:
    """Steps 1 of the module docstring: the sweep's experiment, roles and intents."""
    parent = await client.experiment()
    first = await asyncio.gather(
        *(client.create(parent, forever_work_unit()) for _ in range(15)),
        *(client.create(parent, minimal_work_unit()) for _ in range(10)),
        *(client.create(parent, failing_unit()) for _ in range(3)),
    )
    to_stop, to_restart = [i.unit for i in first[:10]], [i.unit for i in first[10:15]]
    roles = {i.unit: "complete" for i in first[15:25]} | {i.unit: "retry" for i in first[25:]}
    roles |= {u: "stop" for u in to_stop} | {u: "restart" for u in to_restart}

    async def running() -> bool:
        units = (await client.observe(parent, ledger)).units
        return all(units.get(u, (0, None))[1] == S.RUNNING for u in to_stop + to_restart)

    if not await poll(running, within=90):
        raise RuntimeError("not every unit to stop or restart was RUNNING within 90 s")
    second = await asyncio.gather(
        *(client.stop(u) for u in to_stop),
        *(client.restart(u) for u in to_restart),
        *(client.create(parent, minimal_work_unit()) for _ in range(10)),
        *(client.create(parent, failing_unit()) for _ in range(3)),
    )
    created = [i for i in second if i.kind == "create"]
    roles |= {i.unit: "complete" for i in created[:10]} | {i.unit: "retry" for i in created[10:]}
    return parent, roles, [*first, *second]


@dataclass(frozen=True)
class Shape:
    """The load and the waits of a run."""

    clients: int = 64
    #: Mean seconds between one client's creates.
    think: float = 8.0
    #: Seconds after the load for every unit to reach its end state, and the quiet window.
    deadline: float = 300.0
    settle: float = 5.0


async def workload(stack: Stack, *, mode: str, shape: Shape, hold: float = 0.0) -> RollingRun:
    """Steps 1-4 of the module docstring on a started two-of-each ``stack``."""
    ledger = JobSetLedger(stack.kube_url)
    ledger.start()
    async with aiohttp.ClientSession() as http:
        client = Client(stack, http)
        try:
            parent, roles, intents = await sweep_started(client, ledger)
            load_parent = await client.experiment()
            load = CreateLoad(stack.target, load_parent, clients=shape.clients, think=shape.think)
            load.start()
            began, steps = time.monotonic(), []
            if mode == "rolling":
                leader = await lease_holder(http, stack.kube_url)
                for name in roll_order(stack.names, leader):
                    steps.append(await restart_gracefully(stack, http, name))
            else:
                await asyncio.sleep(hold)  # the baseline's load, as long as the roll
            held = time.monotonic() - began
            tally = await load.stop()
            ended = time.monotonic()
            roles |= {unit: "complete" for unit in tally.acknowledged}
            intents += [Intent("create", u, op) for u, op in tally.acknowledged.items()]
            parents = [parent, load_parent]

            async def converged() -> bool:
                counts = count(roles, intents, await observe(client, parents, ledger))
                return counts.lost == counts.stuck == 0

            run = RollingRun(mode, tally, Counts(), steps, held)
            if await poll(converged, within=shape.deadline):
                run.converged_after = time.monotonic() - ended
            await asyncio.sleep(shape.settle)  # a quiet window: late effects show here
            run.counts = count(roles, intents, await observe(client, parents, ledger))
            dead = sorted(name for name, up in stack.alive().items() if not up)
            run.counts.died = len(dead)
            run.counts.notes += [f"died {name}" for name in dead]
            return run
        finally:
            await ledger.stop()
            await client.channel.close()


async def run_once(
    mode: str, pg: PostgresServer, workdir: Path, shape: Shape, *, redis_port: int,
    hold: float = 0.0,
) -> RollingRun:  # fmt: skip
    """One run on a fresh database, a fresh private Redis and a fresh two-of-each stack."""
    (workdir / "redis").mkdir(parents=True)
    redis = RedisServer(workdir / "redis")
    redis.port = redis_port
    database = await create_database(pg.admin_dsn)
    stack = Stack(
        database_url=database, redis_url=redis.url, log_dir=workdir / "logs",
        options=ROLLING_OPTIONS,
    )  # fmt: skip
    try:
        await redis.start()
        await stack.start()
        return await workload(stack, mode=mode, shape=shape, hold=hold)
    finally:
        await stack.stop()
        await redis.stop()
        await drop_database(pg.admin_dsn, database)


async def run_in_matrix(pg: PostgresServer, workdir: Path, args: argparse.Namespace) -> Run:
    """``bench/faults.py --scenarios rolling-restart``: one rolling run at the default
    load, as a row of the fault matrix; a call failed after the documented retry makes
    the run an error, and the client tallies go to its notes."""
    shape = Shape(deadline=args.deadline, settle=args.settle)
    began = time.monotonic()
    rolling = await run_once("rolling", pg, workdir, shape, redis_port=MATRIX_REDIS_PORT)
    failed = rolling.tally.failures(rolling.tally.final)
    error = f"{failed} client calls failed after the documented retry" if failed else None
    run = Run("rolling-restart", rolling.counts, rolling.converged_after, error=error)
    first = rolling.tally.first  # what a client that does not retry saw
    run.client_errors = {code: n for code, n in first.items() if code != "OK"}
    run.wall = time.monotonic() - began
    run.counts.notes[:0] = describe(rolling)[:1]
    return run


def describe(run: RollingRun) -> list[str]:
    """The lines a run prints: its calls, counts and (rolling) each restart's timing."""
    t, c = run.tally, run.counts
    after = "never" if run.converged_after is None else f"{run.converged_after:.1f} s"
    lines = [
        f"{run.mode}: load {run.held:.1f} s, {t.calls} creates; first attempt: "
        f"{t.render(t.first)}; after the documented retry: {t.render(t.final)} "
        f"({t.retries} retries); converged {after} after the load; lost {c.lost} "
        f"dup {c.duplicated} stuck {c.stuck} died {c.died}"
        + (f"; ERROR {run.error}" if run.error else "")
    ]
    lines += [
        f"    {s.name}: exited {s.exit_code} after {s.stopped_after:.1f} s, "
        f"ready {s.ready_after:.1f} s after its start"
        for s in run.steps
    ]
    if t.failed_at:
        failed = ", ".join(f"{x:.1f}" for x in t.failed_at)
        lines.append(f"    first attempts failed at s: {failed}")
    return lines + [f"    {note}" for note in c.notes[:20]]


def table(runs: list[RollingRun]) -> str:
    head = (
        f"{'mode':<9} {'runs':>4} {'creates':>8} {'failed 1st':>10} {'failed':>7} "
        f"{'retries':>7} {'lost':>5} {'dup':>4} {'stuck':>6} {'died':>5}  converged s (median)"
    )
    lines = [head, "-" * len(head)]
    for mode in ("baseline", "rolling"):
        mine = [r for r in runs if r.mode == mode]
        if not mine:
            continue
        times = sorted(r.converged_after for r in mine if r.converged_after is not None)
        median = f"{times[len(times) // 2]:.1f}" if times else "-"
        lines.append(
            f"{mode:<9} {len(mine):>4} {sum(r.tally.calls for r in mine):>8} "
            f"{sum(r.tally.failures(r.tally.first) for r in mine):>10} "
            f"{sum(r.tally.failures(r.tally.final) for r in mine):>7} "
            f"{sum(r.tally.retries for r in mine):>7} {sum(r.counts.lost for r in mine):>5} "
            f"{sum(r.counts.duplicated for r in mine):>4} "
            f"{sum(r.counts.stuck for r in mine):>6} {sum(r.counts.died for r in mine):>5}  "
            f"{median}"
        )
    return "\n".join(lines)


async def pairs(pg: PostgresServer, base: Path, args: argparse.Namespace) -> list[RollingRun]:
    """Each run: the roll, then its baseline holding the same load as long as it took."""
    runs: list[RollingRun] = []
    for index in range(1, args.runs + 1):
        shape = Shape(args.clients, args.think, args.deadline, args.settle)
        hold = 0.0
        for mode in ("rolling", "baseline"):
            workdir = base / f"{mode}-{index}"
            try:
                run = await run_once(
                    mode, pg, workdir, shape, redis_port=args.redis_port, hold=hold
                )
            except Exception as error:  # report it and carry on, as the fault matrix does
                run = RollingRun(mode, Tally(), Counts(), error=f"{type(error).__name__}: {error}")
            hold = run.held or 60.0  # a roll that broke: a minute of baseline load
            runs.append(run)
            print(*describe(run), sep="\n", flush=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description="Rolling restart under load.")
    parser.add_argument("--runs", type=int, default=2, help="pairs of (rolling, baseline)")
    parser.add_argument("--deadline", type=float, default=300.0, help="seconds after the load")
    parser.add_argument("--settle", type=float, default=5.0, help="quiet seconds, then count")
    parser.add_argument("--clients", type=int, default=64, help="concurrent creating clients")
    parser.add_argument("--think", type=float, default=8.0, help="mean seconds between creates")
    parser.add_argument("--redis-port", type=int, default=REDIS_PORT, help="the private Redis")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="xmc-rolling-"))
    pg = PostgresServer()
    pg.port = POSTGRES_PORT
    runs: list[RollingRun] = []
    try:
        pg.start()
        print(f"private Postgres on :{pg.port}; work in {base}", flush=True)
        runs = asyncio.run(pairs(pg, base, args))
    finally:
        pg.remove()
        clean = bool(runs) and all(r.clean for r in runs)
        if clean:
            shutil.rmtree(base, ignore_errors=True)
        else:
            print(f"logs kept in {base}")
    print(f"\n{table(runs)}")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
