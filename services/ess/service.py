"""``cloud.xmanager.v1.ExperimentStateService``: the public API, wire-compatible with the
published ``xmanager`` XMC client.

Each method parses and validates its request, checks who may do it, and delegates: reads
go to the store, intent writes to ``Intents``. Errors are raised as ``XmcError``s and
classified once by the interceptor.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any

from google.longrunning.operations_proto_pb2 import Operation
from google.protobuf.empty_pb2 import Empty

from ess.auth import acl_writer_emails, require_experiment_writer
from ess.intents import Intents
from ess.interceptor import actor, caller
from ess.quotas import QuotaGate, create_experiment
from ess.validation import (
    validate_experiment,
    validate_new_work_unit,
    validate_work_unit_id,
    validate_work_unit_update,
)
from xmc.errors import InvalidArgumentError
from xmc.masks import validate_update_mask
from xmc.model.audit import AuditAction, AuditEntry
from xmc.model.states import LaunchState
from xmc.names import parse_artifact_name, parse_experiment_name, parse_work_unit_name
from xmc.store.transactions import (
    ARTIFACT_UPDATABLE,
    EXPERIMENT_UPDATABLE,
    WORK_UNIT_UPDATABLE,
    Connection,
    ListRequest,
    Store,
    delete_artifact,
    fetch_artifact,
    fetch_experiment,
    fetch_work_unit,
    insert_artifact,
    list_artifacts,
    list_experiments,
    list_status_messages,
    list_work_units,
    record_audit,
    update_artifact,
    update_experiment_launch_state,
)
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_pb2 import ExperimentStatus
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit

_MAX_PAGE_SIZE = 1000


def list_request(request: Any) -> ListRequest:
    """The common List parameters; bad values are rejected by the query builder."""
    return ListRequest(
        filter=request.filter,
        order_by=request.order_by,
        page_size=request.page_size,
        page_token=request.page_token,
    )


def parse_parent(parent: str) -> tuple[int, int | None]:
    """An experiment or a work unit as the parent of messages and artifacts."""
    if "/workUnits/" in parent:
        return parse_work_unit_name(parent, field="parent")
    return parse_experiment_name(parent, field="parent"), None


class ExperimentStateService(api_pb2_grpc.ExperimentStateServiceServicer):
    def __init__(
        self,
        store: Store,
        intents: Intents,
        *,
        clock: Callable[[], datetime],
        quotas: QuotaGate | None = None,
    ) -> None:
        self._store = store
        self._intents = intents
        self._clock = clock
        self._quotas = quotas

    async def _check_writer(self, xid: int) -> Experiment:
        experiment = await self._store.get_experiment(xid)
        require_experiment_writer(
            caller(),
            experiment_name=experiment.name,
            creator=experiment.creator,
            writers=acl_writer_emails(experiment.acls),
        )
        return experiment

    # --- experiments -------------------------------------------------------------------

    async def CreateExperiment(
        self, request: api_pb2.CreateExperimentRequest, context: Any
    ) -> Experiment:
        validate_experiment(request.experiment)
        return await create_experiment(
            self._store, self._quotas, caller(), request.experiment, by=actor()
        )

    async def GetExperiment(
        self, request: api_pb2.GetExperimentRequest, context: Any
    ) -> Experiment:
        return await self._store.get_experiment(parse_experiment_name(request.name))

    async def GetExperimentStatus(
        self, request: api_pb2.GetExperimentStatusRequest, context: Any
    ) -> ExperimentStatus:
        experiment = await self._store.get_experiment(parse_experiment_name(request.name))
        return experiment.status

    async def ListExperiments(
        self, request: api_pb2.ListExperimentsRequest, context: Any
    ) -> api_pb2.ListExperimentsResponse:
        async with self._store.transaction() as conn:
            found, token = await list_experiments(conn, list_request(request), caller().reads)
        return api_pb2.ListExperimentsResponse(experiments=found, next_page_token=token)

    SearchExperiments = ListExperiments

    async def UpdateExperiment(
        self, request: api_pb2.UpdateExperimentRequest, context: Any
    ) -> Experiment:
        xid = parse_experiment_name(request.experiment.name, field="experiment.name")
        paths = validate_update_mask(request.update_mask.paths, EXPERIMENT_UPDATABLE)
        validate_experiment(request.experiment)
        return await self._intents.update_experiment(
            caller(), xid, request.experiment, paths, by=actor()
        )

    async def UpdateExperimentLaunchState(
        self, request: api_pb2.UpdateExperimentLaunchStateRequest, context: Any
    ) -> Experiment:
        xid = parse_experiment_name(request.name)
        if int(request.launch_state) not in (LaunchState.COMPLETED, LaunchState.FAILED):
            raise InvalidArgumentError(
                f"launch_state: must be COMPLETED or FAILED, got {request.launch_state}"
            )
        await self._check_writer(xid)
        launch_state = LaunchState(request.launch_state)
        async with self._store.transaction() as conn:
            now = self._clock()
            updated = await update_experiment_launch_state(conn, xid, launch_state, now=now)
            entry = AuditEntry(
                AuditAction.UPDATE_LAUNCH_STATE, updated.name, xid, launch_state.name
            )
            await record_audit(conn, actor(), entry, now=now)
        return updated

    # --- work units --------------------------------------------------------------------

    async def CreateWorkUnit(
        self, request: api_pb2.CreateWorkUnitRequest, context: Any
    ) -> Operation:
        xid = parse_experiment_name(request.parent, field="parent")
        wid = validate_work_unit_id(request.work_unit_id)
        validate_new_work_unit(request.work_unit)
        return await self._intents.create_work_unit(
            caller(), xid, request.work_unit, wid=wid, by=actor()
        )

    async def GetWorkUnit(self, request: api_pb2.GetWorkUnitRequest, context: Any) -> WorkUnit:
        return await self._store.get_work_unit(*parse_work_unit_name(request.name))

    async def GetCurrentWorkUnitExecution(
        self, request: api_pb2.GetCurrentWorkUnitExecutionRequest, context: Any
    ) -> WorkUnitExecution:
        work_unit = await self._store.get_work_unit(*parse_work_unit_name(request.name))
        return work_unit.current_work_unit_execution

    async def ListWorkUnitExecutions(
        self, request: api_pb2.ListWorkUnitExecutionsRequest, context: Any
    ) -> api_pb2.ListWorkUnitExecutionsResponse:
        xid, wid = parse_work_unit_name(request.parent, field="parent")
        found = await self._store.list_work_unit_executions(xid, wid)
        return api_pb2.ListWorkUnitExecutionsResponse(work_unit_executions=found)

    async def ListWorkUnits(  # type: ignore[override]  # bytes: see the docstring
        self, request: api_pb2.ListWorkUnitsRequest, context: Any
    ) -> bytes:
        """The response already serialized, framed from stored bytes (``xmc.store.wire``);
        the interceptor's serializer passes bytes through."""
        xid = parse_experiment_name(request.parent, field="parent")
        # One statement, so no transaction: it would only add BEGIN and COMMIT round trips.
        async with self._store.connection() as conn:
            listing = replace(list_request(request), now=self._clock())
            return await list_work_units(conn, xid, listing)

    SearchWorkUnits = ListWorkUnits  # type: ignore[assignment]

    async def StopWorkUnit(self, request: api_pb2.StopWorkUnitRequest, context: Any) -> Operation:
        xid, wid = parse_work_unit_name(request.name)
        return await self._intents.stop_work_units(caller(), xid, [wid], by=actor())

    async def BatchStopWorkUnits(
        self, request: api_pb2.BatchStopWorkUnitsRequest, context: Any
    ) -> Operation:
        xid = parse_experiment_name(request.parent, field="parent")
        return await self._intents.stop_work_units(
            caller(), xid, None, by=actor(), filter_text=request.filter
        )

    async def RestartWorkUnit(
        self, request: api_pb2.RestartWorkUnitRequest, context: Any
    ) -> Operation:
        xid, wid = parse_work_unit_name(request.name)
        return await self._intents.restart_work_units(caller(), xid, [wid], by=actor())

    async def BatchRestartWorkUnits(
        self, request: api_pb2.BatchRestartWorkUnitsRequest, context: Any
    ) -> Operation:
        xid = parse_experiment_name(request.parent, field="parent")
        return await self._intents.restart_work_units(
            caller(), xid, None, by=actor(), filter_text=request.filter
        )

    async def UpdateWorkUnit(
        self, request: api_pb2.UpdateWorkUnitRequest, context: Any
    ) -> WorkUnit:
        xid, wid = parse_work_unit_name(request.work_unit.name, field="work_unit.name")
        paths = validate_update_mask(request.update_mask.paths, WORK_UNIT_UPDATABLE)
        validate_work_unit_update(request.work_unit, paths)
        return await self._intents.update_work_unit(
            caller(), xid, wid, request.work_unit, paths, by=actor()
        )

    # --- artifacts ---------------------------------------------------------------------

    async def CreateArtifact(
        self, request: api_pb2.CreateArtifactRequest, context: Any
    ) -> Artifact:
        xid, wid = parse_parent(request.parent)
        await self._check_writer(xid)
        artifact = Artifact()
        artifact.CopyFrom(request.artifact)
        artifact.parent = request.parent
        async with self._store.transaction() as conn:
            if wid is not None:
                await fetch_work_unit(conn, xid, wid)
            created = await insert_artifact(conn, artifact, now=self._clock())
            await self._audit(conn, AuditAction.CREATE_ARTIFACT, created.name, xid)
            return created

    async def GetArtifact(self, request: api_pb2.GetArtifactRequest, context: Any) -> Artifact:
        async with self._store.transaction() as conn:
            return await fetch_artifact(conn, parse_artifact_name(request.name))

    async def ListArtifacts(
        self, request: api_pb2.ListArtifactsRequest, context: Any
    ) -> api_pb2.ListArtifactsResponse:
        xid, _wid = parse_parent(request.parent)
        async with self._store.transaction() as conn:
            await fetch_experiment(conn, xid)
            found, token = await list_artifacts(conn, request.parent, list_request(request))
        return api_pb2.ListArtifactsResponse(artifacts=found, next_page_token=token)

    SearchArtifacts = ListArtifacts

    async def _writable_artifact(self, name: str) -> tuple[int, int]:
        """(artifact id, experiment id) of an artifact the caller may change."""
        aid = parse_artifact_name(name)
        async with self._store.transaction() as conn:
            artifact = await fetch_artifact(conn, aid)
        xid, _wid = parse_parent(artifact.parent)
        await self._check_writer(xid)
        return aid, xid

    async def _audit(self, conn: Connection, action: AuditAction, target: str, xid: int) -> None:
        """The audit row of a change with neither history row nor Operation."""
        await record_audit(conn, actor(), AuditEntry(action, target, xid), now=self._clock())

    async def UpdateArtifact(
        self, request: api_pb2.UpdateArtifactRequest, context: Any
    ) -> Artifact:
        paths = validate_update_mask(request.update_mask.paths, ARTIFACT_UPDATABLE)
        aid, xid = await self._writable_artifact(request.artifact.name)
        async with self._store.transaction() as conn:
            updated = await update_artifact(conn, aid, request.artifact, paths, now=self._clock())
            await self._audit(conn, AuditAction.UPDATE_ARTIFACT, updated.name, xid)
            return updated

    async def DeleteArtifact(self, request: api_pb2.DeleteArtifactRequest, context: Any) -> Empty:
        aid, xid = await self._writable_artifact(request.name)
        async with self._store.transaction() as conn:
            await delete_artifact(conn, aid)
            await self._audit(conn, AuditAction.DELETE_ARTIFACT, request.name, xid)
        return Empty()

    # --- status messages ---------------------------------------------------------------

    async def ListStatusMessages(
        self, request: api_pb2.ListStatusMessagesRequest, context: Any
    ) -> api_pb2.ListStatusMessagesResponse:
        xid, wid = parse_parent(request.parent)
        async with self._store.transaction() as conn:
            if wid is None:
                await fetch_experiment(conn, xid)
            else:
                await fetch_work_unit(conn, xid, wid)
            found, token = await list_status_messages(conn, xid, wid, list_request(request))
        return api_pb2.ListStatusMessagesResponse(status_messages=found, next_page_token=token)

    SearchStatusMessages = ListStatusMessages
