"""``xmc.v1.SpecService``: the JobSet manifest each execution was created with, as the
Actuator stored it when it settled the creating task (decision 0039). Behind the same
interceptor as the public API: any authenticated caller may read, as with every other read
of the ESS (``GetWorkUnit`` already returns the executable the manifest is built from;
restricted reads: ``ess.read_gate``)."""

from __future__ import annotations

from typing import Any

from xmc.model.manifest import MAX_MANIFEST_BYTES
from xmc.names import execution_name, parse_execution_name
from xmc.store.transactions import Store, StoredManifest, fetch_manifest
from xmc.timestamps import set_timestamp
from xmc_api.xmc.v1 import spec_pb2, spec_pb2_grpc


def manifest_message(name: str, stored: StoredManifest) -> spec_pb2.ExecutionManifest:
    kept = stored.kept
    message = spec_pb2.ExecutionManifest(
        name=f"{name}/manifest",
        manifest_json=kept.text or "",
        size_bytes=kept.size_bytes,
        omitted=kept.text is None,
        max_bytes=MAX_MANIFEST_BYTES,
        task_id=stored.task_id,
    )
    set_timestamp(message.record_time, stored.record_time)
    return message


class SpecService(spec_pb2_grpc.SpecServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def GetExecutionManifest(
        self, request: spec_pb2.GetExecutionManifestRequest, context: Any
    ) -> spec_pb2.ExecutionManifest:
        xid, wid, eid = parse_execution_name(request.name)
        async with self._store.connection() as conn:
            stored = await fetch_manifest(conn, xid, wid, eid)
        return manifest_message(execution_name(xid, wid, eid), stored)
