"""The Postgres primary's host dies under a sweep and its synchronous standby takes over
(pg_auto_failover, ``tests.integration.pg_auto_failover``): the four services, on the
formation's multi-host DSN, reconnect by themselves; every write a client was told OK
is in the new primary and has its effect; clients see UNAVAILABLE meanwhile, never
INTERNAL; nothing is stuck, no service dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from pathlib import Path

import pytest
from bench.fault_clients import ClientLoad, missing_acknowledged
from bench.fault_counts import Intent

from tests.integration.pg_auto_failover import AutoFailover, Node, start_formation
from tests.integration.processes import Client, running_stack
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit
from tests.stack import JobSetLedger
from tests.waiting import eventually, holds_for
from xmc.model.states import WorkUnitState
from xmc.store.transactions import wait_for_postgres
from xmc_api.cloud.xmanager.v1 import api_pb2

# OS processes and three Postgres servers, one of them killed: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

S = WorkUnitState


async def test_a_failover_under_a_sweep_loses_no_acknowledged_write(
    auto_failover: AutoFailover,
    private_redis: RedisServer,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    async with running_stack(
        auto_failover.admin_dsn, private_redis.url, tmp_path / "logs", request
    ) as stack:
        client = Client(stack)
        ledger = JobSetLedger(stack.kube_url)
        ledger.start()
        try:
            parent = await client.experiment()
            to_stop = await client.create(parent, forever_work_unit())
            to_restart = await client.create(parent, forever_work_unit())
            for name in (to_stop, to_restart):
                await eventually(functools.partial(client.state, name), S.RUNNING, within=60)
            load = ClientLoad(client.api, parent)
            await load.start()
            stop = await client.api.StopWorkUnit(api_pb2.StopWorkUnitRequest(name=to_stop))
            restart = await client.api.RestartWorkUnit(
                api_pb2.RestartWorkUnitRequest(name=to_restart)
            )

            killed = await auto_failover.kill_primary()
            load.mark_fault()
            promoted = await auto_failover.wait_promoted(other_than=killed)
            seen = await load.finish(within=120)

            assert promoted != killed
            assert seen.outage is not None, "no write succeeded after the failover"
            assert set(seen.errors_after) <= {"UNAVAILABLE"}, seen.errors_after
            assert seen.errors_before == {}
            acknowledged = [
                *load.intents,
                Intent("stop", to_stop, str(stop.name)),
                Intent("restart", to_restart, str(restart.name)),
            ]
            assert await missing_acknowledged(stack.database_url, acknowledged) == []
            for intent in load.intents:
                await eventually(
                    functools.partial(client.state, intent.unit), S.COMPLETED, within=90
                )
            # Calls that failed may have committed all the same: those units run too.
            await eventually(
                functools.partial(unsettled, client, parent, to_restart), [], within=90
            )
            await eventually(functools.partial(client.state, to_stop), S.STOPPED, within=60)
            await eventually(
                functools.partial(client.execution, to_restart), (2, S.RUNNING), within=60
            )
            assert ledger.duplicated() == []
            assert all(stack.alive().values()), stack.alive()
        finally:
            await ledger.stop()
            await client.channel.close()


async def test_a_starting_service_waits_while_only_a_standby_answers(
    auto_failover: AutoFailover,
) -> None:
    """Mid-failover the DSN may reach only a standby (or a primary already fenced
    read-only): a service starting then waits, as for a Postgres still starting up,
    instead of exiting at once and crash-looping through the failover."""
    primary = await auto_failover.primary()
    (standby,) = [node for node in auto_failover.nodes if node != primary]
    only_the_standby = (
        f"postgresql://postgres@127.0.0.1:{standby.port}/postgres?target_session_attrs=read-write"
    )

    waiting = asyncio.create_task(wait_for_postgres(only_the_standby, within=60))
    try:
        await holds_for(lambda: not waiting.done(), during=2.0, what="still waiting")
    finally:
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
    await wait_for_postgres(auto_failover.dsn(), within=5)  # the primary: at once


async def test_a_port_taken_before_the_bind_starts_a_fresh_formation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process takes the monitor's port between its pick and the bind: pg_autoctl
    would retry that bind for ever (CI once waited out its two minutes); the harness sees
    the failed bind in the logs and starts a new formation on fresh ports."""
    held: list[socket.socket] = []
    run = AutoFailover._run

    async def taken_first(formation: AutoFailover, node: Node) -> None:
        if node == formation.monitor and not held:
            held.append(socket.socket())
            held[0].bind(("127.0.0.1", node.port))
        await run(formation, node)

    monkeypatch.setattr(AutoFailover, "_run", taken_first)
    try:
        formation = await start_formation()
        try:
            assert formation.monitor.port != held[0].getsockname()[1]
            assert await formation.primary() in formation.nodes
        finally:
            await formation.stop()
    finally:
        for sock in held:
            sock.close()


async def unsettled(client: Client, parent: str, running: str) -> list[str]:
    """Units of ``parent`` not yet COMPLETED or STOPPED, but for the ``running`` one."""
    listed = await client.api.ListWorkUnits(
        api_pb2.ListWorkUnitsRequest(parent=parent, page_size=1000), wait_for_ready=True
    )
    states = {u.name: S(u.current_work_unit_execution.status.state) for u in listed.work_units}
    return [
        f"{name}: {state.name}"
        for name, state in states.items()
        if name != running and state not in (S.COMPLETED, S.STOPPED)
    ]
