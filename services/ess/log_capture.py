"""``xmc.internal.v1.ContainerLogService``: the Reconciler hands over container log tails
and the ESS keeps them (docs/logs.md). Internal: service identities only, like every
observation write.

The ESS cuts each tail to its own XMC_LOG_TAIL_BYTES again and enforces the experiment
cap (``xmc.store.container_logs``): what is kept is decided where it is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Final

import structlog

from ess.auth import require_service
from ess.interceptor import caller
from xmc.errors import InvalidArgumentError, ResourceExhaustedError
from xmc.model.container_logs import Capture, CaptureKey
from xmc.settings import LogSettings
from xmc.store.transactions import Store, record_captures
from xmc.timestamps import to_datetime
from xmc_api.internal.v1 import logs_pb2, logs_pb2_grpc

log = structlog.get_logger()

#: Captures one call may carry: a JobSet's pods' containers, with room to spare.
MAX_CAPTURES: Final = 1000


def parse_capture(item: logs_pb2.ContainerLogCapture, index: int) -> Capture:
    """One capture, checked; INVALID_ARGUMENT names the field of the item at fault."""
    where = f"captures[{index}]"
    for field, value in (
        ("experiment_id", item.experiment_id),
        ("work_unit_id", item.work_unit_id),
        ("execution_id", item.execution_id),
    ):
        if value < 1:
            raise InvalidArgumentError(f"{where}.{field}: must be positive, got {value}")
    for field, text in (("pod_name", item.pod_name), ("pod_uid", item.pod_uid),
                        ("container", item.container)):  # fmt: skip
        if not text or len(text) > 253:
            raise InvalidArgumentError(f"{where}.{field}: 1 to 253 characters required")
    if item.run < 0:
        raise InvalidArgumentError(f"{where}.run: must not be negative, got {item.run}")
    return Capture(
        key=CaptureKey(
            item.experiment_id, item.work_unit_id, item.execution_id,
            item.pod_uid, item.container, item.run,
        ),
        pod_name=item.pod_name,
        terminated=item.terminated,
        exit_code=item.exit_code if item.HasField("exit_code") else None,
        reason=item.reason[:256],
        finished_at=to_datetime(item.finish_time) if item.HasField("finish_time") else None,
        text=item.text,
        truncated=item.truncated,
        unavailable=item.unavailable[:1024],
    )  # fmt: skip


class ContainerLogService(logs_pb2_grpc.ContainerLogServiceServicer):
    def __init__(
        self, store: Store, settings: LogSettings, *, clock: Callable[[], datetime]
    ) -> None:
        self._store = store
        self._settings = settings
        self._clock = clock

    async def RecordContainerLogs(
        self, request: logs_pb2.RecordContainerLogsRequest, context: Any
    ) -> logs_pb2.RecordContainerLogsResponse:
        require_service(caller(), "RecordContainerLogs")
        if len(request.captures) > MAX_CAPTURES:
            raise ResourceExhaustedError(
                f"captures: {len(request.captures)} items; at most {MAX_CAPTURES} per call"
            )
        captures = [parse_capture(item, i) for i, item in enumerate(request.captures)]
        async with self._store.transaction() as conn:
            stored = await record_captures(
                conn,
                captures,
                tail_limit=self._settings.tail_bytes,
                experiment_limit=self._settings.experiment_bytes,
                now=self._clock(),
            )
        log.info("container logs recorded", captures=len(captures), dropped=stored.count(False))
        return logs_pb2.RecordContainerLogsResponse(stored=stored)
