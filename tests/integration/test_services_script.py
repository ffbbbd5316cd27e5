"""``make services`` (tools/services.sh) on the state a new machine is in: Debian's Postgres
installed but stopped, with its default authentication (peer on the socket, scram on
TCP), and no Redis running. The shared servers are never touched: the script brings up a
second Debian cluster and a second Redis on free ports of their own."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.stack import free_ports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "services.sh"

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("pg_createcluster") is None,
        reason="needs root and Debian's postgresql-common (pg_createcluster), as CI has",
    ),
    pytest.mark.slow,  # private Postgres clusters and Redis set up and torn down
]


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=180, check=False)


def _version() -> str:
    listed = _run("pg_lsclusters", "-h").stdout.split()
    return listed[0]


@pytest.fixture
def stopped_cluster() -> Iterator[tuple[str, int, int]]:
    """A new Debian cluster with the packaged defaults, not started; and a Redis port with
    nothing on it. Yields (cluster name, Postgres port, Redis port)."""
    pg_port, redis_port = free_ports(2)
    version, name = _version(), f"xmc{uuid.uuid4().hex[:8]}"
    made = _run("pg_createcluster", version, name, "--port", str(pg_port))
    assert made.returncode == 0, made.stderr
    try:
        yield name, pg_port, redis_port
    finally:
        _run("pg_dropcluster", "--stop", version, name)
        _run("redis-cli", "-p", str(redis_port), "shutdown", "nosave")


def _services(pg_port: int, redis_port: int) -> subprocess.CompletedProcess[str]:
    """``make services``, pointed at the test's own cluster and Redis port."""
    env = {
        **os.environ,
        "XMC_SERVICES_PG_PORT": str(pg_port),
        "XMC_SERVICES_REDIS_PORT": str(redis_port),
    }
    return _run("bash", str(SCRIPT), env=env)


def _psql_trusts(port: int) -> bool:
    answer = _run(
        "psql", "-w", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-Atc", "select 1"
    )
    return answer.stdout.strip() == "1"


def test_make_services_starts_a_stopped_default_cluster_and_redis(
    stopped_cluster: tuple[str, int, int],
) -> None:
    name, pg_port, redis_port = stopped_cluster
    version = _version()
    hba = Path(f"/etc/postgresql/{version}/{name}/pg_hba.conf").read_text()
    assert "scram-sha-256" in hba  # the packaged default: no password-less TCP
    assert not _psql_trusts(pg_port)

    first = _services(pg_port, redis_port)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _psql_trusts(pg_port)
    assert _run("redis-cli", "-p", str(redis_port), "ping").stdout.strip() == "PONG"

    again = _services(pg_port, redis_port)  # everything up already: says so, changes nothing
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"Postgres is up on 127.0.0.1:{pg_port}" in again.stdout
    assert f"Redis is up on 127.0.0.1:{redis_port}" in again.stdout


def test_make_services_opens_a_running_cluster_that_wants_passwords(
    stopped_cluster: tuple[str, int, int],
) -> None:
    name, pg_port, redis_port = stopped_cluster
    started = _run("pg_ctlcluster", "--skip-systemctl-redirect", _version(), name, "start")
    assert started.returncode == 0, started.stderr
    assert not _psql_trusts(pg_port)
    result = _services(pg_port, redis_port)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "reloading Postgres" in result.stdout
    assert _psql_trusts(pg_port)
