"""The fault matrix's Redis failovers (issue 30 point 2, decision 0052).

``redis-failover``: the stack on a Sentinel group (master, one replica, three Sentinels:
tests/ha/sentinel.py); ``redis-cluster-failover``: on a Redis Cluster of three masters
with a replica each (tests/ha/cluster_failover.py), the master that holds the task
stream's slot being the one killed. In both, just before the sweep's second wave of
intents (stop, restart, create) the replica is isolated, so it misses every publish and
acknowledgement of that wave; the fault, once the wave's RPCs have returned, is a SIGKILL
of the master. The replica is promoted without those writes, every service must follow it
by itself (none is restarted), and the relay must re-drive what was lost.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import asyncpg

from tests.ha.failover import Failover, failover
from tests.stack import Stack, StackOptions
from xmc.streams import StreamNames

#: Scenario → harness kind.
REDIS_FAILOVERS = {"redis-failover": "sentinel", "redis-cluster-failover": "cluster"}


def failover_for(scenario: str, directory: Path) -> Failover:
    return failover(REDIS_FAILOVERS[scenario], directory)


def on_failover(options: StackOptions, redis: Failover) -> StackOptions:
    """The stack's options with the settings that point XMC at ``redis``."""
    return dataclasses.replace(options, extra_env={**options.extra_env, **redis.env})


async def before_the_wave(redis: Failover, stack: Stack) -> None:
    """From now on the replica of the task stream's master misses every write."""
    await redis.pick(StreamNames.with_prefix(stack.prefix).tasks)
    await redis.isolate_replica()


async def redriven(database_url: str) -> str:
    """A note for the run: how many tasks the relay published more than once — the
    entries the promoted replica lacked (and any an ordinary check found gone)."""
    conn = await asyncpg.connect(database_url)
    try:
        tasks, publishes = await conn.fetchrow(
            "SELECT count(*) FILTER (WHERE publish_count >= 2), count(*) FROM task_outbox"
        )
    finally:
        await conn.close()
    return f"re-driven after the failover: {tasks} of {publishes} tasks"
