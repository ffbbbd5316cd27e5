"""What the Reconciler saw, as data: one ``Observation`` per (work unit, source), ready to
become one item of an ``UpdateWorkUnitExecutions`` batch."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from google.protobuf.field_mask_pb2 import FieldMask

from xmc.messages import scrub_nul
from xmc.names import work_unit_name
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.internal.v1.executions_pb2 import RunFailure, WorkUnitExecutionUpdate


class Source(enum.StrEnum):
    """The UpdateBatcher keeps one pending observation per (xid, wid, source)."""

    JOBSET = "jobset"
    WORKLOAD = "workload"
    POD = "pod"


@dataclass(frozen=True)
class Observation:
    xid: int
    wid: int
    #: The execution the observed object belongs to (its execution-id label): the EID
    #: fence in the store keeps an old JobSet from touching a newer execution.
    eid: int
    source: Source
    execution: WorkUnitExecution
    update_mask: tuple[str, ...]
    force_status_message_update: bool = False
    #: With a FAILED state: why the run failed, for the ESS's retry decision.
    failure: RunFailure | None = None

    @property
    def slot(self) -> tuple[int, int, Source]:
        return (self.xid, self.wid, self.source)

    def to_update(self) -> WorkUnitExecutionUpdate:
        """The wire item; text from the cluster is stripped of NULs the ESS would refuse."""
        update = WorkUnitExecutionUpdate(
            work_unit=work_unit_name(self.xid, self.wid),
            execution_id=self.eid,
            execution=self.execution,
            update_mask=FieldMask(paths=list(self.update_mask)),
            force_status_message_update=self.force_status_message_update,
            failure=self.failure,
        )
        scrub_nul(update.execution)
        return update
