"""A network path cut under a sweep, then healed, loses, duplicates and strands nothing
(issue 30, point 3): each of the six paths once, every part of the stack in a network
namespace of its own (tests/ha/netns.py), the fault matrix's workload (bench/faults.py)
with a 10 s cut instead of the matrix's 60 s. The figures are the matrix's; this asserts
only the counts."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from pathlib import Path

import pytest
from bench.fault_table import Run
from bench.faults import OPTIONS, workload
from bench.faults_net import Inject, net_run

from tests.ha.netns import PATHS, unavailable
from tests.integration.postgres_server import PostgresServer
from tests.integration.redis_server import RedisServer
from tests.stack import Stack

# OS processes in network namespaces, paths cut for seconds: `make test-fast` leaves it out.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(reason := unavailable()), reason=reason or ""),
]

ARGS = argparse.Namespace(net_hold=10.0, deadline=90.0, settle=3.0, outage=0.0)


@pytest.mark.parametrize(("client", "server"), PATHS, ids=[f"{c}-{s}" for c, s in PATHS])
async def test_a_cut_path_heals_with_nothing_lost_duplicated_or_stuck(
    client: str, server: str, tmp_path: Path
) -> None:
    scenario = f"net-cut:{client}-{server}"

    def sweep(stack: Stack, redis: RedisServer, pg: PostgresServer, cut: Inject) -> Awaitable[Run]:
        return workload(scenario, stack, redis, pg, ARGS, injection=cut)

    run = await net_run(scenario, tmp_path, ARGS, OPTIONS, sweep)

    c = run.counts
    assert (c.lost, c.duplicated, c.stuck, c.died) == (0, 0, 0, 0), c.notes
    assert run.converged_after is not None, "not converged within 90 s of the heal"
