"""The JobSet manifest as the Actuator created it (issue 27; decision 0039), through
``make run``'s processes: kubesim, the ESS, the Actuator, the Reconciler and xmc-ui. What
the REST route serves is the JobSet kubesim stored on create, minus the fields the API
server sets; the work-unit page shows it as YAML, credentials masked, markup escaped."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final

import aiohttp
import grpc
import pytest

from tests.integration.local_run import LocalSystem, local_run
from tests.integration.support import minimal_work_unit
from tests.waiting import eventually
from xmc.model.work_unit_spec import MASK
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment

# make run's five processes: `make test-fast` leaves it out.
pytestmark = pytest.mark.slow

#: What the API server sets on an object it stores (kubesim: these four).
SERVER_FIELDS: Final = ("uid", "resourceVersion", "generation", "creationTimestamp")
SECRET: Final = "hf_live_secret_value"
MARKUP: Final = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    with local_run(tmp_path_factory) as started:
        yield started


@contextlib.asynccontextmanager
async def jobsets_as_created(kube_url: str) -> AsyncIterator[dict[str, dict[str, Any]]]:
    """Every JobSet kubesim stores from now on, by name, as its ADDED event carried it:
    the object as created, before any controller changed it."""
    added: dict[str, dict[str, Any]] = {}
    url = f"{kube_url}/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    listening = asyncio.Event()

    async def watch(http: aiohttp.ClientSession) -> None:
        async with http.get(url) as listed:
            version = (await listed.json())["metadata"]["resourceVersion"]
        params = {"watch": "1", "resourceVersion": version}
        async with http.get(url, params=params) as response:
            listening.set()
            async for line in response.content:
                event = json.loads(line)
                if event["type"] == "ADDED":
                    added[event["object"]["metadata"]["name"]] = event["object"]

    async with aiohttp.ClientSession() as http:
        task = asyncio.create_task(watch(http))
        await asyncio.wait_for(listening.wait(), timeout=30)
        try:
            yield added
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


def as_created(jobset: dict[str, Any]) -> dict[str, Any]:
    metadata = {k: v for k, v in jobset["metadata"].items() if k not in SERVER_FIELDS}
    return {**jobset, "metadata": metadata}


async def create_unit(endpoint: str) -> tuple[int, int]:
    work_unit = minimal_work_unit()
    spec = work_unit.executable.jobset.jobs[0].spec
    spec.env_vars["HF_TOKEN"] = SECRET
    spec.env_vars["NOTE"] = MARKUP
    async with grpc.aio.insecure_channel(endpoint) as channel:
        api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        experiment = await api.CreateExperiment(
            api_pb2.CreateExperimentRequest(experiment=Experiment(title="manifest"))
        )
        operation = await api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=experiment.name, work_unit=work_unit)
        )
    parts = str(operation.name).split("/")
    return int(parts[1]), int(parts[3])


async def test_the_manifest_served_and_shown_is_the_jobset_as_created(system: LocalSystem) -> None:
    async with jobsets_as_created(system.kube_url) as added:
        xid, wid = await create_unit(system.endpoint)
        jobset = await eventually(lambda: added.get(f"xmc-{xid}-{wid}"), within=60)

    unit = f"{system.ui_url}/v1/experiments/{xid}/workUnits/{wid}"
    async with aiohttp.ClientSession() as http:

        async def served() -> dict[str, Any] | None:
            async with http.get(f"{unit}/executions/1/manifest") as response:
                return dict(await response.json()) if response.status == 200 else None

        # The Actuator settles the task (and stores the manifest) right after the create.
        body = await eventually(served, within=30, what="the stored manifest")
        async with http.get(f"{unit}/executions/2/manifest") as missing:
            error = await missing.json()
            assert missing.status == 404, error
        async with http.get(f"{system.ui_url}/experiments/{xid}/workUnits/{wid}") as page:
            assert page.status == 200
            html = await page.text()

    assert json.loads(body["manifestJson"]) == as_created(jobset)
    assert body["name"] == f"experiments/{xid}/workUnits/{wid}/executions/1/manifest"
    assert (body.get("omitted", False), int(body["sizeBytes"])) == (
        False,
        len(body["manifestJson"].encode()),
    )
    assert "executions/2 does not exist" in error["error"]["message"]

    section = html.split('<section id="manifest">', 1)[1].split("</section>", 1)[0]
    assert "kind: JobSet" in section
    assert f"name: xmc-{xid}-{wid}" in section
    assert f"value: {MASK}" in section
    assert SECRET not in html, "a credential-named literal never reaches the page"
    assert MARKUP not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in section
