"""One request builder per RPC of the ESS for the fuzz test: a valid template (names the
fuzzer has seen answered, a work unit the server accepts) with hostile values mixed in
(``tests/integration/fuzzing.py``)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from google.longrunning import operations_proto_pb2 as ops
from google.protobuf.message import Message
from grpc_health.v1 import health_pb2

from tests.integration.fuzzing import (
    hostile_id,
    hostile_timestamp,
    mutated,
    pick,
    random_filter,
    random_int,
    random_mask,
    random_order_by,
    random_page_size,
    random_page_token,
    random_text,
)
from tests.integration.support import T0, minimal_work_unit
from xmc.model.merge import MASK_PATHS
from xmc.model.states import WorkUnitState
from xmc.store.artifacts import ARTIFACT_UPDATABLE
from xmc.store.experiments import EXPERIMENT_UPDATABLE
from xmc.store.work_units import WORK_UNIT_UPDATABLE
from xmc.timestamps import set_timestamp
from xmc_api.cloud.xmanager.v1 import api_pb2
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.internal.v1 import executions_pb2, scheduling_pb2

S = WorkUnitState


@dataclass
class Known:
    """Names the server handed out so far, so requests reach existing rows too."""

    experiments: list[str] = field(default_factory=list)
    work_units: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    operations: list[str] = field(default_factory=list)
    page_tokens: list[str] = field(default_factory=list)
    #: Work unit name → its current eid, as last seen.
    eids: dict[str, int] = field(default_factory=dict)

    def add(self, names: list[str], name: str) -> None:
        if name and name not in names:
            names.append(name)

    def harvest(self, response: Message) -> None:
        """Remember every resource name and page token in an answer."""
        for descriptor, value in response.ListFields():
            if descriptor.name == "next_page_token":
                self.add(self.page_tokens, value)
            elif descriptor.name == "name" and isinstance(value, str):
                self._name(value)
            elif descriptor.message_type is not None:
                values = value if descriptor.is_repeated else [value]
                for item in values:
                    if isinstance(item, Message):
                        self.harvest(item)

    def _name(self, name: str) -> None:
        parts = name.split("/")
        if "operations" in parts:
            self.add(self.operations, name)
        elif parts[0] == "artifacts":
            self.add(self.artifacts, name)
        elif len(parts) == 2 and parts[0] == "experiments":
            self.add(self.experiments, name)
        elif len(parts) == 4 and parts[2] == "workUnits":
            self.add(self.work_units, name)
        elif len(parts) == 6 and parts[4] == "executions":
            unit = "/".join(parts[:4])
            self.add(self.work_units, unit)
            self.eids[unit] = max(self.eids.get(unit, 0), int(parts[5]))


Builder = Callable[[random.Random, Known], Message]


def experiment_name(rng: random.Random, known: Known) -> str:
    roll = rng.random()
    if roll < 0.7 and known.experiments:
        return rng.choice(known.experiments)
    if roll < 0.9:
        return f"experiments/{hostile_id(rng)}"
    return rng.choice(("experiments/1/", "experiments//1", "Experiments/1", random_text(rng)))


def work_unit_name(rng: random.Random, known: Known) -> str:
    roll = rng.random()
    if roll < 0.7 and known.work_units:
        return rng.choice(known.work_units)
    if roll < 0.9:
        return f"{experiment_name(rng, known)}/workUnits/{hostile_id(rng)}"
    return f"experiments/{hostile_id(rng)}/workUnits/{hostile_id(rng)}"


def parent_name(rng: random.Random, known: Known) -> str:
    return (work_unit_name if rng.random() < 0.4 else experiment_name)(rng, known)


def artifact_name(rng: random.Random, known: Known) -> str:
    if known.artifacts and rng.random() < 0.7:
        return rng.choice(known.artifacts)
    return f"artifacts/{hostile_id(rng)}"


def operation_name(rng: random.Random, known: Known) -> str:
    if known.operations and rng.random() < 0.6:
        return rng.choice(known.operations)
    return f"{parent_name(rng, known)}/operations/{random_text(rng)}"


def _list(request: Message, rng: random.Random, known: Known, *, parent: str | None) -> Message:
    if parent is not None:
        request.parent = parent  # type: ignore[attr-defined]
    request.page_size = random_page_size(rng)  # type: ignore[attr-defined]
    request.page_token = random_page_token(rng, known.page_tokens)  # type: ignore[attr-defined]
    request.filter = random_filter(rng)  # type: ignore[attr-defined]
    if hasattr(request, "order_by"):
        request.order_by = random_order_by(rng)
    return request


def new_experiment(rng: random.Random, known: Known) -> Message:
    experiment = Experiment(title=f"fuzz {rng.randint(0, 999)}", tags=["a"])
    experiment.priority = 2  # type: ignore[assignment]
    return api_pb2.CreateExperimentRequest(experiment=mutated(experiment, rng))  # type: ignore[arg-type]


def update_experiment(rng: random.Random, known: Known) -> Message:
    experiment = mutated(Experiment(name=experiment_name(rng, known), title="t"), rng)
    request = api_pb2.UpdateExperimentRequest(experiment=experiment)  # type: ignore[arg-type]
    request.update_mask.paths.extend(random_mask(rng, sorted(EXPERIMENT_UPDATABLE)))
    return request


def new_work_unit(rng: random.Random, known: Known) -> Message:
    request = api_pb2.CreateWorkUnitRequest(
        parent=experiment_name(rng, known),
        work_unit=mutated(minimal_work_unit(), rng, most=4),  # type: ignore[arg-type]
    )
    roll = rng.random()
    if roll < 0.3:
        request.work_unit_id = rng.randint(1, 50)
    elif roll < 0.4:
        # Ids that once left no room for server-assigned ones (next id = max + 1).
        request.work_unit_id = rng.choice((2**31 - 1, 2**31, 2**62, 2**63 - 2, 2**63 - 1))
    elif roll < 0.5:
        request.work_unit_id = random_int(rng)
    return request


def update_work_unit(rng: random.Random, known: Known) -> Message:
    work_unit = mutated(minimal_work_unit(), rng)
    work_unit.name = work_unit_name(rng, known)  # type: ignore[attr-defined]
    request = api_pb2.UpdateWorkUnitRequest(work_unit=work_unit)  # type: ignore[arg-type]
    request.update_mask.paths.extend(random_mask(rng, sorted(WORK_UNIT_UPDATABLE)))
    return request


def new_artifact(rng: random.Random, known: Known) -> Message:
    artifact = Artifact(tags=["t"], data_type=Artifact.URL, mime_type="text/plain")
    artifact.url.url = "https://example.com"
    return api_pb2.CreateArtifactRequest(
        parent=parent_name(rng, known),
        artifact=mutated(artifact, rng, most=4),  # type: ignore[arg-type]
    )


def update_artifact(rng: random.Random, known: Known) -> Message:
    artifact = mutated(Artifact(name=artifact_name(rng, known)), rng)
    request = api_pb2.UpdateArtifactRequest(artifact=artifact)  # type: ignore[arg-type]
    request.update_mask.paths.extend(random_mask(rng, sorted(ARTIFACT_UPDATABLE)))
    return request


_OBSERVED = (S.SCHEDULING, S.STARTING, S.RUNNING, S.PARTIALLY_FAILED, S.DESCHEDULING,
             S.STOPPING, S.STOPPED, S.COMPLETED, S.FAILED, S.SCHEDULING_PAUSED)  # fmt: skip


def _message(rng: random.Random) -> StructuredMessage:
    return StructuredMessage(
        severity=rng.choice((10, 20, 30, 40, 50)),  # type: ignore[arg-type]
        source=StructuredMessage.KUBERNETES,
        user_facing_text=random_text(rng) if rng.random() < 0.3 else "pod is pending",
    )


def execution_update(rng: random.Random, known: Known) -> executions_pb2.WorkUnitExecutionUpdate:
    name = work_unit_name(rng, known)
    paths = rng.sample(sorted(MASK_PATHS), rng.randint(1, 3))
    execution = WorkUnitExecution()
    status = execution.status
    if "status.state" in paths:
        status.state = int(rng.choice(_OBSERVED))  # type: ignore[assignment]
        set_timestamp(status.state_update_time, T0 + timedelta(seconds=rng.randint(-60, 10**5)))
        if rng.random() < 0.1:
            hostile_timestamp(status.state_update_time, rng)
    if "status.system_message" in paths:
        status.system_message.CopyFrom(_message(rng))
    if "status.user_message" in paths:
        status.user_message.CopyFrom(_message(rng))
    if "status.scheduling_information" in paths:
        status.scheduling_information.CopyFrom(_message(rng))
        status.scheduling_information.auxiliary_info.queue_info.position_in_queue = 3
    if "status.detailed_status" in paths:
        condition = status.detailed_status.jobset_status.conditions.add(type="Completed")
        condition.status = "False"
    if "metadata" in paths:
        execution.metadata.resource_name = "xmc-1-1"
        execution.metadata.node_selectors["pool"] = "a"
    if rng.random() < 0.1:
        paths.append(rng.choice(("status.state_update_time", "status", "\x00", "name")))
    update = executions_pb2.WorkUnitExecutionUpdate(
        work_unit=name,
        execution_id=known.eids.get(name, 1) if rng.random() < 0.8 else random_int(rng),
        execution=mutated(execution, rng, most=2),  # type: ignore[arg-type]
        force_status_message_update=rng.random() < 0.2,
    )
    update.update_mask.paths.extend(paths)
    return update


def update_executions(rng: random.Random, known: Known) -> Message:
    return executions_pb2.UpdateWorkUnitExecutionsRequest(
        updates=[execution_update(rng, known) for _ in range(rng.randint(0, 4))],
        writer=random_text(rng) if rng.random() < 0.3 else "reconciler/jobset",
    )


def wait_operation(rng: random.Random, known: Known) -> Message:
    request: Any = ops.WaitOperationRequest(name=operation_name(rng, known))
    if rng.random() < 0.7:
        request.timeout.FromMilliseconds(rng.randint(0, 20))
    if rng.random() < 0.3:
        hostile_timestamp(request.timeout, rng)
    built: Message = request
    return built


def list_experiments(rng: random.Random, known: Known) -> Message:
    return _list(api_pb2.ListExperimentsRequest(), rng, known, parent=None)


def _named(request_type: type[Message], kind: Callable[[random.Random, Known], str]) -> Builder:
    def build(rng: random.Random, known: Known) -> Message:
        request = request_type()
        request.name = kind(rng, known)  # type: ignore[attr-defined]
        return request

    return build


def _parented(request_type: type[Message], kind: Callable[[random.Random, Known], str]) -> Builder:
    def build(rng: random.Random, known: Known) -> Message:
        request = request_type()
        request.parent = kind(rng, known)  # type: ignore[attr-defined]
        if hasattr(request, "filter"):
            request.filter = random_filter(rng)
        return request

    return build


def _listing(request_type: type[Message], kind: Callable[[random.Random, Known], str]) -> Builder:
    def build(rng: random.Random, known: Known) -> Message:
        return _list(request_type(), rng, known, parent=kind(rng, known))

    return build


_ESS = "/cloud.xmanager.v1.ExperimentStateService/"
_OPS = "/google.longrunning.Operations/"
_EXECUTIONS = "/xmc.internal.v1.WorkUnitExecutionService/"
_SCHEDULING = "/xmc.internal.v1.SchedulingService/"

#: Method path → (request builder, relative weight in the mix).
BUILDERS: dict[str, tuple[Builder, float]] = {
    _ESS + "CreateExperiment": (new_experiment, 2),
    _ESS + "UpdateExperimentLaunchState": (
        lambda rng, known: api_pb2.UpdateExperimentLaunchStateRequest(
            name=experiment_name(rng, known),
            launch_state=rng.choice((0, 1, 2, 3, 4, -1, 2**31 - 1)),  # type: ignore[arg-type]
        ),
        1,
    ),
    _ESS + "GetExperiment": (_named(api_pb2.GetExperimentRequest, experiment_name), 1),
    _ESS + "GetExperimentStatus": (_named(api_pb2.GetExperimentStatusRequest, experiment_name), 1),
    _ESS + "ListExperiments": (list_experiments, 1.5),
    _ESS + "SearchExperiments": (list_experiments, 1),
    _ESS + "UpdateExperiment": (update_experiment, 2),
    _ESS + "CreateWorkUnit": (new_work_unit, 5),
    _ESS + "GetWorkUnit": (_named(api_pb2.GetWorkUnitRequest, work_unit_name), 1),
    _ESS + "GetCurrentWorkUnitExecution": (
        _named(api_pb2.GetCurrentWorkUnitExecutionRequest, work_unit_name), 1,
    ),
    _ESS + "ListWorkUnitExecutions": (
        _parented(api_pb2.ListWorkUnitExecutionsRequest, work_unit_name), 1,
    ),
    _ESS + "ListWorkUnits": (_listing(api_pb2.ListWorkUnitsRequest, experiment_name), 1.5),
    _ESS + "SearchWorkUnits": (_listing(api_pb2.ListWorkUnitsRequest, experiment_name), 1),
    _ESS + "StopWorkUnit": (_named(api_pb2.StopWorkUnitRequest, work_unit_name), 1.5),
    _ESS + "BatchStopWorkUnits": (_parented(api_pb2.BatchStopWorkUnitsRequest, experiment_name), 1),
    _ESS + "RestartWorkUnit": (_named(api_pb2.RestartWorkUnitRequest, work_unit_name), 1.5),
    _ESS + "BatchRestartWorkUnits": (
        _parented(api_pb2.BatchRestartWorkUnitsRequest, experiment_name), 1,
    ),
    _ESS + "UpdateWorkUnit": (update_work_unit, 2),
    _ESS + "CreateArtifact": (new_artifact, 2),
    _ESS + "GetArtifact": (_named(api_pb2.GetArtifactRequest, artifact_name), 1),
    _ESS + "ListArtifacts": (_listing(api_pb2.ListArtifactsRequest, parent_name), 1),
    _ESS + "SearchArtifacts": (_listing(api_pb2.ListArtifactsRequest, parent_name), 1),
    _ESS + "DeleteArtifact": (_named(api_pb2.DeleteArtifactRequest, artifact_name), 0.5),
    _ESS + "UpdateArtifact": (update_artifact, 2),
    _ESS + "ListStatusMessages": (_listing(api_pb2.ListStatusMessagesRequest, parent_name), 1),
    _ESS + "SearchStatusMessages": (_listing(api_pb2.ListStatusMessagesRequest, parent_name), 1),
    _OPS + "GetOperation": (_named(ops.GetOperationRequest, operation_name), 1),
    _OPS + "ListOperations": (
        lambda rng, known: _list(
            ops.ListOperationsRequest(name=experiment_name(rng, known)), rng, known, parent=None
        ),
        1,
    ),
    _OPS + "WaitOperation": (wait_operation, 0.5),
    _OPS + "CancelOperation": (_named(ops.CancelOperationRequest, operation_name), 0.3),
    _OPS + "DeleteOperation": (_named(ops.DeleteOperationRequest, operation_name), 0.3),
    _EXECUTIONS + "UpdateWorkUnitExecutions": (update_executions, 5),
    _EXECUTIONS + "ListDeployedExecutions": (
        lambda rng, known: executions_pb2.ListDeployedExecutionsRequest(
            page_size=rng.choice((0, 1, 7, 5000, 5001, -1, 2**31 - 1)),
            page_token=pick(rng, ["", "1/1", "0/0", "1/", "/1", "-1/2", "1/99999999999999999999"]),
        ),
        0.5,
    ),
    _SCHEDULING + "PauseScheduling": (
        lambda rng, known: scheduling_pb2.PauseSchedulingRequest(reason=random_text(rng)),
        0.5,
    ),
    _SCHEDULING + "ResumeScheduling": (
        lambda rng, known: scheduling_pb2.ResumeSchedulingRequest(), 0.5,
    ),
    _SCHEDULING + "GetSchedulingState": (
        lambda rng, known: scheduling_pb2.GetSchedulingStateRequest(), 0.5,
    ),
    "/grpc.health.v1.Health/Check": (
        lambda rng, known: health_pb2.HealthCheckRequest(service=pick(rng, ["", _ESS[1:-1]])),
        0.3,
    ),
    "/grpc.health.v1.Health/List": (lambda rng, known: health_pb2.HealthListRequest(), 0.1),
}  # fmt: skip
