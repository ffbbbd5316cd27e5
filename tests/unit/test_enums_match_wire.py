"""The plain-Python enums of the state model must carry the wire contract's numbers: a
value written from one and read as the other must mean the same thing."""

from __future__ import annotations

import enum

import pytest
from google.protobuf.descriptor import EnumDescriptor

from xmc.model.resume import TaskKind
from xmc.model.states import ActiveState, LaunchState, Priority, Severity, WorkUnitState
from xmc.store.operations import ActionType
from xmc_api.cloud.xmanager.v1.operations_pb2 import OperationMetadata
from xmc_api.cloud.xmanager.v1.priority_pb2 import DESCRIPTOR as PRIORITY_FILE
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus, WorkUnitStatus
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1.tasks_pb2 import Task

PRIORITY_DESCRIPTOR = PRIORITY_FILE.enum_types_by_name["Priority"]


@pytest.mark.parametrize(
    ("python_enum", "descriptor"),
    [
        pytest.param(WorkUnitState, WorkUnitStatus.WorkUnitState.DESCRIPTOR, id="WorkUnitState"),
        pytest.param(Severity, StructuredMessage.Severity.DESCRIPTOR, id="Severity"),
        pytest.param(LaunchState, ExperimentStatus.LaunchState.DESCRIPTOR, id="LaunchState"),
        pytest.param(ActiveState, ExperimentStatus.ActiveState.DESCRIPTOR, id="ActiveState"),
        pytest.param(TaskKind, Task.Kind.DESCRIPTOR, id="TaskKind"),
        pytest.param(Priority, PRIORITY_DESCRIPTOR, id="Priority"),
        pytest.param(ActionType, OperationMetadata.ActionType.DESCRIPTOR, id="ActionType"),
    ],
)
def test_python_enum_equals_wire_enum(
    python_enum: type[enum.IntEnum], descriptor: EnumDescriptor
) -> None:
    wire = {value.name: value.number for value in descriptor.values}
    ours = {member.name: member.value for member in python_enum}
    assert ours == wire
