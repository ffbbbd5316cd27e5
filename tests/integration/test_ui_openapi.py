"""The REST face against its own OpenAPI document (docs/rest.md, "The OpenAPI document").

``xmc-ui`` serves ``/openapi.json``, the very text checked in as ``docs/openapi.json``.
Then schemathesis, as its own process, runs against a live ``xmc-ui`` and ESS (OS processes
over the test's Postgres database and Redis, authentication on) with that document: no
answer may be a 5xx, and every answer must be documented — its status code, its content
type, its body's schema, the ``Allow`` header of a 405 — and refuse what the document says
it refuses (a missing token is a 401). Before it runs, an experiment with two work units
and an artifact are made through the REST face, and schemathesis puts their ids in the
path parameters most of the time, so the reads answer real objects, not only 404s.

Two of schemathesis's checks are left out, by design, not by accident:
``positive_data_acceptance`` (a schema-valid request must succeed) fails on the ESS's own
rules the descriptors cannot carry (a filter's grammar, a page size's limit, an int64 past
its range), and ``negative_data_rejection`` (a request outside the schema must fail) fails
on the proto3 JSON mapping's lenient reading — ``null`` for any field, ``snake_case``
names, enum numbers, int64 as a JSON number — which the transcoder accepts as every
proto3 JSON parser must, while the document describes the canonical form it writes.

Bounded: a fixed seed (``XMC_SCHEMATHESIS_SEED`` overrides it), a few examples per
operation, one worker: 2,996 cases, 24 s on a quiet 2-core machine, 50 s on a busy one.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web

from kubesim.server import KubeSim
from tests.integration.test_ui_rest import _client
from tests.integration.ui_support import ess_and_ui_processes
from tests.stack import free_ports
from ui.rest import OPENAPI_PATH, add_rest_routes

BIN = Path(sys.executable).parent
DOCUMENT = Path(__file__).resolve().parents[2] / "docs" / "openapi.json"
SEED = int(os.environ.get("XMC_SCHEMATHESIS_SEED", "20261203"))
#: Examples per operation in the fuzzing phase; the coverage phase makes its own set.
EXAMPLES = 5
TOKEN = "schemathesis-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
JSON_AUTH = {**AUTH, "Content-Type": "application/json"}
CHECKS_LEFT_OUT = "positive_data_acceptance,negative_data_rejection"
WORK_UNIT = {
    "executable": {
        "schedulingConstraints": {"queueName": "cpu-queue"},
        "jobset": {
            "jobs": [{"name": "train", "replicas": 1, "spec": {"dockerImage": "python:3.11"}}]
        },
    }
}


async def test_openapi_json_is_the_checked_in_document() -> None:
    """Served without a token and without calling the ESS (none listens on the channel)."""
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{free_ports(1)[0]}")
    app = web.Application()
    add_rest_routes(app, channel)
    client = await _client(app)
    try:
        response = await client.get(OPENAPI_PATH)
        assert response.status == 200
        assert response.content_type == "application/json"
        assert await response.text() == DOCUMENT.read_text()
    finally:
        await client.close()
        await channel.close()


def _operations() -> int:
    paths: dict[str, dict[str, Any]] = json.loads(DOCUMENT.read_text())["paths"]
    return sum(len(item) for item in paths.values())


@dataclass(frozen=True)
class Live:
    base: str
    processes: tuple[asyncio.subprocess.Process, ...]


@pytest.fixture
async def live(database_url: str, tmp_path: Path) -> AsyncIterator[Live]:
    """An ESS (authentication on: one static token) and an xmc-ui in front of it, as OS
    processes, and a kubesim for the ESS's cluster reads (its default queues: the queue
    routes read them; no pods: a live log read finds none); their logs are printed when the
    test fails."""
    sim = KubeSim(controllers=True)
    await sim.start()
    env = {"XMC_AUTH_STATIC_TOKENS": f"{TOKEN}=alice@example.com", "XMC_KUBE_URL": sim.url}
    try:
        async with ess_and_ui_processes(database_url, tmp_path, env) as stack:
            yield Live(stack.ui, stack.processes)
    finally:
        await sim.stop()


async def _post(http: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Any:
    async with http.post(url, json=body, headers=JSON_AUTH) as response:
        answer = await response.json()
        assert response.status == 200, answer
        return answer


async def seed(base: str) -> dict[str, list[str]]:
    """An experiment with two work units and an artifact; the ids schemathesis puts in the
    path parameters of the same names. (No Actuator runs: the units stay INITIALIZING,
    with no manifest and no logs kept.)"""
    async with aiohttp.ClientSession() as http:
        experiment = (await _post(http, f"{base}/v1/experiments", {"title": "openapi"}))["name"]
        units = [
            (await _post(http, f"{base}/v1/{experiment}/workUnits", WORK_UNIT))["name"]
            for _ in range(2)
        ]
        artifact = await _post(
            http, f"{base}/v1/{experiment}/artifacts", {"url": {"url": "gs://bucket/model"}}
        )
    return {
        "experiment": [experiment.rsplit("/", 1)[1]],
        "workUnit": sorted({name.split("/")[3] for name in units}),
        "artifact": [artifact["name"].rsplit("/", 1)[1]],
        "execution": ["1"],  # each unit's first
    }


def config(ids: dict[str, list[str]]) -> str:
    """schemathesis.toml: the seeded ids in 70 % of the path parameters, logs read without
    following, watches read once, the coverage phase in positive mode only (its negative
    cases are many and the fuzzing phase has some)."""
    lines = []
    for name, values in ids.items():
        lines += [f"[dictionaries.{name}]", f"values = {json.dumps(values)}"]
    lines.append("[parameters]")
    lines += [f'"path.{name}" = {{ dictionary = "{name}", probability = 0.7 }}' for name in ids]
    # A followed log of a live execution ends only when the execution does, which no
    # Actuator here ever makes happen: schemathesis reads logs without following.
    lines.append('"query.follow" = "false"')
    # Likewise a watch, which ends only when its caller hangs up: read once, caught up.
    lines.append('"query.once" = "true"')
    lines += ["[phases.coverage.generation]", 'mode = "positive"']
    return "\n".join(lines) + "\n"


@pytest.mark.slow  # two services as OS processes and a schemathesis run of 25-50 s
async def test_schemathesis_finds_every_answer_documented(live: Live, tmp_path: Path) -> None:
    (tmp_path / "schemathesis.toml").write_text(config(await seed(live.base)))
    command = [
        str(BIN / "st"), "--no-color", "--config-file", str(tmp_path / "schemathesis.toml"),
        "run", f"{live.base}{OPENAPI_PATH}",
        "--header", f"Authorization: Bearer {TOKEN}",
        # Every write needs it, a DELETE without a body too (415 otherwise, documented):
        # without it no DELETE would reach the ESS.
        "--header", "Content-Type: application/json",
        "--checks", "all", "--exclude-checks", CHECKS_LEFT_OUT,
        "--seed", str(SEED), "--max-examples", str(EXAMPLES), "--workers", "1",
        "--request-timeout", "35",
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(
        *command, cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        output, _ = await asyncio.wait_for(process.communicate(), timeout=300)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    text = output.decode(errors="replace")
    print(text)
    assert process.returncode == 0, (
        f"schemathesis found answers the document does not allow:\n{text}"
    )
    assert f"Tested: {_operations()}" in text  # every operation of the document ran
    assert all(process.returncode is None for process in live.processes), "a service exited"
