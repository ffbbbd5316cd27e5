"""A running unit's logs, followed live (issue 27.1), on the local run as OS processes
(``python -m xmc.devrun``: kubesim, ESS, Actuator, Reconciler, xmc-ui): the real ``xmc``
command (``xmc logs -f``, its own process) and the REST stream print each line as the
container writes it and end when the unit ends; afterwards the same log is read from
what XMC kept, the JobSet gone.

Real time: kubesim's clock at scale 1, lines half a second apart.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest

from tests.integration.local_run import LocalSystem, local_run
from tests.integration.support import behaving_unit
from tests.integration.test_system_e2e import Client
from tests.waiting import eventually
from xmc.model.states import WorkUnitState
from xmc_api.xmc.v1 import logs_pb2, logs_pb2_grpc

pytestmark = pytest.mark.slow

S = WorkUnitState
LINES = [f"step {i}" for i in range(1, 9)]
#: Every line printed (at 0, 0.5, … 3.5 s), then 1 s more.
PRINTING = {"logs": LINES, "log_every_seconds": 0.5, "run_seconds": 4.5}


@pytest.fixture(scope="module")
def live_system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    with local_run(tmp_path_factory) as system:
        yield system


@pytest.fixture
async def client(live_system: LocalSystem) -> Any:
    made = Client(live_system)
    yield made
    await made.channel.close()


async def test_xmc_logs_follow_prints_lines_as_written_and_ends_with_the_unit(
    client: Client,
) -> None:
    name = await client.work_unit(
        await client.experiment(),
        behaving_unit(PRINTING),
    )
    await eventually(lambda: client.state(name), S.RUNNING, within=30)
    xid, wid = name.split("/")[1::2]
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("xmc")), "--endpoint", client.system.endpoint,
        "logs", xid, wid, "-f", "-q",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ),
    )  # fmt: skip
    assert process.stdout is not None
    first = await asyncio.wait_for(process.stdout.readline(), timeout=20)
    assert first.decode().strip() in LINES, "a line arrives while the unit runs"
    assert await client.state(name) == S.RUNNING
    rest, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, err.decode()
    printed = (first + rest).decode().splitlines()
    assert printed[-len(LINES) :] == LINES
    assert await client.state(name) == S.COMPLETED, "-f ends when the unit ends"


async def test_the_rest_stream_follows_and_the_kept_log_outlives_the_jobset(
    client: Client,
) -> None:
    name = await client.work_unit(
        await client.experiment(),
        behaving_unit(PRINTING),
    )
    await eventually(lambda: client.state(name), S.RUNNING, within=30)
    url = f"{client.system.ui_url}/v1/{name}/logs?follow=true"
    text = b""
    async with aiohttp.ClientSession() as http, http.get(url) as answer:
        assert answer.status == 200
        assert answer.headers["Content-Type"].startswith("application/x-ndjson")
        async for line in answer.content:
            result = json.loads(line)["result"]
            if "data" in result:
                text += base64.b64decode(result["data"])
    assert text.decode().splitlines() == LINES
    await eventually(lambda: client.state(name), S.COMPLETED, within=30)
    await eventually(lambda: client.jobset(name), None, within=60)

    stub = logs_pb2_grpc.LogServiceStub(client.channel)
    chunks = [c async for c in stub.ReadWorkUnitLogs(logs_pb2.ReadWorkUnitLogsRequest(name=name))]
    assert chunks[0].log.source == logs_pb2.ContainerLog.STORED
    assert b"".join(c.data for c in chunks).decode().splitlines() == LINES
    listed = await stub.ListContainerLogs(
        logs_pb2.ListContainerLogsRequest(parent=name, execution_id=1)
    )
    assert listed.exit_code == 0


async def test_a_missing_unit_is_a_404_over_rest_and_not_found_over_grpc(client: Client) -> None:
    parent = await client.experiment()
    url = f"{client.system.ui_url}/v1/{parent}/workUnits/99/logs"
    async with aiohttp.ClientSession() as http, http.get(url) as answer:
        assert answer.status == 404
        body = await answer.json()
        assert "does not exist" in body["error"]["message"]
    stub = logs_pb2_grpc.LogServiceStub(client.channel)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        async for _ in stub.ReadWorkUnitLogs(
            logs_pb2.ReadWorkUnitLogsRequest(name=f"{parent}/workUnits/99")
        ):
            pass
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND
