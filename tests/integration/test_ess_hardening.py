"""The ESS refuses what it cannot serve, clearly: a taken port at start, a user on an
internal RPC, and client values storage cannot hold (issue 11; the fuzz test in
``test_ess_fuzz.py`` covers the same ground at random)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from pathlib import Path

import grpc
import pytest

from ess.app import EssOptions, EssServer
from tests.integration.ess_harness import SIGNING_KEY, Ess, auth_settings, metadata
from tests.integration.support import fetch_all, minimal_work_unit, snapshot
from tests.servers import REDIS_URL
from xmc.names import MAX_CLIENT_WORK_UNIT_ID, MAX_ID
from xmc.settings import Settings
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.internal.v1 import scheduling_pb2

ALICE, ROOT, SERVICE = metadata("alice"), metadata("root"), metadata("reconciler")


async def expect(call: object, code: grpc.StatusCode, fragment: str) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call  # type: ignore[misc]
    assert info.value.code() == code, info.value.details()
    assert fragment in (info.value.details() or ""), info.value.details()


async def new_experiment(ess: Ess) -> str:
    created = await ess.api.CreateExperiment(api_pb2.CreateExperimentRequest(), metadata=ALICE)
    return str(created.name)


# --- a taken port ----------------------------------------------------------------------


async def test_a_second_ess_on_a_taken_port_fails_to_start(ess: Ess) -> None:
    taken = f"127.0.0.1:{ess.server.port}"
    settings = Settings(
        database_url=ess.database_url,
        redis_url=REDIS_URL,
        ess_listen=taken,
        task_signing_key=SIGNING_KEY,
        stream_prefix="second-ess:",
    )
    options = dataclasses.replace(EssOptions(auth=auth_settings()), run_migrations=False)
    second = EssServer(settings, options)
    try:
        with pytest.raises(RuntimeError, match=f"XMC_ESS_LISTEN: cannot bind {taken}"):
            await second.start()
    finally:
        await second.stop(grace=0)
    # The first one still owns the port and answers.
    assert (await ess.scheduling.GetSchedulingState(
        scheduling_pb2.GetSchedulingStateRequest(), metadata=SERVICE
    )).paused is False  # fmt: skip


@pytest.mark.slow  # xmc-ess as a process
async def test_xmc_ess_serve_on_a_taken_port_exits_non_zero(ess: Ess) -> None:
    taken = f"127.0.0.1:{ess.server.port}"
    env = {
        **os.environ,
        "XMC_DATABASE_URL": ess.database_url,
        "XMC_REDIS_URL": REDIS_URL,
        "XMC_ESS_LISTEN": taken,
        "XMC_TASK_SIGNING_KEY": SIGNING_KEY,
        "XMC_AUTH_STATIC_TOKENS": "t=ops@example.com",
        "XMC_STREAM_PREFIX": "second-ess:",
    }
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("xmc-ess")),
        "serve",
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    finally:
        if process.returncode is None:  # it started after all: do not leave it behind
            process.kill()
            await process.wait()
    assert process.returncode != 0, "a second ESS on a taken port must not start"
    events = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert any(e.get("event") == "cannot bind" and e.get("listen") == taken for e in events)
    assert f"XMC_ESS_LISTEN: cannot bind {taken}" in err.decode()


# --- internal RPCs ---------------------------------------------------------------------


async def test_get_scheduling_state_is_for_service_identities(ess: Ess) -> None:
    request = scheduling_pb2.GetSchedulingStateRequest()
    await expect(
        ess.scheduling.GetSchedulingState(request, metadata=ALICE),
        grpc.StatusCode.PERMISSION_DENIED,
        "GetSchedulingState: alice@example.com is not a service identity",
    )
    await expect(ess.scheduling.GetSchedulingState(request), grpc.StatusCode.UNAUTHENTICATED, "")
    for caller in (SERVICE, ROOT):  # admins count as services (docs/ess.md)
        state = await ess.scheduling.GetSchedulingState(request, metadata=caller)
        assert state.paused is False


# --- client values storage cannot hold --------------------------------------------------


async def test_a_client_work_unit_id_cannot_exhaust_server_assigned_ids(ess: Ess) -> None:
    parent = await new_experiment(ess)
    work_unit = minimal_work_unit()
    for chosen in (2**63 - 2, MAX_CLIENT_WORK_UNIT_ID + 1, -1):
        await expect(
            ess.api.CreateWorkUnit(
                api_pb2.CreateWorkUnitRequest(
                    parent=parent, work_unit=work_unit, work_unit_id=chosen
                ),
                metadata=ALICE,
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            f"work_unit_id: must be 1..{MAX_CLIENT_WORK_UNIT_ID}",
        )
    await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(
            parent=parent, work_unit=work_unit, work_unit_id=MAX_CLIENT_WORK_UNIT_ID
        ),
        metadata=ALICE,
    )
    assigned = await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit), metadata=ALICE
    )
    assert assigned.name.startswith(f"{parent}/workUnits/{MAX_CLIENT_WORK_UNIT_ID + 1}/")


async def test_an_experiment_out_of_ids_is_resource_exhausted_not_internal(ess: Ess) -> None:
    """Ids chosen before the bound existed can have used up the server-assigned ones."""
    parent = await new_experiment(ess)
    await fetch_all(
        ess.database_url,
        "UPDATE experiments SET next_wid = $1 WHERE xid = $2",
        MAX_ID,
        int(parent.split("/")[1]),
    )
    work_unit = minimal_work_unit()
    await expect(
        ess.api.CreateWorkUnit(
            api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit), metadata=ALICE
        ),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "has no server-assigned work-unit ids left; choose a work_unit_id",
    )
    await ess.api.CreateWorkUnit(
        api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=work_unit, work_unit_id=7),
        metadata=ALICE,
    )


async def test_values_storage_cannot_hold_are_invalid_and_write_nothing(ess: Ess) -> None:
    parent = await new_experiment(ess)
    nul_env = minimal_work_unit()
    nul_env.executable.jobset.jobs.add(name="aux").spec.docker_image = "img"
    nul_env.executable.jobset.jobs[1].spec.env_vars["TOKEN"] = "a\x00b"
    before = await snapshot(ess.database_url)
    cases = [
        (
            ess.api.CreateWorkUnit(
                api_pb2.CreateWorkUnitRequest(parent=parent, work_unit=nul_env), metadata=ALICE
            ),
            "work_unit.executable.jobset.jobs[1].spec.env_vars['TOKEN']: contains a NUL",
        ),
        (
            ess.api.GetExperiment(
                api_pb2.GetExperimentRequest(name=f"experiments/{MAX_ID + 1}"), metadata=ALICE
            ),
            f"name: 'experiments/{MAX_ID + 1}' has id {MAX_ID + 1}, out of range",
        ),
        (
            ess.api.CreateArtifact(
                api_pb2.CreateArtifactRequest(
                    parent=parent,
                    artifact=Artifact(data_type=70000),  # type: ignore[arg-type]
                ),
                metadata=ALICE,
            ),
            "artifact.data_type: 70000 is not a valid value of cloud.xmanager.v1.Artifact.DataType",
        ),
        (
            ess.api.GetArtifact(api_pb2.GetArtifactRequest(name="artifacts/²"), metadata=ALICE),
            "name: 'artifacts/²' is not of the form artifacts/{aid}",
        ),
        (
            ess.scheduling.PauseScheduling(
                scheduling_pb2.PauseSchedulingRequest(reason="upgrade\x00"), metadata=SERVICE
            ),
            "reason: contains a NUL",
        ),
    ]
    for call, fragment in cases:
        await expect(call, grpc.StatusCode.INVALID_ARGUMENT, fragment)
    assert await snapshot(ess.database_url) == before


async def test_undecodable_request_bytes_are_invalid_argument(ess: Ess) -> None:
    bad_utf8 = b"\x0a\x02\xff\xfe"  # field 1 (name), two bytes that are no UTF-8
    for method in (
        "/cloud.xmanager.v1.ExperimentStateService/GetExperiment",
        "/grpc.health.v1.Health/Check",
    ):
        call = ess.channel.unary_unary(method)
        await expect(
            call(bad_utf8, metadata=ALICE),
            grpc.StatusCode.INVALID_ARGUMENT,
            "request: cannot be parsed",
        )


async def test_a_value_the_checks_miss_is_still_invalid_argument(ess: Ess) -> None:
    """The last line of defence (decision 15): a filter time whose UTC form leaves the
    datetime range passes the filter parser (libs/xmc/query/) and is refused by asyncpg;
    the answer is INVALID_ARGUMENT, not INTERNAL."""
    await expect(
        ess.api.ListExperiments(
            api_pb2.ListExperimentsRequest(filter='create_time > "0001-01-01T00:00:00+14:00"'),
            metadata=ALICE,
        ),
        grpc.StatusCode.INVALID_ARGUMENT,
        "request: a value cannot be stored",
    )
