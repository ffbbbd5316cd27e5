"""``xmc quota``: per-user and per-group limits on creates per second, live work units and
live experiments (docs/quotas.md), through the ESS's QuotaService. Setting, clearing,
listing and reconciling are for admins; anyone may read their own quota."""

from __future__ import annotations

from typing import Literal

import click

from xmc.errors import InvalidArgumentError
from xmc.model.quotas import parse_principal, quota_name
from xmc_api.xmc.v1 import quota_pb2, quota_pb2_grpc

from .client import Client, fail, pass_client, print_table, to_dict


def _stub(client: Client) -> quota_pb2_grpc.QuotaServiceStub:
    return quota_pb2_grpc.QuotaServiceStub(client.channel())


def _name(principal: str) -> str:
    """``user:alice@x``, a bare email (a user), ``group:ml`` or ``default`` → its quota's name."""
    text = principal if ":" in principal or principal == "default" else f"user:{principal}"
    try:
        return quota_name(parse_principal(text, field_name="PRINCIPAL"))
    except InvalidArgumentError as error:
        fail(str(error))


Limit = Literal["creates_per_second", "creates_burst", "live_work_units", "live_experiments"]


def _limit(quota: quota_pb2.Quota, field: Limit) -> str:
    return f"{getattr(quota, field):g}" if quota.HasField(field) else "-"


def _row(quota: quota_pb2.Quota) -> list[str]:
    return [
        quota.principal,
        _limit(quota, "creates_per_second"),
        _limit(quota, "creates_burst"),
        f"{quota.usage.live_work_units} / {_limit(quota, 'live_work_units')}",
        f"{quota.usage.live_experiments} / {_limit(quota, 'live_experiments')}",
        quota.source or "quota",
    ]


_COLUMNS = ["principal", "creates/s", "burst", "live units", "live experiments", "from"]


def _show(client: Client, quota: quota_pb2.Quota) -> None:
    client.show(to_dict(quota), lambda: print_table(None, _COLUMNS, [_row(quota)]))


@click.group("quota")
def quota() -> None:
    """Quotas: creates per second, live work units, live experiments per user or group."""


@quota.command("get")
@click.argument("principal")
@pass_client
def quota_get(client: Client, principal: str) -> None:
    """The limits PRINCIPAL gets and its usage (user:EMAIL or EMAIL, group:NAME, default)."""
    request = quota_pb2.GetQuotaRequest(name=_name(principal))
    _show(client, client.call(_stub(client).GetQuota, request))


@quota.command("set")
@click.argument("principal")
@click.option("--creates-per-second", type=float, help="experiments + work units per second")
@click.option("--burst", type=int, help="creates allowed at once (default: the rate)")
@click.option("--live-work-units", type=int, help="work units not yet finished")
@click.option("--live-experiments", type=int, help="experiments still active")
@pass_client
def quota_set(
    client: Client,
    principal: str,
    creates_per_second: float | None,
    burst: int | None,
    live_work_units: int | None,
    live_experiments: int | None,
) -> None:
    """Set PRINCIPAL's limits (admins); a limit not given is unlimited."""
    message = quota_pb2.Quota(name=_name(principal))
    if creates_per_second is not None:
        message.creates_per_second = creates_per_second
    if burst is not None:
        message.creates_burst = burst
    if live_work_units is not None:
        message.live_work_units = live_work_units
    if live_experiments is not None:
        message.live_experiments = live_experiments
    request = quota_pb2.SetQuotaRequest(quota=message)
    _show(client, client.call(_stub(client).SetQuota, request))


@quota.command("clear")
@click.argument("principal")
@pass_client
def quota_clear(client: Client, principal: str) -> None:
    """Remove PRINCIPAL's quota (admins): a user falls back to the default."""
    name = _name(principal)
    client.call(_stub(client).DeleteQuota, quota_pb2.DeleteQuotaRequest(name=name))
    client.show({"deleted": name}, lambda: click.echo(f"deleted {name}"))


@quota.command("list")
@pass_client
def quota_list(client: Client) -> None:
    """Every quota set, with its usage (admins)."""
    found = client.call(_stub(client).ListQuotas, quota_pb2.ListQuotasRequest())
    client.show(
        to_dict(found), lambda: print_table(None, _COLUMNS, [_row(q) for q in found.quotas])
    )


@quota.command("reconcile")
@pass_client
def quota_reconcile(client: Client) -> None:
    """Recount every principal's live work units and experiments (admins; repair)."""
    found = client.call(_stub(client).ReconcileQuotaUsage, quota_pb2.ReconcileQuotaUsageRequest())
    client.show(to_dict(found), lambda: click.echo(f"corrected {found.corrected} counters"))
