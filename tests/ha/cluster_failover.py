"""A master failover in a private Redis Cluster: 3 masters, each with a replica, and the
master holding one key's slot killed with its replica made to miss its last writes.

The same trick as tests/ha/sentinel.py: the replica is stopped (SIGSTOP) and its master
drops the link (``CLIENT KILL TYPE replica``), so writes from then on exist only on the
master; then the master is SIGKILLed and the replica resumed. The other masters mark the
dead one FAIL after ``node_timeout_ms`` and elect the replica, which takes the slots
without those writes.
"""

from __future__ import annotations

import functools
import signal
from dataclasses import dataclass
from pathlib import Path

from redis.crc import key_slot

from tests.ha.ports import free_ports
from tests.integration.redis_cluster import LocalRedisCluster
from tests.waiting import eventually

#: Short, so that a failover completes in seconds (Redis's default is 15 s).
NODE_TIMEOUT_MS = 2000


@dataclass(frozen=True)
class ClusterNode:
    port: int
    node_id: str
    master_id: str | None
    slots: tuple[tuple[int, int], ...]


def parse_cluster_nodes(output: str) -> list[ClusterNode]:
    """``CLUSTER NODES`` lines → nodes (pure): ``id ip:port@bus flags master ping pong
    epoch link slot...``, ``master`` being ``-`` for a master; importing/migrating slot
    entries (``[...]``) are skipped."""
    nodes = []
    for line in output.splitlines():
        fields = line.split()
        if len(fields) < 8:
            continue
        port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
        slots = []
        for item in fields[8:]:
            if item.startswith("["):
                continue
            low, _, high = item.partition("-")
            slots.append((int(low), int(high or low)))
        master = None if fields[3] == "-" else fields[3]
        nodes.append(ClusterNode(port, fields[0], master, tuple(slots)))
    return nodes


class FailoverCluster:
    """A :class:`LocalRedisCluster` with one replica per master, and its failover."""

    def __init__(self, directory: Path) -> None:
        self.cluster = LocalRedisCluster(
            directory, replicas=1, node_timeout_ms=NODE_TIMEOUT_MS, ports=free_ports
        )
        self.master_port = self.replica_port = 0

    @property
    def url(self) -> str:
        """XMC_REDIS_URL, unused when XMC_REDIS_CLUSTER_NODES is set."""
        return f"redis://127.0.0.1:{self.cluster.ports[0]}/0"

    @property
    def env(self) -> dict[str, str]:
        return {"XMC_REDIS_CLUSTER_NODES": self.cluster.nodes}

    async def start(self) -> None:
        await self.cluster.start()

    async def stop(self) -> None:
        await self.cluster.stop()

    async def pick(self, key: str) -> tuple[int, int]:
        """The master that holds ``key``'s slot and its replica; remembered as the pair
        to isolate and kill. Waits for the replica to be listed and in sync."""
        slot = key_slot(key.encode())
        nodes = await eventually(
            lambda: self._nodes(self.cluster.ports[0]),
            lambda nodes: any(n.master_id for n in nodes),
            within=30, every=0.1, what="the cluster's replicas attached",
        )  # fmt: skip
        master = next(n for n in nodes if any(lo <= slot <= hi for lo, hi in n.slots))
        replica = next(n for n in nodes if n.master_id == master.node_id)
        self.master_port, self.replica_port = master.port, replica.port
        await eventually(
            lambda: self.cluster.cli_output(replica.port, "info", "replication"),
            lambda info: "master_link_status:up" in info,
            within=30, every=0.1, what="the replica in sync",
        )  # fmt: skip
        return master.port, replica.port

    async def isolate_replica(self) -> None:
        self.cluster.processes[self.replica_port].send_signal(signal.SIGSTOP)
        await self.cluster.cli_output(self.master_port, "client", "kill", "type", "replica")

    async def kill_master(self) -> None:
        process = self.cluster.processes[self.master_port]
        process.kill()
        await process.wait()
        self.cluster.processes[self.replica_port].send_signal(signal.SIGCONT)

    async def wait_promoted(self, within: float = 60.0) -> None:
        """Until the replica is a master and every live node says the cluster is ok."""
        await eventually(
            lambda: self.cluster.cli_output(self.replica_port, "role"),
            lambda role: role.startswith("master"),
            within=within, every=0.1, what="the replica promoted",
        )  # fmt: skip
        for port in self.cluster.ports:
            if port != self.master_port:
                await eventually(
                    functools.partial(self.cluster.cli_output, port, "cluster", "info"),
                    lambda info: "cluster_state:ok" in info,
                    within=within, every=0.1, what=f"node :{port} seeing the cluster ok",
                )  # fmt: skip

    async def _nodes(self, port: int) -> list[ClusterNode]:
        return parse_cluster_nodes(await self.cluster.cli_output(port, "cluster", "nodes"))
