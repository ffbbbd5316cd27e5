"""``xmc launch``'s ordering and its promise never to leave a launch LAUNCHING, with the
RPCs scripted (the real ESS flows are in tests/integration/test_cli.py): a Ctrl-C or a
refusal midway closes FAILED, and when even a close fails the error says what to run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from google.longrunning import operations_proto_pb2
from google.protobuf.message import Message

from xmc.model.states import LaunchState
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_cli.client import Client, CliError
from xmc_cli.launch import run_launch
from xmc_cli.specs import LaunchPlan

NAME = "experiments/7"


class ScriptedClient(Client):
    """Answers each RPC by name; ``faults`` maps ``(rpc, nth call)`` to what it raises."""

    def __init__(self, faults: dict[tuple[str, int], BaseException]) -> None:
        super().__init__("unused:1", None, False, "table", 1.0)
        self.faults = faults
        self.calls: list[str] = []

    @property
    def api(self) -> Any:
        names = ("CreateExperiment", "CreateWorkUnit", "UpdateExperimentLaunchState")
        return SimpleNamespace(**{n: n for n in names})

    def call(self, method: Any, request: Message, timeout: float | None = None) -> Any:
        nth = sum(1 for c in self.calls if c.startswith(method)) + 1
        state = getattr(request, "launch_state", None)
        self.calls.append(f"{method} {LaunchState(state).name}" if state else method)
        if (method, nth) in self.faults:
            raise self.faults[(method, nth)]
        if method == "CreateWorkUnit":
            op = operations_proto_pb2.Operation(name=f"{NAME}/workUnits/{nth}/operations/x")
            op.metadata.Pack(OperationMetadata(target=f"{NAME}/workUnits/{nth}"))
            return op
        return Experiment(name=NAME)


PLAN = LaunchPlan(Experiment(title="t"), (WorkUnit(), WorkUnit(), WorkUnit()))
REFUSED = CliError("INVALID_ARGUMENT: work_unit.executable: required")
DOWN = CliError("UNAVAILABLE: connection refused")


@pytest.mark.parametrize(
    ("faults", "calls", "message"),
    [
        pytest.param(
            {},
            ["CreateExperiment", *["CreateWorkUnit"] * 3,
             "UpdateExperimentLaunchState COMPLETED"],
            None,
            id="every work unit created, then COMPLETED",
        ),
        pytest.param(
            {("CreateWorkUnit", 2): REFUSED},
            ["CreateExperiment", "CreateWorkUnit", "CreateWorkUnit",
             "UpdateExperimentLaunchState FAILED"],
            "work unit 2 of 3: INVALID_ARGUMENT: work_unit.executable: required\n"
            "1 work unit created; the launch of experiments/7 is marked FAILED",
            id="a refusal midway stops and closes FAILED",
        ),
        pytest.param(
            {("CreateWorkUnit", 3): KeyboardInterrupt()},
            ["CreateExperiment", "CreateWorkUnit", "CreateWorkUnit", "CreateWorkUnit",
             "UpdateExperimentLaunchState FAILED"],
            "interrupted at work unit 3 of 3\n2 work units created; the launch of "
            "experiments/7 is marked FAILED",
            id="Ctrl-C midway closes FAILED",
        ),
        pytest.param(
            {("CreateWorkUnit", 1): DOWN, ("UpdateExperimentLaunchState", 1): DOWN},
            ["CreateExperiment", "CreateWorkUnit", "UpdateExperimentLaunchState FAILED"],
            "work unit 1 of 3: UNAVAILABLE: connection refused\n0 work units created, and "
            "marking the launch of experiments/7 FAILED failed too (UNAVAILABLE: connection "
            "refused); run: xmc experiments close 7 --failed",
            id="the FAILED close fails too: the error names the command",
        ),
        pytest.param(
            {("UpdateExperimentLaunchState", 1): DOWN},
            ["CreateExperiment", *["CreateWorkUnit"] * 3,
             "UpdateExperimentLaunchState COMPLETED"],
            "UNAVAILABLE: connection refused\nall 3 work units were created, but the launch "
            "of experiments/7 may still be LAUNCHING; run: xmc experiments close 7",
            id="the COMPLETED close fails: the error names the command",
        ),
        pytest.param(
            {("CreateExperiment", 1): DOWN},
            ["CreateExperiment"],
            "UNAVAILABLE: connection refused",
            id="no experiment: nothing to close",
        ),
    ],
)  # fmt: skip
def test_run_launch(
    faults: dict[tuple[str, int], BaseException], calls: list[str], message: str | None
) -> None:
    client = ScriptedClient(faults)
    if message is None:
        _, created = run_launch(client, PLAN)
        assert [c["work_unit"] for c in created] == [f"{NAME}/workUnits/{i}" for i in (1, 2, 3)]
    else:
        with pytest.raises(CliError) as raised:
            run_launch(client, PLAN)
        assert raised.value.message.startswith(message), raised.value.message
    assert client.calls == calls
