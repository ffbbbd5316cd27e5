"""The fault matrix's network faults: one path between two parts delayed, lossy or cut,
then healed (``bench/faults.py --scenarios net-cut:ess-postgres``; docs/operations.md,
"High availability: network faults").

Each run builds a fresh :class:`tests.ha.netns.Network` — kubesim, a private Postgres, a
private Redis, the ESS, the Actuator and the Reconciler each in a namespace of its own on
one bridge — runs ``bench/faults.py``'s workload there, and as its fault applies one
:class:`~tests.ha.netns.Fault` for ``--net-hold`` seconds (60) and heals it. Everything
is removed at the end of the run, namespaces included, whatever happened.

``net-baseline`` is the same topology with no fault: the recovery time of a network
fault is counted from the heal, and compares with ``net-baseline``'s time from the
moment the workload's second wave of intents returned.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol, TypeVar

from tests.ha.netns import Fault, Network, network, scenarios
from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.stack import SERVICES, Placement, Stack, StackOptions, create_database

NET_SCENARIOS = ("net-baseline", *scenarios())
#: What the workload calls at the fault, with what to call the moment the fault lands;
#: returns once the fault is over.
Inject = Callable[[Callable[[], None]], Awaitable[None]]


class HasRecovery(Protocol):
    converged_after: float | None


R = TypeVar("R", bound=HasRecovery)


def placement(net: Network) -> dict[str, Placement]:
    """Each service in its own namespace, at its own address."""
    return {name: Placement(net.address[name], tuple(net.exec_prefix(name))) for name in SERVICES}


def fault_of(scenario: str, net: Network, hold: float) -> Inject:
    """The injection of ``scenario``: nothing for ``net-baseline``; otherwise the fault,
    ``hold`` seconds of it, the heal (also when the hold is interrupted)."""
    if scenario == "net-baseline":
        return _nothing
    fault = Fault.parse(scenario)

    async def inject(at_fault: Callable[[], None]) -> None:
        await net.apply(fault)
        at_fault()
        try:
            await asyncio.sleep(hold)  # the fault itself, not a synchronisation
        finally:
            await net.heal(fault)

    return inject


async def _nothing(at_fault: Callable[[], None]) -> None:
    at_fault()


async def net_run(
    scenario: str,
    workdir: Path,
    args: argparse.Namespace,
    options: StackOptions,
    workload: Callable[[Stack, RedisServer, PostgresServer, Inject], Awaitable[R]],
) -> R:
    """One run of ``scenario`` in a network of its own; the recovery time it returns is
    counted from the heal."""
    async with network() as net:
        pg = PostgresServer(host=net.address["postgres"], prefix=tuple(net.exec_prefix("postgres")))
        (workdir / "redis").mkdir(parents=True)
        redis = RedisServer(
            workdir / "redis", host=net.address["redis"], prefix=tuple(net.exec_prefix("redis"))
        )
        placed = dataclasses.replace(options, placement=placement(net))
        try:
            pg.start()
            database = await create_database(pg.admin_dsn)
            stack = Stack(
                database_url=database, redis_url=redis.url, log_dir=workdir / "logs", options=placed
            )
            try:
                await redis.start()
                await stack.start()
                run = await workload(stack, redis, pg, fault_of(scenario, net, args.net_hold))
            finally:
                await stack.stop()
                await redis.stop()
        finally:
            pg.remove()
    if run.converged_after is not None and scenario != "net-baseline":
        run.converged_after = max(0.0, run.converged_after - args.net_hold)
    return run
