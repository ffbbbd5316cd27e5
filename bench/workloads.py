"""The work unit and the Reconciler-shaped observation the ESS benches send, in one place
so every bench measures the same payload."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from xmc.model.states import WorkUnitState
from xmc_api.cloud.xmanager.v1.status_pb2 import Condition, ReplicatedJobStatus
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import (
    WorkUnitExecution,
    WorkUnitExecutionMetadata,
)
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CYCLE = (WorkUnitState.SCHEDULING, WorkUnitState.STARTING, WorkUnitState.RUNNING)
#: The fields the Reconciler's JobSet observation sets.
MASK = ("status.state", "status.detailed_status", "metadata")


def work_unit() -> WorkUnit:
    unit = WorkUnit()
    unit.executable.scheduling_constraints.queue_name = "cpu-queue"
    job = unit.executable.jobset.jobs.add(name="main", replicas=1)
    job.spec.docker_image = "python:3.11"
    job.spec.command.extend(["python", "train.py"])
    job.spec.args["learning_rate"] = "0.01"
    return unit


def observation(round_: int, xid: int, wid: int) -> WorkUnitExecution:
    """What the Reconciler sends for one JobSet event (times move forward each round)."""
    execution = WorkUnitExecution()
    status = execution.status
    status.state = int(CYCLE[round_ % len(CYCLE)])  # type: ignore[assignment]
    status.state_update_time.FromDatetime(T0 + timedelta(seconds=round_ + 1))
    jobset = status.detailed_status.jobset_status
    jobset.conditions.append(Condition(type="Suspended", status="False", reason="Resumed"))
    jobset.replicated_jobs_status.append(
        ReplicatedJobStatus(name="workers", ready=round_ % 3, active=2, succeeded=0, failed=0)
    )
    execution.metadata.type = WorkUnitExecutionMetadata.JOB_SET
    execution.metadata.resource_name = f"xmc-{xid}-{wid}"
    execution.metadata.namespace = "default"
    return execution
