"""The dashboard's gRPC side: typed calls to the ESS with the caller's bearer token, and
one place where an RPC error becomes a message for the page.

The UI holds no state of its own and no credentials of its own beyond an optional
default token (``XMC_UI_TOKEN``): a request's ``Authorization`` header (set by the auth
proxy in front of the dashboard) is passed through unchanged, so the ESS authorizes the
person, not the dashboard.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc

from ui.transcode import HTTP_STATUS
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.cloud.xmanager.v1.artifact_pb2 import Artifact
from xmc_api.cloud.xmanager.v1.experiment_pb2 import Experiment
from xmc_api.cloud.xmanager.v1.status_message_pb2 import StatusMessage
from xmc_api.cloud.xmanager.v1.work_unit_execution_pb2 import WorkUnitExecution
from xmc_api.cloud.xmanager.v1.work_unit_pb2 import WorkUnit
from xmc_api.internal.v1 import scheduling_pb2, scheduling_pb2_grpc
from xmc_api.xmc.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    logs_pb2,
    logs_pb2_grpc,
    notifications_pb2,
    notifications_pb2_grpc,
    queue_pb2,
    queue_pb2_grpc,
    retry_pb2,
    retry_pb2_grpc,
    spec_pb2,
    spec_pb2_grpc,
    sweep_pb2,
    sweep_pb2_grpc,
    timeline_pb2,
    timeline_pb2_grpc,
    usage_pb2,
    usage_pb2_grpc,
)

#: Seconds one RPC may take before the page says the ESS is slow.
RPC_TIMEOUT = 10.0
#: The most status messages the work unit page reads (newest kept).
MAX_MESSAGES = 1000
#: The most artifacts the experiment page reads (its own and its units', newest first).
MAX_ARTIFACTS = 200


class UiError(Exception):
    """What the page shows instead of a result: an HTTP status and a one-line message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def rpc_error(error: grpc.RpcError) -> UiError:
    """The page's message for a failed RPC: the code and the ESS's own details."""
    code = error.code() if isinstance(error, grpc.aio.AioRpcError) else grpc.StatusCode.UNKNOWN
    details = error.details() if isinstance(error, grpc.aio.AioRpcError) else str(error)
    hint = " (is the ESS up?)" if code == grpc.StatusCode.UNAVAILABLE else ""
    return UiError(HTTP_STATUS.get(code, 500), f"{code.name}: {details}{hint}")


def call_metadata(
    authorization: str | None, default_token: str, request_id: str
) -> tuple[tuple[str, str], ...]:
    """The caller's ``Authorization`` header when it sent one, else the default token; and
    the request's id (``x-request-id``), which the ESS records with what the call changes."""
    forwarded = (("x-request-id", request_id),)
    if authorization:
        return (("authorization", authorization), *forwarded)
    if default_token:
        return (("authorization", f"Bearer {default_token}"), *forwarded)
    return forwarded


@dataclass(frozen=True)
class Page:
    items: list[Any]
    next_page_token: str


class Ess:
    """The RPCs the pages need, bound to one caller's credentials."""

    def __init__(self, channel: grpc.aio.Channel, metadata: tuple[tuple[str, str], ...]) -> None:
        self._api = api_pb2_grpc.ExperimentStateServiceStub(channel)
        self._scheduling = scheduling_pb2_grpc.SchedulingServiceStub(channel)
        self._timelines = timeline_pb2_grpc.TimelineServiceStub(channel)
        self._logs = logs_pb2_grpc.LogServiceStub(channel)
        self._retries = retry_pb2_grpc.RetryServiceStub(channel)
        self._spec = spec_pb2_grpc.SpecServiceStub(channel)
        self._sweeps = sweep_pb2_grpc.SweepServiceStub(channel)
        self._notifications = notifications_pb2_grpc.NotificationServiceStub(channel)
        self._queues = queue_pb2_grpc.QueueServiceStub(channel)
        self._audit = audit_pb2_grpc.AuditServiceStub(channel)
        self._usage = usage_pb2_grpc.UsageServiceStub(channel)
        self._metadata = metadata

    async def _call(self, method: Any, request: Any) -> Any:
        try:
            return await method(request, metadata=self._metadata, timeout=RPC_TIMEOUT)
        except grpc.RpcError as error:
            raise rpc_error(error) from None

    async def experiments(self, filter_: str, page_token: str, page_size: int) -> Page:
        request = api_pb2.ListExperimentsRequest(  # the default order: newest first
            filter=filter_, page_token=page_token, page_size=page_size
        )
        found = await self._call(self._api.SearchExperiments, request)
        return Page(list(found.experiments), found.next_page_token)

    async def experiment(self, xid: int) -> Experiment:
        request = api_pb2.GetExperimentRequest(name=f"experiments/{xid}")
        found: Experiment = await self._call(self._api.GetExperiment, request)
        return found

    async def work_units(
        self, xid: int, filter_: str, page_token: str, page_size: int, order_by: str = ""
    ) -> Page:
        request = api_pb2.ListWorkUnitsRequest(
            parent=f"experiments/{xid}", filter=filter_, page_token=page_token,
            page_size=page_size, order_by=order_by,
        )  # fmt: skip
        found = await self._call(self._api.ListWorkUnits, request)
        return Page(list(found.work_units), found.next_page_token)

    async def arg_keys(self, xid: int) -> sweep_pb2.ListArgKeysResponse:
        request = sweep_pb2.ListArgKeysRequest(parent=f"experiments/{xid}")
        found: sweep_pb2.ListArgKeysResponse = await self._call(self._sweeps.ListArgKeys, request)
        return found

    async def arg_groups(self, xid: int, key: str, filter_: str) -> sweep_pb2.ListArgGroupsResponse:
        request = sweep_pb2.ListArgGroupsRequest(
            parent=f"experiments/{xid}", key=key, filter=filter_
        )
        found: sweep_pb2.ListArgGroupsResponse = await self._call(
            self._sweeps.ListArgGroups, request
        )
        return found

    async def exit_codes(self, xid: int, wids: list[int]) -> dict[int, int | None]:
        """The current execution's exit code of each of ``wids`` (None: none known)."""
        if not wids:
            return {}
        request = logs_pb2.ListExitCodesRequest(parent=f"experiments/{xid}", work_unit_ids=wids)
        found: logs_pb2.ListExitCodesResponse = await self._call(self._logs.ListExitCodes, request)
        return {
            e.work_unit_id: e.exit_code if e.HasField("exit_code") else None
            for e in found.exit_codes
        }

    async def artifacts(self, xid: int) -> list[Artifact]:
        """Up to :data:`MAX_ARTIFACTS` of the experiment's and its units' artifacts."""
        request = api_pb2.ListArtifactsRequest(
            parent=f"experiments/{xid}", page_size=MAX_ARTIFACTS, order_by="create_time desc"
        )
        found = await self._call(self._api.ListArtifacts, request)
        return list(found.artifacts)

    async def work_unit(self, xid: int, wid: int) -> WorkUnit:
        request = api_pb2.GetWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}")
        found: WorkUnit = await self._call(self._api.GetWorkUnit, request)
        return found

    async def executions(self, xid: int, wid: int) -> list[WorkUnitExecution]:
        request = api_pb2.ListWorkUnitExecutionsRequest(parent=f"experiments/{xid}/workUnits/{wid}")
        found = await self._call(self._api.ListWorkUnitExecutions, request)
        return list(found.work_unit_executions)

    async def messages(self, xid: int, wid: int) -> list[StatusMessage]:
        """Up to :data:`MAX_MESSAGES` newest status messages of a unit, oldest first."""
        request = api_pb2.ListStatusMessagesRequest(
            parent=f"experiments/{xid}/workUnits/{wid}", page_size=MAX_MESSAGES,
            order_by="create_time desc",
        )  # fmt: skip
        found = await self._call(self._api.ListStatusMessages, request)
        return list(reversed(found.status_messages))

    async def timeline(self, xid: int, wid: int) -> timeline_pb2.WorkUnitTimeline:
        request = timeline_pb2.GetWorkUnitTimelineRequest(name=f"experiments/{xid}/workUnits/{wid}")
        found: timeline_pb2.WorkUnitTimeline = await self._call(
            self._timelines.GetWorkUnitTimeline, request
        )
        return found

    async def retries(self, xid: int, wid: int) -> retry_pb2.WorkUnitRetries:
        request = retry_pb2.GetWorkUnitRetriesRequest(name=f"experiments/{xid}/workUnits/{wid}")
        found: retry_pb2.WorkUnitRetries = await self._call(
            self._retries.GetWorkUnitRetries, request
        )
        return found

    async def container_logs(self, xid: int, wid: int) -> logs_pb2.ListContainerLogsResponse:
        """Every execution's container runs, stored and live."""
        request = logs_pb2.ListContainerLogsRequest(parent=f"experiments/{xid}/workUnits/{wid}")
        found: logs_pb2.ListContainerLogsResponse = await self._call(
            self._logs.ListContainerLogs, request
        )
        return found

    async def read_logs(
        self, xid: int, wid: int, *, execution: int, container: str, follow: bool
    ) -> AsyncIterator[logs_pb2.LogChunk]:
        """The log stream; no deadline when following (it ends with the execution or
        when the reader goes). An error before the first chunk is a :class:`UiError`."""
        request = logs_pb2.ReadWorkUnitLogsRequest(
            name=f"experiments/{xid}/workUnits/{wid}", execution_id=execution,
            container=container, follow=follow,
        )  # fmt: skip
        stream = self._logs.ReadWorkUnitLogs(
            request, metadata=self._metadata, timeout=None if follow else RPC_TIMEOUT
        )
        try:
            async for chunk in stream:
                yield chunk
        except grpc.RpcError as error:
            raise rpc_error(error) from None
        finally:
            stream.cancel()

    async def timings(self, xid: int) -> timeline_pb2.ExperimentTimings:
        """The phase statistics and the default number of stuck units (10)."""
        request = timeline_pb2.GetExperimentTimingsRequest(name=f"experiments/{xid}")
        found: timeline_pb2.ExperimentTimings = await self._call(
            self._timelines.GetExperimentTimings, request
        )
        return found

    async def manifest(self, name: str) -> spec_pb2.ExecutionManifest | None:
        """The JobSet manifest of execution ``name``; None when it has none (its JobSet
        is not created yet, or was created before XMC kept manifests)."""
        request = spec_pb2.GetExecutionManifestRequest(name=name)
        try:
            found: spec_pb2.ExecutionManifest = await self._spec.GetExecutionManifest(
                request, metadata=self._metadata, timeout=RPC_TIMEOUT
            )
        except grpc.aio.AioRpcError as error:
            if error.code() == grpc.StatusCode.NOT_FOUND:
                return None
            raise rpc_error(error) from None
        return found

    async def notifications(
        self, xid: int, deliveries: int
    ) -> tuple[list[notifications_pb2.Webhook], list[notifications_pb2.Delivery]]:
        """The experiment's webhooks and its newest ``deliveries`` deliveries."""
        parent = f"experiments/{xid}"
        hooks = await self._call(
            self._notifications.ListWebhooks, notifications_pb2.ListWebhooksRequest(parent=parent)
        )
        log = await self._call(
            self._notifications.ListDeliveries,
            notifications_pb2.ListDeliveriesRequest(parent=parent, page_size=deliveries),
        )
        return list(hooks.webhooks), list(log.deliveries)

    async def my_webhooks(self) -> list[notifications_pb2.Webhook]:
        """The caller's own webhooks (``users/me``)."""
        request = notifications_pb2.ListWebhooksRequest(parent="users/me")
        found = await self._call(self._notifications.ListWebhooks, request)
        return list(found.webhooks)

    async def add_webhook(self, parent: str, webhook: notifications_pb2.Webhook) -> str:
        """Adds it to ``parent`` (``experiments/{xid}`` or ``users/me``); returns its name."""
        request = notifications_pb2.CreateWebhookRequest(parent=parent, webhook=webhook)
        created: notifications_pb2.Webhook = await self._call(
            self._notifications.CreateWebhook, request
        )
        return created.name

    async def delete_webhook(self, name: str) -> None:
        request = notifications_pb2.DeleteWebhookRequest(name=name)
        await self._call(self._notifications.DeleteWebhook, request)

    async def audit_events(self, request: audit_pb2.ListAuditEventsRequest) -> Page:
        """One page of the audit trail (admins only: PERMISSION_DENIED is a 403)."""
        found = await self._call(self._audit.ListAuditEvents, request)
        return Page(list(found.events), found.next_page_token)

    async def stop(self, xid: int, wid: int) -> None:
        request = api_pb2.StopWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}")
        await self._call(self._api.StopWorkUnit, request)

    async def restart(self, xid: int, wid: int) -> None:
        request = api_pb2.RestartWorkUnitRequest(name=f"experiments/{xid}/workUnits/{wid}")
        await self._call(self._api.RestartWorkUnit, request)

    async def batch_stop(self, xid: int, filter_: str) -> None:
        request = api_pb2.BatchStopWorkUnitsRequest(parent=f"experiments/{xid}", filter=filter_)
        await self._call(self._api.BatchStopWorkUnits, request)

    async def batch_restart(self, xid: int, filter_: str) -> None:
        request = api_pb2.BatchRestartWorkUnitsRequest(parent=f"experiments/{xid}", filter=filter_)
        await self._call(self._api.BatchRestartWorkUnits, request)

    async def usage(self, request: usage_pb2.GetUsageRequest) -> usage_pb2.UsageReport:
        found: usage_pb2.UsageReport = await self._call(self._usage.GetUsage, request)
        return found

    async def scheduling(self) -> scheduling_pb2.SchedulingState:
        request = scheduling_pb2.GetSchedulingStateRequest()
        found: scheduling_pb2.SchedulingState = await self._call(
            self._scheduling.GetSchedulingState, request
        )
        return found

    async def pause(self, reason: str) -> None:
        request = scheduling_pb2.PauseSchedulingRequest(reason=reason)
        await self._call(self._scheduling.PauseScheduling, request)

    async def resume(self) -> None:
        await self._call(
            self._scheduling.ResumeScheduling, scheduling_pb2.ResumeSchedulingRequest()
        )

    async def queues(self) -> list[queue_pb2.Queue]:
        found = await self._call(self._queues.ListQueues, queue_pb2.ListQueuesRequest())
        return list(found.queues)

    async def queue(self, name: str) -> queue_pb2.Queue:
        found: queue_pb2.Queue = await self._call(
            self._queues.GetQueue, queue_pb2.GetQueueRequest(name=name)
        )
        return found

    async def set_priority(self, xid: int, wid: int, priority_class: str) -> None:
        request = queue_pb2.SetWorkUnitPriorityRequest(
            name=f"experiments/{xid}/workUnits/{wid}", priority_class=priority_class
        )
        await self._call(self._queues.SetWorkUnitPriority, request)
