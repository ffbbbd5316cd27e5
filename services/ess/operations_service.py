"""``google.longrunning.Operations`` on the ESS (SPEC §2.2).

Operations are rows in Postgres; ``WaitOperation`` polls its row with a growing interval
(``POLL_INTERVALS``, bounded by the request's timeout) rather than holding a database
notification channel per waiting client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

from google.longrunning import operations_grpc_pb2
from google.longrunning.operations_proto_pb2 import (
    CancelOperationRequest,
    DeleteOperationRequest,
    GetOperationRequest,
    ListOperationsRequest,
    ListOperationsResponse,
    Operation,
    WaitOperationRequest,
)
from google.protobuf.empty_pb2 import Empty

from xmc.errors import InvalidArgumentError, UnimplementedError
from xmc.names import parse_experiment_name
from xmc.retry import Backoffs
from xmc.store.transactions import ListRequest, Store, fetch_operation, list_operations

#: Longest a single WaitOperation blocks; clients loop for longer waits (AIP-151).
MAX_WAIT_SECONDS = 60.0
#: Seconds between WaitOperation's reads of the row: doubling from 50 ms, so a quick
#: task answers fast, to one second, so a long wait costs one query a second.
POLL_INTERVALS = Backoffs((0.05, 0.1, 0.2, 0.4, 0.8, 1.0))


class OperationsService(operations_grpc_pb2.OperationsServicer):  # type: ignore[misc]
    def __init__(self, store: Store, *, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def _get(self, name: str) -> Operation:
        if "/operations/" not in name:
            raise InvalidArgumentError(f"name: {name!r} is not an operation name")
        async with self._store.transaction() as conn:
            return await fetch_operation(conn, name)

    async def GetOperation(self, request: GetOperationRequest, context: Any) -> Operation:
        return await self._get(request.name)

    async def ListOperations(
        self, request: ListOperationsRequest, context: Any
    ) -> ListOperationsResponse:
        xid = parse_experiment_name(request.name, field="name")
        async with self._store.transaction() as conn:
            found, token = await list_operations(
                conn,
                xid,
                ListRequest(
                    filter=request.filter,
                    page_size=request.page_size,
                    page_token=request.page_token,
                ),
            )
        return ListOperationsResponse(operations=found, next_page_token=token)

    async def WaitOperation(self, request: WaitOperationRequest, context: Any) -> Operation:
        timeout = MAX_WAIT_SECONDS
        if request.HasField("timeout"):
            timeout = min(request.timeout.ToTimedelta().total_seconds(), MAX_WAIT_SECONDS)
        if timeout < 0:
            raise InvalidArgumentError("timeout: must not be negative")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        polls = 0
        while True:
            operation = await self._get(request.name)
            remaining = deadline - loop.time()
            if operation.done or remaining <= 0:
                return operation
            polls += 1
            await asyncio.sleep(min(POLL_INTERVALS.after(polls), remaining))

    async def CancelOperation(self, request: CancelOperationRequest, context: Any) -> Empty:
        raise UnimplementedError(
            "CancelOperation: XMC operations cannot be cancelled; stop the work unit instead"
        )

    async def DeleteOperation(self, request: DeleteOperationRequest, context: Any) -> Empty:
        raise UnimplementedError("DeleteOperation: operations expire after 90 days")
