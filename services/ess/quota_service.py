"""``xmc.v1.QuotaService`` (docs/quotas.md): admins set, list, delete and reconcile
quotas; any caller reads the quota of their own user and of their groups (so a refused
user can see what refused them)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from google.protobuf.empty_pb2 import Empty

from ess.auth import require_admin
from ess.interceptor import actor, caller
from ess.quotas import QuotaGate
from xmc.errors import InvalidArgumentError, NotFoundError, PermissionDeniedError
from xmc.model.audit import AuditAction, AuditEntry
from xmc.model.quotas import (
    Limits,
    Usage,
    check_limits,
    limits_source,
    parse_quota_name,
    principals_of,
    quota_name,
)
from xmc.store.transactions import (
    Store,
    StoredQuota,
    delete_quota_limits,
    fetch_quotas,
    fetch_usage,
    reconcile_usage,
    record_audit,
    set_quota_limits,
)
from xmc.timestamps import set_timestamp
from xmc_api.xmc.v1 import quota_pb2, quota_pb2_grpc


def limits_of(quota: quota_pb2.Quota) -> Limits:
    """The four limits of a request (unset: unlimited); INVALID_ARGUMENT names the field."""
    limits = Limits(
        creates_per_second=(
            quota.creates_per_second if quota.HasField("creates_per_second") else None
        ),
        creates_burst=quota.creates_burst if quota.HasField("creates_burst") else None,
        live_work_units=quota.live_work_units if quota.HasField("live_work_units") else None,
        live_experiments=quota.live_experiments if quota.HasField("live_experiments") else None,
    )
    try:
        check_limits(limits)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"quota.{error}") from None
    return limits


def quota_message(
    principal: str,
    limits: Limits,
    source: str,
    stored: StoredQuota | None,
    usage: Usage | None,
) -> quota_pb2.Quota:
    message = quota_pb2.Quota(name=quota_name(principal), principal=principal, source=source)
    if usage is not None:
        message.usage.live_work_units = usage.live_work_units
        message.usage.live_experiments = usage.live_experiments
    if limits.creates_per_second is not None:
        message.creates_per_second = limits.creates_per_second
    if limits.creates_burst is not None:
        message.creates_burst = limits.creates_burst
    if limits.live_work_units is not None:
        message.live_work_units = limits.live_work_units
    if limits.live_experiments is not None:
        message.live_experiments = limits.live_experiments
    if stored is not None:
        set_timestamp(message.update_time, stored.update_time)
        message.updated_by = stored.updated_by
    return message


class QuotaService(quota_pb2_grpc.QuotaServiceServicer):
    def __init__(self, store: Store, gate: QuotaGate) -> None:
        self._store = store
        self._gate = gate

    async def _answer(self, principal: str) -> quota_pb2.Quota:
        async with self._store.connection() as conn:
            rows = {row.principal: row for row in await fetch_quotas(conn)}
            usage = (await fetch_usage(conn, [principal])).get(principal)
        table = {p: row.limits for p, row in rows.items()}
        limits, source = limits_source(principal, table, self._gate.default)
        return quota_message(principal, limits, source, rows.get(principal), usage)

    async def GetQuota(self, request: quota_pb2.GetQuotaRequest, context: Any) -> quota_pb2.Quota:
        principal = parse_quota_name(request.name)
        identity = caller()
        if not identity.is_admin and principal not in principals_of(
            identity.email, identity.groups
        ):
            raise PermissionDeniedError(
                f"name: {identity.email} may read only their own quota and their groups' "
                "(admins read any)"
            )
        return await self._answer(principal)

    async def ListQuotas(
        self, request: quota_pb2.ListQuotasRequest, context: Any
    ) -> quota_pb2.ListQuotasResponse:
        require_admin(caller(), "ListQuotas")
        async with self._store.connection() as conn:
            rows = await fetch_quotas(conn)
            usage = await fetch_usage(conn, [row.principal for row in rows])
        response = quota_pb2.ListQuotasResponse()
        response.quotas.extend(
            quota_message(row.principal, row.limits, "quota", row, usage.get(row.principal))
            for row in rows
        )
        return response

    async def SetQuota(self, request: quota_pb2.SetQuotaRequest, context: Any) -> quota_pb2.Quota:
        identity = caller()
        require_admin(identity, "SetQuota")
        principal = parse_quota_name(request.quota.name, field_name="quota.name")
        limits = limits_of(request.quota)
        async with self._store.transaction() as conn:
            now = self._store.clock()
            await set_quota_limits(conn, principal, limits, by=identity.email, now=now)
            detail = ", ".join(f"{k}={v}" for k, v in asdict(limits).items() if v is not None)
            entry = AuditEntry(AuditAction.SET_QUOTA, request.quota.name, None, detail)
            await record_audit(conn, actor(), entry, now=now)
        await self._gate.load()
        return await self._answer(principal)

    async def DeleteQuota(self, request: quota_pb2.DeleteQuotaRequest, context: Any) -> Empty:
        require_admin(caller(), "DeleteQuota")
        principal = parse_quota_name(request.name)
        async with self._store.transaction() as conn:
            if not await delete_quota_limits(conn, principal):
                raise NotFoundError(f"name: {request.name} has no quota set")
            entry = AuditEntry(AuditAction.DELETE_QUOTA, request.name, None)
            await record_audit(conn, actor(), entry, now=self._store.clock())
        await self._gate.load()
        return Empty()

    async def ReconcileQuotaUsage(
        self, request: quota_pb2.ReconcileQuotaUsageRequest, context: Any
    ) -> quota_pb2.ReconcileQuotaUsageResponse:
        require_admin(caller(), "ReconcileQuotaUsage")
        async with self._store.transaction() as conn:
            corrected = await reconcile_usage(conn)
        return quota_pb2.ReconcileQuotaUsageResponse(corrected=corrected)
