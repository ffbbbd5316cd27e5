"""What a Redis failover harness offers, whether Sentinel's (tests/ha/sentinel.py) or a
Redis Cluster's (tests/ha/cluster_failover.py), so one test or fault scenario drives both:
``pick`` the master holding a key and its replica, ``isolate_replica`` (it misses every
write from then on), ``kill_master`` (SIGKILL; the replica resumes), ``wait_promoted``."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tests.ha.cluster_failover import FailoverCluster
from tests.ha.sentinel import SentinelGroup


class Failover(Protocol):
    master_port: int
    replica_port: int

    @property
    def url(self) -> str: ...
    @property
    def env(self) -> dict[str, str]: ...
    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    async def pick(self, key: str) -> tuple[int, int]: ...
    async def isolate_replica(self) -> None: ...
    async def kill_master(self) -> None: ...
    async def wait_promoted(self, within: float = 60.0) -> None: ...


def failover(kind: str, directory: Path) -> Failover:
    """``sentinel`` or ``cluster``, under ``directory`` (created)."""
    directory.mkdir(parents=True, exist_ok=True)
    if kind == "sentinel":
        return SentinelGroup(directory)
    if kind == "cluster":
        return FailoverCluster(directory)
    raise ValueError(f"no Redis failover harness {kind!r}; known: sentinel, cluster")
