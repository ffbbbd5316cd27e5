"""A live execution that should have its JobSet in the cluster: what the ESS's
``ListDeployedExecutions`` reads from the store (``xmc.store.deployed``) and the
Reconciler's vanished-JobSet sweep compares with its cache (``reconciler.vanished``),
one record for both sides."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from xmc.model.states import WorkUnitState


@dataclass(frozen=True)
class DeployedExecution:
    xid: int
    wid: int
    eid: int
    state: WorkUnitState
    #: The stored state's time (the cluster's clock).
    state_update_time: datetime
    #: When the Actuator finished the task that made the JobSet (its host's clock); None
    #: when the outbox no longer holds that record.
    deploy_time: datetime | None
