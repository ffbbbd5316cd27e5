"""A private Redis Sentinel group on loopback: a master, one replica, three Sentinels.

Quorum 2 of 3, ``down-after-milliseconds`` 1000 and ``failover-timeout`` 5000 (Redis's
defaults are 30 s and 3 min), so killing the master promotes the replica within seconds.
Nothing persists (``--save ""``, no AOF): a killed node's unreplicated writes are gone,
as on a host that died.

``isolate_replica`` makes the replica miss writes deterministically: the replica is
stopped (SIGSTOP) and the master drops its link (``CLIENT KILL TYPE replica``), so every
write from then on exists only on the master until ``kill_master`` (SIGKILL), after which
the replica is resumed and promoted without them — asynchronous replication's loss
window, made as wide as the test wants. Used by tests/integration/test_redis_failover.py
and bench/faults_redis.py.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import signal
from pathlib import Path
from typing import Any, Final

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from tests.ha.ports import free_ports
from tests.waiting import eventually

MASTER_NAME: Final = "xmc"
DOWN_AFTER_MS: Final = 1000
FAILOVER_TIMEOUT_MS: Final = 5000


class SentinelGroup:
    """Master, replica and three Sentinels, each a process under ``directory``."""

    def __init__(self, directory: Path) -> None:
        server, sentinel = shutil.which("redis-server"), shutil.which("redis-sentinel")
        if server is None or sentinel is None:
            raise RuntimeError(
                "redis-server/redis-sentinel are not installed (apt-get install redis-sentinel)"
            )
        self._server, self._sentinel = server, sentinel
        self._directory = directory
        ports = free_ports(5)
        self.master_port, self.replica_port = ports[0], ports[1]
        self.sentinel_ports = ports[2:]
        self._nodes: dict[int, asyncio.subprocess.Process] = {}
        self._sentinels: list[asyncio.subprocess.Process] = []

    @property
    def url(self) -> str:
        """XMC_REDIS_URL: the database (0); its host is ignored when Sentinels are set."""
        return f"redis://127.0.0.1:{self.master_port}/0"

    @property
    def env(self) -> dict[str, str]:
        """The settings that point XMC at the group (decision 0052)."""
        return {
            "XMC_REDIS_SENTINELS": ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports),
            "XMC_REDIS_SENTINEL_MASTER": MASTER_NAME,
        }

    async def start(self, within: float = 30.0) -> None:
        await self._start_node(self.master_port)
        await self._start_node(self.replica_port, "--replicaof", "127.0.0.1", str(self.master_port))
        await eventually(
            lambda: self._info(self.replica_port, "replication"),
            lambda info: info.get("master_link_status") == "up",
            within=within, every=0.05, what="the replica in sync with the master",
        )  # fmt: skip
        for port in self.sentinel_ports:
            config = self._directory / f"sentinel-{port}.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {self._directory}\n"
                f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} 2\n"
                f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {MASTER_NAME} 1\n"
            )
            self._sentinels.append(await self._spawn(self._sentinel, str(config)))
        # A failover needs a majority of Sentinels that know each other and the replica
        # (they find both through the master, in ~2 s): killing the master before that
        # would leave it dead and nobody promoted.
        for port in self.sentinel_ports:
            await eventually(
                functools.partial(self._sentinel_view, port),
                lambda view: (view.get("num-other-sentinels"), view.get("num-slaves"))
                == ("2", "1"),
                within=within, every=0.1, what=f"Sentinel :{port} seeing its peers and the replica",
            )  # fmt: skip

    async def pick(self, key: str) -> tuple[int, int]:
        """The master and the replica (one of each: every key is the master's)."""
        return self.master_port, self.replica_port

    async def isolate_replica(self) -> None:
        """From now on the replica receives nothing (see the module docstring)."""
        self._nodes[self.replica_port].send_signal(signal.SIGSTOP)
        client: Any = aioredis.Redis(port=self.master_port)
        try:
            await client.execute_command("CLIENT", "KILL", "TYPE", "replica")
        finally:
            await client.aclose()

    async def kill_master(self) -> None:
        """SIGKILL the master and resume the replica (if isolated): the Sentinels now
        promote it, with whatever it had received."""
        process = self._nodes.pop(self.master_port)
        process.kill()
        await process.wait()
        self._nodes[self.replica_port].send_signal(signal.SIGCONT)

    async def freeze_master(self) -> None:
        """SIGSTOP the master: a host gone silent, whose connections stay open and are
        never answered (a killed process's are closed by the kernel at once)."""
        self._nodes[self.master_port].send_signal(signal.SIGSTOP)

    async def wait_promoted(self, within: float = 60.0) -> None:
        """Until every Sentinel names the replica as the master and it answers as one."""
        for port in self.sentinel_ports:
            await eventually(
                functools.partial(self._sentinel_view, port),
                lambda view: view.get("port") == str(self.replica_port),
                within=within, every=0.1, what=f"Sentinel :{port} naming the replica master",
            )  # fmt: skip
        await eventually(
            lambda: self._info(self.replica_port, "replication"),
            lambda info: info.get("role") == "master",
            within=within, every=0.1, what="the replica promoted",
        )  # fmt: skip

    async def stop(self) -> None:
        """SIGKILL everything (a stopped process too)."""
        for process in [*self._nodes.values(), *self._sentinels]:
            if process.returncode is None:
                process.kill()
                await process.wait()
        self._nodes, self._sentinels = {}, []

    async def _start_node(self, port: int, *extra: str) -> None:
        workdir = self._directory / str(port)
        workdir.mkdir(parents=True, exist_ok=True)
        self._nodes[port] = await self._spawn(
            self._server, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir), *extra,
        )  # fmt: skip

    async def _spawn(self, binary: str, *arguments: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            binary, *arguments,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip

    async def _info(self, port: int, section: str) -> dict[str, object]:
        return await _ask(port, "INFO", section)

    async def _sentinel_view(self, port: int) -> dict[str, object]:
        return await _ask(port, "SENTINEL", "MASTER", MASTER_NAME)


async def _ask(port: int, *command: str) -> dict[str, object]:
    """One command to a node on ``port``; {} while it does not answer."""
    client: Any = aioredis.Redis(port=port, decode_responses=True, socket_timeout=2)
    try:
        answer: dict[str, object] = await client.execute_command(*command)
        return answer
    except (RedisConnectionError, OSError):
        return {}
    finally:
        await client.aclose()
