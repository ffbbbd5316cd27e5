"""A Reconciler leader paused past its Lease cannot write when it wakes (issue 30 point 4,
decision 0054). Two of every service as OS processes (``tests.stack``), each Reconciler
reaching its own ESS through a proxy (``tests.ha.fence.HoldingProxy``):

1. the leader observes a change and sends the write; its bytes are held on the way;
2. the leader is SIGSTOPped for longer than its Lease; the standby takes the Lease and
   writes through the other ESS, moving the fence in Postgres up to its generation;
3. the held write reaches the first ESS: refused with FAILED_PRECONDITION, counted and
   logged there, and the unit keeps what the new leader wrote;
4. the old leader is SIGCONTed: it reads the refusal (``xmc_reconciler_fenced_writes``)
   and stays a standby.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from tests.ha.fence import HoldingProxy, lease_holder, metric
from tests.integration.processes import Client
from tests.integration.redis_server import RedisServer
from tests.integration.support import forever_work_unit
from tests.servers import ADMIN_DSN
from tests.stack import Stack, StackOptions, create_database, drop_database
from tests.waiting import eventually
from xmc.model.states import WorkUnitState

pytestmark = pytest.mark.slow

S = WorkUnitState
LEASE_SECONDS = 2
#: Each Reconciler's ESS: the fence must hold across replicas, not within one.
ESS_OF = {"reconciler": "ess", "reconciler-2": "ess-2"}


@pytest.fixture
async def fenced_stack(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[tuple[Stack, dict[str, HoldingProxy]]]:
    options = StackOptions(
        replicas=2, leader_election=True, reconciler_args=(f"--lease-seconds={LEASE_SECONDS}",)
    )
    database = await create_database(ADMIN_DSN)
    stack = Stack(
        database_url=database, redis_url=private_redis.url, log_dir=tmp_path / "logs",
        options=options,
    )  # fmt: skip
    proxies = {name: HoldingProxy(stack.ess_ports[ess]) for name, ess in ESS_OF.items()}
    try:
        for name, proxy in proxies.items():
            await proxy.start()
            stack.process_env[name] = {"XMC_ESS_TARGET": f"127.0.0.1:{proxy.port}"}
        await stack.start()
        yield stack, proxies
    finally:
        for proxy in proxies.values():
            proxy.release()
        await stack.stop()
        for proxy in proxies.values():
            await proxy.close()
        await drop_database(ADMIN_DSN, database)
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            stack.print_logs()


async def touch(stack: Stack, unit: str) -> None:
    """A label on the unit's JobSet: the leader observes it and writes."""
    xid, wid = unit.split("/")[1::2]
    url = f"{stack.kube_url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    async with aiohttp.ClientSession() as http, http.patch(
        f"{url}/xmc-{xid}-{wid}", json={"metadata": {"labels": {"touched": "yes"}}},
        headers={"Content-Type": "application/merge-patch+json"},
    ) as response:  # fmt: skip
        response.raise_for_status()


async def test_a_leader_paused_past_its_lease_cannot_write_when_it_wakes(
    fenced_stack: tuple[Stack, dict[str, HoldingProxy]],
) -> None:
    stack, proxies = fenced_stack
    client = Client(stack)
    try:
        parent = await client.experiment()
        unit = await client.create(parent, forever_work_unit())
        await eventually(functools.partial(client.state, unit), S.RUNNING, within=60)
        old = await eventually(functools.partial(lease_holder, stack), within=30)
        (new,) = set(ESS_OF) - {old}
        proxy = proxies[old]

        # 1. The leader's next write leaves it and is held on the way.
        seen = await metric(stack, old, "xmc_reconciler_observations_total", source="jobset")
        proxy.hold()
        await touch(stack, unit)

        async def write_in_flight() -> bool:
            observed = await metric(stack, old, "xmc_reconciler_observations_total")
            pending = await metric(stack, old, "xmc_reconciler_pending_updates")
            return observed > seen and pending == 0 and proxy.held_bytes > 0

        await eventually(write_in_flight, within=10, what="the leader's write is on its way")

        # 2. Paused past its Lease: the standby takes over and writes (its first write
        # moves the fence up, through the other ESS).
        stack.signal(old, signal.SIGSTOP)
        await eventually(functools.partial(lease_holder, stack), new, within=30)
        await eventually(
            functools.partial(
                metric, stack, ESS_OF[new], "xmc_ess_leader_fence_total", decision="advance"
            ),
            within=30,
            what="the new leader wrote",
        )

        # 3. The held write arrives: refused, and the unit keeps the new leader's state.
        assert (
            await metric(stack, ESS_OF[old], "xmc_ess_leader_fence_total", decision="refuse") == 0
        )
        proxy.release()
        await eventually(
            functools.partial(
                metric, stack, ESS_OF[old], "xmc_ess_leader_fence_total", decision="refuse"
            ),
            within=30,
            what="the deposed leader's write refused",
        )
        log = (stack.log_dir / f"{ESS_OF[old]}.log").read_text()
        assert "write of a deposed leader refused" in log
        assert await client.state(unit) is S.RUNNING

        # 4. Woken, the old leader reads the refusal and stays a standby.
        stack.signal(old, signal.SIGCONT)
        await eventually(
            functools.partial(metric, stack, old, "xmc_reconciler_fenced_writes_total"),
            within=30,
            what="the old leader told of the refusal",
        )
        assert await lease_holder(stack) == new
        assert all(stack.alive().values()), stack.alive()
    finally:
        await client.channel.close()
