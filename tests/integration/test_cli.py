"""The ``xmc`` CLI against a real ESS over gRPC (CliRunner in a thread: the ESS runs on the
test's event loop)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from tests.integration.ess_harness import Ess, metadata
from xmc.model.states import ActiveState, LaunchState
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
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


# --------------------------------------------------------------------- launch and close

BEHAVIOR = 'kubesim.xmc/behavior={"run_seconds": 20}'


async def get_experiment(ess: Ess, name: str) -> Experiment:
    """What the ESS itself says, not what the CLI printed."""
    found: Experiment = await ess.api.GetExperiment(
        api_pb2.GetExperimentRequest(name=name), metadata=metadata("alice")
    )
    return found


def states(experiment: Experiment) -> tuple[LaunchState, ActiveState]:
    status = experiment.status
    return LaunchState(status.launch_state), ActiveState(status.active_state)


async def test_launch_creates_the_work_units_then_completes_the_launch(ess: Ess) -> None:
    launched = await xmc_json(
        ess,
        *("launch", "--title", "l", "--tag", "t", "--image", "python:3.11"),
        *("--command", "python train.py", "--count", "3", "--annotation", BEHAVIOR),
    )
    name = launched["experiment"]["name"]
    assert [c["work_unit"] for c in launched["work_units"]] == [
        f"{name}/workUnits/{i}" for i in (1, 2, 3)
    ]
    stored = await get_experiment(ess, name)
    assert (stored.title, list(stored.tags)) == ("l", ["t"])
    # Closed, but its work units have not run yet (no Actuator here): still ACTIVE.
    assert states(stored) == (LaunchState.COMPLETED, ActiveState.ACTIVE)
    units = await xmc_json(ess, "wu", "list", name)
    assert len(units) == 3
    job = units[0]["executable"]["jobset"]["jobs"][0]
    assert job["annotations"] == {"kubesim.xmc/behavior": '{"run_seconds": 20}'}
    assert job["spec"]["command"] == ["python", "train.py"]

    table = await xmc(ess, "launch", "--title", "one", "--image", "busybox")
    assert table.exit_code == 0, table.output
    assert "launch COMPLETED: experiments/" in table.stdout
    assert "turns INACTIVE when its 1 work units are done" in table.stdout


async def test_launch_a_sweep_from_a_spec_file(ess: Ess, tmp_path: Path) -> None:
    spec = tmp_path / "sweep.yaml"
    spec.write_text(
        "title: lr sweep\ntags: [baseline]\npriority: HIGH\n"
        "work_unit:\n  jobs:\n  - name: main\n    spec: {docker_image: busybox}\n"
        "sweep:\n- {lr: 0.1}\n- {lr: 0.01}\n"
    )
    launched = await xmc_json(ess, "launch", "--spec", str(spec), "--queue", "q")
    name = launched["experiment"]["name"]
    assert launched["experiment"]["status"]["launch_state"] == "COMPLETED"
    assert launched["experiment"]["priority"] == "HIGH"
    units = await xmc_json(ess, "wu", "list", name)
    assert [u["executable"]["jobset"]["jobs"][0]["spec"]["args"] for u in units] == [
        {"lr": "0.1"},
        {"lr": "0.01"},
    ]
    assert {u["executable"]["scheduling_constraints"]["queue_name"] for u in units} == {"q"}


async def test_a_bad_spec_creates_nothing(ess: Ess, tmp_path: Path) -> None:
    spec = tmp_path / "typo.yaml"
    spec.write_text("title: t\nwork_unit: {jobs: [{name: main, spec: {docker_image: b}}]}\n"
                    "sweep: [{lr: [1, 2]}]\n")  # fmt: skip
    result = await xmc(ess, "launch", "--spec", str(spec))
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (
        f"error: --spec {spec}: sweep[0].lr: must be a string, number or boolean, got list"
    )
    assert await xmc_json(ess, "experiments", "list") == []


async def test_a_work_unit_refused_midway_fails_the_launch(ess: Ess, tmp_path: Path) -> None:
    spec = tmp_path / "units.yaml"
    spec.write_text(
        "title: midway\nwork_units:\n"
        "- jobs: [{name: main, spec: {docker_image: busybox}}]\n"
        "- jobs: [{name: main, replicas: -1, spec: {docker_image: busybox}}]\n"
        "- jobs: [{name: main, spec: {docker_image: busybox}}]\n"
    )
    result = await xmc(ess, "launch", "--spec", str(spec))
    assert result.exit_code == 1, result.output
    first, second = result.stderr.splitlines()[-2:]
    assert first.startswith("error: work unit 2 of 3: INVALID_ARGUMENT: work_unit.executable")
    assert "replicas" in first
    (experiment,) = await xmc_json(ess, "experiments", "list")
    name = experiment["name"]
    assert second.startswith(f"1 work unit created; the launch of {name} is marked FAILED")
    stored = await get_experiment(ess, name)
    assert states(stored) == (LaunchState.FAILED, ActiveState.INACTIVE)
    assert len(await xmc_json(ess, "wu", "list", name)) == 1

    # An INACTIVE experiment: the watch prints what it sees once and ends by itself.
    watched = await xmc(ess, "watch", name, "--until-inactive")
    assert watched.exit_code == 0, watched.output
    lines = [line.split("  ", 1)[1] for line in watched.stdout.splitlines() if "  " in line]
    assert lines[:2] == ["experiment  INACTIVE, launch FAILED", "wu 1  INITIALIZING"]
    assert watched.stdout.rstrip().endswith(f"{name} is INACTIVE (launch FAILED): 1 INITIALIZING")


async def test_experiments_close(ess: Ess) -> None:
    xid = (await xmc_json(ess, "experiments", "create", "--title", "c"))["name"].split("/")[1]
    await xmc_json(ess, "wu", "create", xid, "--image", "busybox")
    closed = await xmc_json(ess, "experiments", "close", xid)
    assert closed["status"]["launch_state"] == "COMPLETED"
    assert closed["status"]["active_state"] == "ACTIVE"  # its work unit has not finished

    refused = await xmc(ess, "experiments", "close", xid, "--failed")
    assert refused.exit_code == 1
    assert refused.stderr.splitlines()[-1] == (
        "error: FAILED_PRECONDITION: launch_state: cannot move COMPLETED → FAILED; "
        "only LAUNCHING → COMPLETED or FAILED is allowed"
    )
    other = (await xmc_json(ess, "experiments", "create", "--title", "f"))["name"]
    table = await xmc(ess, "experiments", "close", other, "--failed")
    assert table.exit_code == 0, table.output
    assert "INACTIVE" in table.stdout
    assert "FAILED" in table.stdout
    denied = await xmc(ess, "experiments", "close", xid, token="token-bob")
    assert denied.stderr.splitlines()[-1].startswith("error: PERMISSION_DENIED")


async def test_output_is_accepted_after_the_subcommand_too(ess: Ess) -> None:
    made = await xmc(ess, "experiments", "create", "--title", "late flag", "-o", "json")
    assert made.exit_code == 0, made.output
    name = parse_json(made.stdout)["name"]
    got = await xmc(ess, "experiments", "get", name.rsplit("/", 1)[-1], "--output", "json")
    assert got.exit_code == 0, got.output
    assert parse_json(got.stdout)["title"] == "late flag"
    # After the subcommand wins over before it.
    table = await xmc(
        ess, "-o", "json", "experiments", "get", name.rsplit("/", 1)[-1], "-o", "table"
    )
    assert table.exit_code == 0, table.output
    assert "late flag" in table.stdout
    assert not table.stdout.lstrip().startswith("{")


async def test_user_email_is_sent_and_checked_against_the_token(ess: Ess) -> None:
    same = await xmc(ess, "--user-email", "alice@example.com", "experiments", "list")
    assert same.exit_code == 0, same.output
    other = await xmc(ess, "--user-email", "mallory@example.com", "experiments", "list")
    assert other.exit_code != 0
    assert "UNAUTHENTICATED" in other.output
    assert "x-goog-user-email" in other.output
