"""Every service restarted one replica at a time (issue 30, point 5): two of each as OS
processes (``tests.stack``), the fault matrix's sweep running and clients creating work
units in a loop, each call made as the published client makes it and retried by XMC's
documented rule (``bench/rolling_restart.py`` at a smaller load). No call fails after the
rule, nothing is lost, duplicated or stuck, and every process stops by itself (exit 0).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.rolling_restart import ROLLING_OPTIONS, Shape, roll_order, workload

from tests.integration.processes import running_stack
from tests.integration.redis_server import RedisServer
from tests.servers import ADMIN_DSN

# Two of each service as OS processes, each restarted: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

#: This test's private Redis, in its own port range (the bench uses 25379).
REDIS_PORT = 25380


async def test_a_rolling_restart_under_load_fails_no_call_after_the_rule_and_loses_nothing(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    redis.port = REDIS_PORT
    await redis.start()
    try:
        async with running_stack(
            ADMIN_DSN, redis.url, tmp_path / "logs", request, ROLLING_OPTIONS
        ) as stack:
            shape = Shape(clients=16, think=5.0, deadline=240.0, settle=3.0)
            run = await workload(stack, mode="rolling", shape=shape)
    finally:
        await redis.stop()
    tally, counts = run.tally, run.counts
    restarted = [step.name for step in run.steps]
    assert restarted == roll_order(stack.names, restarted[-1]), restarted
    assert [step.exit_code for step in run.steps] == [0] * 6, run.steps
    assert tally.first["OK"] > 0, tally.first
    assert tally.failures(tally.final) == 0, tally.render(tally.final)
    assert len(tally.acknowledged) == tally.final["OK"]
    assert run.converged_after is not None, counts.notes[:20]
    assert (counts.lost, counts.duplicated, counts.stuck, counts.died) == (0, 0, 0, 0), (
        counts.notes[:20]
    )
    print(
        f"rolling restart: {tally.calls} creates, first attempt {tally.render(tally.first)}, "
        f"after the rule {tally.render(tally.final)}; converged {run.converged_after:.1f} s"
    )
