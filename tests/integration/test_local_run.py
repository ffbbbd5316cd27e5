"""``make run`` (``python -m xmc.devrun``): five separate processes, a work unit that runs
to COMPLETED through all of them and shows on the dashboard, a refused second start, and a
clean Ctrl-C."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from pathlib import Path
from urllib.request import urlopen

import aiohttp
import grpc
import pytest

from tests.integration import local_run as local_run_module
from tests.integration.local_run import free_base, local_run, local_run_env, lost_a_port
from tests.integration.support import minimal_work_unit
from tests.stack import is_free
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# make run's five processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow


async def read_until(stream: asyncio.StreamReader, marker: str, *, within: float) -> list[str]:
    seen: list[str] = []
    async with asyncio.timeout(within):
        while True:
            line = (await stream.readline()).decode()
            if not line:
                raise AssertionError(f"output ended before {marker!r}:\n{''.join(seen)}")
            seen.append(line)
            if marker in line:
                return seen


async def run_to_end(env: dict[str, str], *, within: float) -> tuple[int, str, str]:
    """``make run``'s parent started and waited for: (exit code, stdout, stderr)."""
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xmc.devrun", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(run.communicate(), timeout=within)
    assert run.returncode is not None
    return run.returncode, out.decode(), err.decode()


async def test_a_taken_port_is_named_before_anything_starts(
    database_url: str, tmp_path: Path
) -> None:
    base = free_base()
    env = local_run_env(database_url, tmp_path, base)
    with socket.socket() as squatter:  # another program on the dashboard's port
        squatter.bind(("127.0.0.1", base + 6))
        squatter.listen()
        code, out, err = await run_to_end(env, within=60)
    assert code == 1
    assert f"port {base + 6} (dashboard) is already in use" in err
    assert f"XMC_UI_LISTEN (now 127.0.0.1:{base + 6})" in err
    assert "XMC is running" not in out
    assert is_free(base), "kubesim was started although a port was taken"
    assert not (tmp_path / "xmc.pid").exists()


async def test_a_service_that_cannot_start_gives_no_banner(
    database_url: str, tmp_path: Path
) -> None:
    env = local_run_env(database_url, tmp_path, free_base())
    env["XMC_KUBESIM_KUEUE_VERSION"] = "0.1"  # kubesim refuses it and exits 2
    code, out, err = await run_to_end(env, within=90)
    assert code == 1
    assert "XMC is running" not in out
    assert "kubesim exited" in err


async def test_make_run_starts_everything_and_stops_cleanly(
    database_url: str, tmp_path: Path
) -> None:
    base = free_base()
    env = local_run_env(database_url, tmp_path, base)
    run = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "xmc.devrun", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert run.stdout is not None
    try:
        banner = await read_until(run.stdout, "Ctrl-C stops everything", within=60)
        assert any("XMC is running." in line for line in banner)
        assert any(f"dashboard:    http://127.0.0.1:{base + 6}" in line for line in banner)
        drain = asyncio.create_task(run.stdout.read())
        # The banner waits for every service's /readyz: kubesim's, then the four
        # services' on the metrics ports.
        async with aiohttp.ClientSession() as http:
            for port in (base, base + 2, base + 3, base + 4, base + 5):
                async with http.get(f"http://127.0.0.1:{port}/readyz") as ready:
                    assert ready.status == 200, (port, await ready.text())

        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "xmc.devrun", env=env, stdout=asyncio.subprocess.PIPE
        )
        out, _ = await second.communicate()
        assert second.returncode == 1
        assert b"already running" in out

        async with grpc.aio.insecure_channel(f"127.0.0.1:{base + 1}") as channel:
            api = api_pb2_grpc.ExperimentStateServiceStub(channel)
            # Auth is off in a local run; the creator is still the email the caller
            # claims (the published client sends XMC_USER_EMAIL as x-goog-user-email).
            experiment = await api.CreateExperiment(
                api_pb2.CreateExperimentRequest(experiment=Experiment(title="local")),
                metadata=(("x-goog-user-email", "You@Example.com"),),
            )
            assert experiment.creator == "you@example.com"
            operation = await api.CreateWorkUnit(
                api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=minimal_work_unit())
            )
            name = str(operation.name).split("/operations/")[0]

            async def state() -> WorkUnitState:
                work_unit = await api.GetWorkUnit(api_pb2.GetWorkUnitRequest(name=name))
                return WorkUnitState(work_unit.current_work_unit_execution.status.state)

            await eventually(state, WorkUnitState.COMPLETED, within=60)

        # The link the published client prints: {XMANAGER_UI_URL}/experiments/{XID}.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{base + 6}/{experiment.name}") as page,
        ):
            assert page.status == 200
            text = await page.text()
        assert "local" in text
        assert 'data-state="COMPLETED"' in text
    finally:
        if run.returncode is None:
            run.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(run.wait(), timeout=60)
    assert code == 0
    assert b"XMC stopped." in await drain
    assert not (tmp_path / "xmc.pid").exists()


def test_a_run_that_lost_a_port_starts_again_on_fresh_ports(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner the system tests share: a block whose port another process took between
    the pick and the bind costs a restart on a fresh block, not the test."""
    taken = free_base()
    picks = iter([taken])
    fresh = local_run_module.free_base
    monkeypatch.setattr(local_run_module, "free_base", lambda: next(picks, None) or fresh())
    with socket.socket() as squatter:  # another process on the Actuator's metrics port
        squatter.bind(("127.0.0.1", taken + 3))
        squatter.listen()
        with local_run(tmp_path_factory) as system:
            assert system.endpoint != f"127.0.0.1:{taken + 1}"
            with urlopen(f"{system.kube_url}/readyz", timeout=5) as ready:
                assert ready.status == 200


@pytest.mark.parametrize(
    ("log", "lost"),
    [
        ("make run: cannot start:\n  port 20005 (dashboard) is already in use on 127.0.0.1", True),
        ("XMC_ESS_LISTEN: cannot bind 127.0.0.1:20001 (in use, or not local)", True),
        ("OSError: [Errno 98] metrics/health on 127.0.0.1:20004: Address already in use", True),
        ("XMC did not start: kubesim exited with 2", False),
    ],
)
def test_what_counts_as_a_lost_port(log: str, lost: bool) -> None:
    assert lost_a_port(log) is lost
