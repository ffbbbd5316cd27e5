"""Business metrics through the four services as OS processes at real time (issue 29,
docs/metrics.md): a unit that runs shows in ``xmc_work_units`` under its owner and queue,
its start lands in the create-to-RUNNING histogram, a killed unit is counted under its
reason; and every series the Grafana dashboard queries is one the processes export."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.grafana_check import exported_series, load, problems_against
from tests.integration.processes import Client, running_stack
from tests.integration.redis_server import RedisServer
from tests.integration.support import behaving_unit
from tests.servers import ADMIN_DSN
from tests.stack import Stack, StackOptions
from tests.waiting import eventually
from xmc.model.states import WorkUnitState as S

# The four services as OS processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

OWNER = "dev@localhost"  # auth disabled: the creator a caller claiming no email gets


@pytest.fixture
async def stack(
    private_redis: RedisServer, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Stack]:
    options = StackOptions(extra_env={"XMC_METRICS_REFRESH_SECONDS": "0.2"})
    async with running_stack(
        ADMIN_DSN, private_redis.url, tmp_path / "logs", request, options
    ) as started:
        yield started


async def ready(stack: Stack, name: str) -> int:
    try:
        async with aiohttp.ClientSession() as http, http.get(stack.ops_url(name, "/readyz")) as got:
            return got.status
    except aiohttp.ClientConnectionError:
        return 0


async def scrape(stack: Stack, name: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(stack.ops_url(name, "/metrics")) as got:
        assert got.status == 200
        return await got.text()


async def sample(stack: Stack, name: str, labels: dict[str, str]) -> float:
    """The value of one series of the ESS (0 when absent)."""
    for family in text_string_to_metric_families(await scrape(stack, "ess")):
        for found in family.samples:
            if found.name == name and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    return 0.0


async def test_a_running_unit_is_counted_by_owner_queue_and_state(stack: Stack) -> None:
    client = Client(stack)
    try:
        await eventually(functools.partial(ready, stack, "ess"), 200, within=60)
        parent = await client.experiment()
        unit = await client.create(parent, behaving_unit({"run_seconds": 8}))
        running = {"owner": OWNER, "queue": "cpu-queue", "state": "RUNNING"}
        assert await eventually(lambda: sample(stack, "xmc_work_units", running), 1.0, within=60)
        killed = await client.create(parent, behaving_unit({"run_seconds": 1, "exit_code": 137}))

        assert await eventually(lambda: client.state(unit), S.COMPLETED, within=60)
        assert await eventually(lambda: client.state(killed), S.FAILED, within=60)
        # The last unit ended: the owner's RUNNING series drops out, not stuck at 1.
        gone = await eventually(lambda: sample(stack, "xmc_work_units", running), 0.0, within=30)
        assert gone == 0.0
        first = {"execution": "first"}
        count = "xmc_work_unit_create_to_running_seconds_count"
        # Told first starts by the ESS's loop, off the request path: within a second or so.
        assert await eventually(lambda: sample(stack, count, first), 2.0, within=10) == 2.0
        assert await sample(stack, "xmc_work_unit_failures_total", {"reason": "killed"}) == 1.0
        entered = "xmc_work_unit_state_changes_total"
        assert await sample(stack, entered, {"state": "COMPLETED"}) == 1.0
    finally:
        await client.channel.close()


async def test_the_grafana_dashboard_queries_only_exported_series(stack: Stack) -> None:
    names = ("ess", "actuator", "reconciler")
    for name in names:
        await eventually(functools.partial(ready, stack, name), 200, within=60)
    texts = {name: await scrape(stack, name) for name in names}
    assert problems_against(load(), exported_series(texts)) == []
