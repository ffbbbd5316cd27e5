"""A private 3-master Redis Cluster (no persistence; no replicas unless asked for, as
tests/ha/cluster_failover.py does) for tests that run XMC on a distributed Redis:
``redis-server --cluster-enabled yes`` processes joined by ``redis-cli --cluster create``."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from tests.stack import free_ports
from tests.waiting import eventually


class LocalRedisCluster:
    """Three masters (each with ``replicas`` replicas) on free ports of 127.0.0.1, each in
    its own directory under ``directory`` (the cluster config files live there)."""

    def __init__(
        self,
        directory: Path,
        masters: int = 3,
        *,
        replicas: int = 0,
        node_timeout_ms: int = 5000,
        ports: Callable[[int], list[int]] = free_ports,
    ) -> None:
        server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
        if server is None or cli is None:
            raise RuntimeError("redis-server/redis-cli are not installed (apt-get install redis)")
        self._server, self._cli = server, cli
        self._directory = directory
        # The cluster bus would be on port + 10000 (maybe past 65535, maybe taken): each
        # node gets a free bus port of its own (``--cluster-port``, Redis 7).
        nodes = masters * (1 + replicas)
        found = ports(2 * nodes)
        self.ports, self._bus_ports = found[:nodes], found[nodes:]
        self._replicas, self._node_timeout = replicas, node_timeout_ms
        #: Each node's process, by port.
        self.processes: dict[int, asyncio.subprocess.Process] = {}

    @property
    def nodes(self) -> str:
        """``XMC_REDIS_CLUSTER_NODES``: ``host:port,...``."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    async def start(self, within: float = 30.0) -> None:
        for port, bus_port in zip(self.ports, self._bus_ports, strict=True):
            workdir = self._directory / str(port)
            workdir.mkdir(parents=True, exist_ok=True)
            arguments = [
                "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                "--cluster-port", str(bus_port),
                "--cluster-config-file", str(workdir / "nodes.conf"),
                "--cluster-node-timeout", str(self._node_timeout), "--save", "",
                "--appendonly", "no",
                "--dir", str(workdir),
            ]  # fmt: skip
            self.processes[port] = await asyncio.create_subprocess_exec(
                self._server,
                *arguments,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        async with asyncio.timeout(within):
            for port in self.ports:
                await self._until(port, ("ping",), "PONG", within)
            created = await asyncio.create_subprocess_exec(
                self._cli, "--cluster", "create", *self.nodes.split(","),
                "--cluster-replicas", str(self._replicas), "--cluster-yes",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )  # fmt: skip
            output, _ = await created.communicate()
            if created.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed: {output.decode()}")
            # Every node must agree before a client's first CLUSTER SLOTS is trusted.
            for port in self.ports:
                await self._until(port, ("cluster", "info"), "cluster_state:ok", within)

    async def _until(
        self, port: int, command: tuple[str, ...], expected: str, within: float
    ) -> None:
        """Poll ``redis-cli -p port command`` until its output contains ``expected``."""
        await eventually(
            lambda: self.cli_output(port, *command),
            lambda output: expected in output,
            within=within,
            every=0.05,
            what=f"`redis-cli -p {port} {' '.join(command)}` saying {expected}",
        )

    async def cli_output(self, port: int, *command: str) -> str:
        probe = await asyncio.create_subprocess_exec(
            self._cli, "-p", str(port), *command,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        output, _ = await probe.communicate()
        return output.decode().strip()

    async def stop(self) -> None:
        """SIGKILL every node (nothing to flush: no persistence)."""
        for process in self.processes.values():
            if process.returncode is None:
                process.kill()
                await process.wait()
        self.processes = {}


@pytest.fixture
async def redis_cluster(tmp_path: Path) -> AsyncIterator[LocalRedisCluster]:
    """A 3-master Redis Cluster of the test's own. Ask for it before ``ess_factory``:
    fixtures are torn down in reverse, and an ESS stopped after its cluster was killed
    spent ~20 s in reconnects (two tests' teardowns: 21.7 and 20.8 s, then 3.7 and 3.3 s)."""
    cluster = LocalRedisCluster(tmp_path / "redis-cluster")
    try:
        await cluster.start()
        yield cluster
    finally:
        await cluster.stop()
