"""``xmc.v1.SweepService``: which args vary across an experiment's work units, and its units
grouped by one arg with state counts, both counted in Postgres (docs/decisions/
0037-the-sweep-table.md). Behind the same interceptor as the public API: any authenticated
caller may read, as with every other read of the ESS (unless reads are restricted:
``ess.read_gate``)."""

from __future__ import annotations

from typing import Any

from xmc.model.args import varying_keys
from xmc.names import parse_experiment_name
from xmc.store.transactions import Store, arg_groups, arg_keys
from xmc_api.cloud.xmanager.v1.status_pb2 import WorkUnitStatus
from xmc_api.xmc.v1 import sweep_pb2, sweep_pb2_grpc


class SweepService(sweep_pb2_grpc.SweepServiceServicer):
    def __init__(self, store: Store) -> None:
        self._store = store

    async def ListArgKeys(
        self, request: sweep_pb2.ListArgKeysRequest, context: Any
    ) -> sweep_pb2.ListArgKeysResponse:
        xid = parse_experiment_name(request.parent, field="parent")
        async with self._store.connection() as conn:
            keys = await arg_keys(conn, xid)
        varying = set(varying_keys(keys.spreads, keys.total))
        response = sweep_pb2.ListArgKeysResponse(work_units=keys.total)
        for spread in keys.spreads:
            response.keys.add(
                key=spread.key,
                distinct_values=spread.distinct,
                present=spread.present,
                varying=spread.key in varying,
                constant_value="" if spread.key in varying else keys.samples[spread.key],
            )
        return response

    async def ListArgGroups(
        self, request: sweep_pb2.ListArgGroupsRequest, context: Any
    ) -> sweep_pb2.ListArgGroupsResponse:
        xid = parse_experiment_name(request.parent, field="parent")
        async with self._store.connection() as conn:
            groups, truncated = await arg_groups(conn, xid, request.key, request.filter)
        response = sweep_pb2.ListArgGroupsResponse(truncated=truncated)
        for group in groups:
            item = response.groups.add(
                value=group.value or "", missing=group.value is None, count=group.count
            )
            for state, count in group.states.items():
                item.state_counts.add(
                    state=WorkUnitStatus.WorkUnitState.ValueType(state), count=count
                )
        return response
