"""``xmc-ess serve`` as an OS process: JSON logs, metrics, graceful SIGTERM."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest

from tests.integration.ess_harness import SIGNING_KEY
from tests.servers import REDIS_URL
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# xmc-ess as an OS process: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


async def test_serve_logs_json_exposes_metrics_and_stops_on_sigterm(database_url: str) -> None:
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "XMC_DATABASE_URL": database_url,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_ESS_LISTEN": f"127.0.0.1:{port}",
        "XMC_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
        "XMC_TASK_SIGNING_KEY": SIGNING_KEY,
        "XMC_AUTH_STATIC_TOKENS": "t=ops@example.com",
        "XMC_STREAM_PREFIX": f"proc-{port}:",
    }
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("xmc-ess")),
        "serve",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            await asyncio.wait_for(channel.channel_ready(), timeout=20)
            api = api_pb2_grpc.ExperimentStateServiceStub(channel)
            created = await api.CreateExperiment(
                api_pb2.CreateExperimentRequest(experiment=Experiment(title="p")),
                metadata=(("authorization", "Bearer t"),),
            )
            assert created.creator == "ops@example.com"
        metrics = await asyncio.to_thread(_metrics, metrics_port)
        assert 'xmc_ess_rpc_total{code="OK",method="CreateExperiment"} 1.0' in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        _out, err = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0, err.decode()
    events = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    names = [event["event"] for event in events]
    assert "ess serving" in names
    assert names[-1] == "ess stopped", "SIGTERM shuts down gracefully"
    assert all(event["service"] == "ess" for event in events)
