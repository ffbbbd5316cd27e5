"""The one place a service builds its Redis client: one node (``XMC_REDIS_URL``), a
Redis Cluster (``XMC_REDIS_CLUSTER_NODES``) or the master a group of Redis Sentinels names
(``XMC_REDIS_SENTINELS``, ``XMC_REDIS_SENTINEL_MASTER``; decision 0052).

With Sentinels the client is redis-py's ``Sentinel(...).master_for(...)``: every new
connection asks the Sentinels where the master is, and a connection that finds a demoted
master (``READONLY``) is dropped, so after a failover each service's next command reaches
the promoted replica without a restart. What the old master had not yet replicated is
lost to Redis; the outbox relay notices (``served_by``) and re-drives it.

Both clients answer the same commands for XMC's use, because each multi-key script touches
one stream and keys tagged with its name, all in the stream's slot
(``xmc.streams.StreamNames``, decision 0027). The differences that remain are handled here
and in ``xmc.streams``: a cluster pipeline cannot carry EVALSHA (the task publish is one
multi-key script call instead), and ``INFO`` must be asked of the node that holds the keys.
"""

from __future__ import annotations

from typing import Any, Final

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.connection import parse_url

from xmc.keepalive import tcp_options
from xmc.settings import Settings

#: Seconds one question to a Sentinel may take: a Sentinel that does not answer is
#: skipped for the next, and a blocking read's ``socket_timeout=None`` must not apply.
SENTINEL_TIMEOUT: Final = 1.0


def parse_nodes(nodes: tuple[str, ...]) -> list[tuple[str, int]]:
    """``("host:port", ...)`` → ``[(host, port), ...]`` (validated by ``Settings``)."""
    parsed = []
    for node in nodes:
        host, _, port = node.rpartition(":")
        parsed.append((host.strip("[]"), int(port)))
    return parsed


def connect_redis(
    settings: Settings,
    *,
    socket_timeout: float | None = None,
    socket_connect_timeout: float | None = None,
) -> Any:
    """A client for the configured Redis; it connects lazily, on its first command.

    ``socket_timeout`` None means no read timeout: a blocking XREADGROUP must not time out;
    keepalive still drops its connection when Redis goes silent (``xmc.keepalive``).
    """
    keepalive = tcp_options(settings.dead_peer_seconds)
    if settings.redis_cluster_nodes:
        return RedisCluster(
            startup_nodes=[ClusterNode(h, p) for h, p in parse_nodes(settings.redis_cluster_nodes)],
            socket_timeout=socket_timeout,
            socket_connect_timeout=socket_connect_timeout,
            socket_keepalive=True,
            socket_keepalive_options=keepalive,
        )
    if settings.redis_sentinels:
        return _sentinel_master(settings, socket_timeout, socket_connect_timeout, keepalive)
    return aioredis.Redis.from_url(
        settings.redis_url,
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_connect_timeout,
        socket_keepalive=True,
        socket_keepalive_options=keepalive,
    )


def _sentinel_master(
    settings: Settings,
    socket_timeout: float | None,
    socket_connect_timeout: float | None,
    keepalive: dict[int, int],
) -> Any:
    """The master's client, found through the Sentinels; the database number and the
    credentials are XMC_REDIS_URL's (its host is not used)."""
    url = parse_url(settings.redis_url)  # type: ignore[no-untyped-call]
    sentinels = Sentinel(  # type: ignore[no-untyped-call]
        parse_nodes(settings.redis_sentinels),
        sentinel_kwargs={
            "socket_timeout": SENTINEL_TIMEOUT,
            "socket_connect_timeout": SENTINEL_TIMEOUT,
        },
    )
    return sentinels.master_for(
        settings.redis_sentinel_master,
        db=url.get("db", 0),
        username=url.get("username"),
        password=url.get("password"),
        socket_timeout=socket_timeout,
        socket_connect_timeout=socket_connect_timeout,
        socket_keepalive=True,
        socket_keepalive_options=keepalive,
    )


async def server_run_id(redis: Any, key: str) -> str:
    """The run id of the server that holds ``key``: it changes when that server restarts
    (or, in a cluster, when a replica takes over the key's slot)."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()  # idempotent: the slot map, before asking for a node
        info = await redis.info("server", target_nodes=redis.get_node_from_key(key))
    else:
        info = await redis.info("server")
    return str(info.get("run_id", ""))
