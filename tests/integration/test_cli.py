"""The ``xmc`` CLI against a real ESS over gRPC (CliRunner in a thread: the ESS runs on the
test's event loop)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from click.testing import CliRunner, Result

from tests.integration.conftest import Ess
from xmc_cli.main import cli


async def xmc(ess: Ess | None, *args: str, token: str = "token-alice") -> Result:
    endpoint = f"127.0.0.1:{ess.server.port}" if ess else "127.0.0.1:1"
    argv = ["--endpoint", endpoint, "--token", token, "--rpc-timeout", "10", *args]
    runner = CliRunner()
    return await asyncio.to_thread(runner.invoke, cli, argv, catch_exceptions=False)


async def xmc_json(ess: Ess, *args: str, token: str = "token-alice") -> Any:
    result = await xmc(ess, "--output", "json", *args, token=token)
    assert result.exit_code == 0, result.output
    return parse_json(result.stdout)


def parse_json(stdout: str) -> Any:
    """The CLI's JSON document; the in-process ESS may log into the same captured stdout."""
    decoder = json.JSONDecoder()
    offset = 0
    for line in stdout.splitlines(keepends=True):
        if line[:1] in ("{", "["):
            return decoder.raw_decode(stdout, offset)[0]
        offset += len(line)
    raise AssertionError(f"no JSON in {stdout!r}")


async def test_experiment_and_work_unit_lifecycle(ess: Ess) -> None:
    experiment = await xmc_json(ess, "experiments", "create", "--title", "sweep", "--tag", "a")
    name = experiment["name"]
    xid = name.split("/")[1]
    assert experiment["tags"] == ["a"]

    listed = await xmc_json(ess, "experiments", "list", "--filter", 'title = "sweep"')
    assert name in [e["name"] for e in listed]
    got = await xmc(ess, "experiments", "get", xid)
    assert got.exit_code == 0
    assert "sweep" in got.stdout

    created = await xmc_json(
        ess,
        *("wu", "create", xid, "--image", "python:3.11", "--command", "python train.py"),
        *("--queue", "cpu-queue", "--cpu", "1000", "--memory-bytes", "1000000", "--count", "3"),
    )
    assert [c["work_unit"] for c in created] == [f"{name}/workUnits/{i}" for i in (1, 2, 3)]

    units = await xmc_json(ess, "wu", "list", name)
    assert len(units) == 3
    spec = units[0]["executable"]["jobset"]["jobs"][0]["spec"]
    assert spec["command"] == ["python", "train.py"]
    assert spec["resources"]["cpu_resources"]["cpu_millicores"] == "1000"

    got = await xmc(ess, "wu", "get", f"{xid}/1")
    assert got.exit_code == 0
    assert "INITIALIZING" in got.stdout

    stopped = await xmc_json(ess, "wu", "stop", f"{xid}/1")
    assert stopped["name"].startswith(f"{name}/workUnits/1/operations/")
    restarted = await xmc(ess, "wu", "restart", f"{name}/workUnits/2")
    assert restarted.exit_code == 0, restarted.output

    history = await xmc_json(ess, "wu", "history", f"{xid}/2")
    assert [h["state"] for h in history].count("ACTIVE") == 1
    assert len(history) == 2
    table = await xmc(ess, "wu", "history", f"{xid}/2")
    assert "ACTIVE" in table.stdout
    assert "INACTIVE" in table.stdout

    messages = await xmc(ess, "wu", "messages", f"{xid}/1")
    assert messages.exit_code == 0, messages.output
    assert isinstance(await xmc_json(ess, "wu", "messages", f"{xid}/1"), list)

    watched = await xmc(ess, "watch", xid, "--once")
    assert watched.exit_code == 0, watched.output
    assert "STOPPING" in watched.stdout
    assert "INITIALIZING" in watched.stdout

    operation = created[2]["operation"]
    op = await xmc_json(ess, "operations", "get", operation)
    assert op["name"] == operation
    waited = await xmc(ess, "operations", "wait", operation, "--timeout", "0.2")
    assert waited.exit_code == 2, waited.output
    assert "false" in waited.stdout


async def test_wu_create_from_file(ess: Ess, tmp_path: Any) -> None:
    xid = (await xmc_json(ess, "experiments", "create", "--title", "f"))["name"].split("/")[1]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "jobs:\n- name: main\n  replicas: 1\n  spec:\n    docker_image: busybox\n"
        "    command: [echo, hi]\n"
    )
    created = await xmc_json(ess, "wu", "create", xid, "--file", str(spec), "--queue", "q")
    (unit,) = await xmc_json(ess, "wu", "list", xid)
    assert unit["name"] == created[0]["work_unit"]
    assert unit["executable"]["scheduling_constraints"]["queue_name"] == "q"


async def test_scheduling_commands_need_a_service_token(ess: Ess) -> None:
    denied = await xmc(ess, "scheduling", "pause")
    assert denied.exit_code == 1
    assert denied.stderr.splitlines()[-1].startswith("error: PERMISSION_DENIED")

    service = "token-reconciler"
    assert (await xmc_json(ess, "scheduling", "status", token=service))["paused"] is False
    paused = await xmc_json(ess, "scheduling", "pause", "--reason", "upgrade", token=service)
    assert (paused["paused"], paused["reason"]) == (True, "upgrade")
    table = await xmc(ess, "scheduling", "status", token=service)
    assert "upgrade" in table.stdout
    assert (await xmc_json(ess, "scheduling", "resume", token=service))["paused"] is False


async def test_a_bad_name_is_an_error_naming_the_field(ess: Ess) -> None:
    result = await xmc(ess, "wu", "get", "nonsense")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("error: INVALID_ARGUMENT: name:"), (
        result.stderr
    )


async def test_no_ess_is_a_clear_error() -> None:
    result = await xmc(None, "experiments", "list")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("error: UNAVAILABLE:")
    assert "127.0.0.1:1" in result.stderr
