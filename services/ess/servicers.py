"""The ESS's gRPC services: which servicer answers each, built from the parts one ESS
process shares (``ess.app`` makes the parts and the server; this is the table between).

:data:`SERVICE_NAMES` is what reflection lists and health reports on, and what the read
rules (``ess.read_gate``) must cover, one rule per method.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from google.longrunning import operations_grpc_pb2

from ess.audit_service import AuditService
from ess.business_metrics import FirstStarts
from ess.cluster import LazyKube
from ess.intents import Intents
from ess.internal import SchedulingService, WorkUnitExecutionService
from ess.live_logs import LiveLogs
from ess.log_capture import ContainerLogService
from ess.logs import LogService
from ess.manifests import SpecService
from ess.notifications import NotificationService
from ess.operations_service import OperationsService
from ess.queues import QueueService
from ess.quota_service import QuotaService
from ess.quotas import QuotaGate
from ess.relay import OutboxRelay
from ess.retries import Retries
from ess.retry_service import RetryService
from ess.service import ExperimentStateService
from ess.sweeps import SweepService
from ess.timelines import TimelineService
from ess.usage import UsageService
from ess.watch_hub import WatchHub
from ess.watching import WatchService
from xmc.settings import LogSettings
from xmc.store.transactions import Store
from xmc.streams import StreamNames
from xmc_api.cloud.xmanager.v1 import api_pb2, api_pb2_grpc
from xmc_api.internal.v1 import (
    executions_pb2,
    executions_pb2_grpc,
    scheduling_pb2,
    scheduling_pb2_grpc,
)
from xmc_api.internal.v1 import logs_pb2 as internal_logs_pb2
from xmc_api.internal.v1 import logs_pb2_grpc as internal_logs_pb2_grpc
from xmc_api.xmc.v1 import (
    audit_pb2,
    audit_pb2_grpc,
    logs_pb2,
    logs_pb2_grpc,
    notifications_pb2,
    notifications_pb2_grpc,
    queue_pb2,
    queue_pb2_grpc,
    quota_pb2,
    quota_pb2_grpc,
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
    watch_pb2,
    watch_pb2_grpc,
)

#: Names that reflection lists (so ``grpcurl`` works) and health reports on.
SERVICE_NAMES = (
    api_pb2.DESCRIPTOR.services_by_name["ExperimentStateService"].full_name,
    "google.longrunning.Operations",
    executions_pb2.DESCRIPTOR.services_by_name["WorkUnitExecutionService"].full_name,
    scheduling_pb2.DESCRIPTOR.services_by_name["SchedulingService"].full_name,
    timeline_pb2.DESCRIPTOR.services_by_name["TimelineService"].full_name,
    logs_pb2.DESCRIPTOR.services_by_name["LogService"].full_name,
    internal_logs_pb2.DESCRIPTOR.services_by_name["ContainerLogService"].full_name,
    spec_pb2.DESCRIPTOR.services_by_name["SpecService"].full_name,
    sweep_pb2.DESCRIPTOR.services_by_name["SweepService"].full_name,
    watch_pb2.DESCRIPTOR.services_by_name["WatchService"].full_name,
    retry_pb2.DESCRIPTOR.services_by_name["RetryService"].full_name,
    usage_pb2.DESCRIPTOR.services_by_name["UsageService"].full_name,
    notifications_pb2.DESCRIPTOR.services_by_name["NotificationService"].full_name,
    queue_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name,
    quota_pb2.DESCRIPTOR.services_by_name["QuotaService"].full_name,
    audit_pb2.DESCRIPTOR.services_by_name["AuditService"].full_name,
)


@dataclass(frozen=True)
class Parts:
    """What the servicers of one ESS process share."""

    store: Store
    intents: Intents
    gate: QuotaGate
    relay: OutboxRelay
    redis: Any
    names: StreamNames
    #: The read-only cluster client (live logs, the queue view), made on first use.
    kube: LazyKube
    hub: WatchHub
    #: Tells the observation path's changes into RUNNING apart (business metrics).
    first_starts: FirstStarts
    clock: Callable[[], datetime]


def add_servicers(server: Any, p: Parts, *, retries_per_minute: int, logs: LogSettings) -> None:
    """Register every service of :data:`SERVICE_NAMES` on ``server``."""
    api_pb2_grpc.add_ExperimentStateServiceServicer_to_server(
        ExperimentStateService(p.store, p.intents, clock=p.clock, quotas=p.gate), server
    )
    operations_grpc_pb2.add_OperationsServicer_to_server(
        OperationsService(p.store, clock=p.clock), server
    )
    executions_pb2_grpc.add_WorkUnitExecutionServiceServicer_to_server(
        WorkUnitExecutionService(
            p.store,
            Retries(per_minute=retries_per_minute),
            committed=p.relay.wake,
            first_starts=p.first_starts,
        ),
        server,
    )
    scheduling_pb2_grpc.add_SchedulingServiceServicer_to_server(
        SchedulingService(p.store, p.redis, p.names, clock=p.clock), server
    )
    timeline_pb2_grpc.add_TimelineServiceServicer_to_server(
        TimelineService(p.store, clock=p.clock), server
    )
    live_logs = LiveLogs(p.kube, tail_bytes=logs.tail_bytes)
    logs_pb2_grpc.add_LogServiceServicer_to_server(
        LogService(p.store, live_logs, clock=p.clock), server
    )
    queue_pb2_grpc.add_QueueServiceServicer_to_server(
        QueueService(p.store, p.intents, p.kube, clock=p.clock), server
    )
    internal_logs_pb2_grpc.add_ContainerLogServiceServicer_to_server(
        ContainerLogService(p.store, logs, clock=p.clock), server
    )
    spec_pb2_grpc.add_SpecServiceServicer_to_server(SpecService(p.store), server)
    sweep_pb2_grpc.add_SweepServiceServicer_to_server(SweepService(p.store), server)
    watch_pb2_grpc.add_WatchServiceServicer_to_server(
        WatchService(p.store, p.hub, clock=p.clock), server
    )
    retry_pb2_grpc.add_RetryServiceServicer_to_server(RetryService(p.store), server)
    audit_pb2_grpc.add_AuditServiceServicer_to_server(AuditService(p.store), server)
    usage_pb2_grpc.add_UsageServiceServicer_to_server(UsageService(p.store, clock=p.clock), server)
    notifications_pb2_grpc.add_NotificationServiceServicer_to_server(
        NotificationService(p.store, clock=p.clock), server
    )
    quota_pb2_grpc.add_QuotaServiceServicer_to_server(QuotaService(p.store, p.gate), server)
