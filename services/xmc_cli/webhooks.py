"""``xmc webhooks``: notifications when an experiment finishes, a unit fails for good, or
failures pass a threshold (docs/notifications.md), and the log of their deliveries.

A webhook is an experiment's (``--experiment``) or the caller's own (``--mine``: every
experiment they create). The secret is printed once, by ``add``.
"""

from __future__ import annotations

import re
from typing import Any

import click

from xmc_api.xmc.v1 import notifications_pb2 as pb
from xmc_api.xmc.v1 import notifications_pb2_grpc

from .client import Client, experiment_name, fail, fmt_time, pass_client, print_table, to_dict

EVENTS = ("experiment.finished", "work_unit.failed", "experiment.failures_over_threshold")


def _stub(client: Client) -> notifications_pb2_grpc.NotificationServiceStub:
    return notifications_pb2_grpc.NotificationServiceStub(client.channel())


def parent_of(experiment: str | None, mine: bool) -> str:
    """``--experiment X`` → ``experiments/X``; ``--mine`` → ``users/me``; one of them."""
    if (experiment is None) == (not mine):
        fail("give exactly one of --experiment XID and --mine")
    return "users/me" if mine else experiment_name(str(experiment))


def webhook_name(value: str) -> str:
    """``12`` or ``webhooks/12``."""
    if re.fullmatch(r"[0-9]+", value):
        return f"webhooks/{value}"
    return value


def last_answer(delivery: pb.Delivery) -> str:
    """The latest attempt in a few words: ``200``, ``500 down…``, ``timeout after 10s``."""
    if not delivery.log:
        return ""
    attempt = delivery.log[-1]
    if attempt.http_status:
        snippet = " ".join(attempt.response.split())[:40]
        return f"{attempt.http_status} {snippet}".strip()
    return attempt.error


def webhook_rows(webhooks: Any) -> list[list[str]]:
    return [
        [
            w.name,
            w.url,
            ", ".join(w.events),
            _threshold(w),
            w.creator,
        ]
        for w in webhooks
    ]


def _threshold(w: pb.Webhook) -> str:
    parts = []
    if w.failed_count:
        parts.append(f"≥ {w.failed_count} failed")
    if w.failed_fraction:
        parts.append(f"≥ {w.failed_fraction:.0%}")
    return " and ".join(parts)


def delivery_rows(deliveries: Any) -> list[list[str]]:
    return [
        [
            d.delivery_id,
            d.webhook,
            d.event,
            d.status,
            str(d.attempts),
            last_answer(d),
            fmt_time(d.next_attempt_time) if d.status == "pending" else fmt_time(d.finish_time),
        ]
        for d in deliveries
    ]


@click.group()
def webhooks() -> None:
    """Webhooks: notifications of finished experiments and failures."""


@webhooks.command("add")
@click.argument("url")
@click.option("--experiment", "-x", default=None, help="The experiment's webhook (its id).")
@click.option("--mine", is_flag=True, help="Your own: for every experiment you create.")
@click.option(
    "--event", "events", multiple=True, type=click.Choice(EVENTS), help="Repeatable; default all."
)
@click.option("--failed-count", type=int, default=0, help="Threshold: at least N units FAILED.")
@click.option(
    "--failed-fraction", type=float, default=0.0, help="Threshold: at least this share FAILED."
)
@click.option("--secret", default="", help="The signing secret (default: the ESS makes one).")
@pass_client
def webhooks_add(
    client: Client,
    url: str,
    experiment: str | None,
    mine: bool,
    events: tuple[str, ...],
    failed_count: int,
    failed_fraction: float,
    secret: str,
) -> None:
    """Add a webhook called at URL (a Slack incoming webhook works as is)."""
    request = pb.CreateWebhookRequest(
        parent=parent_of(experiment, mine),
        webhook=pb.Webhook(
            url=url,
            events=list(events),
            failed_count=failed_count,
            failed_fraction=failed_fraction,
            secret=secret,
        ),
    )
    created = client.call(_stub(client).CreateWebhook, request)

    def render() -> None:
        click.echo(created.name)
        click.echo(f"secret: {created.secret}  (shown once: keep it to verify signatures)")

    client.show(to_dict(created), render)


@webhooks.command("list")
@click.option("--experiment", "-x", default=None, help="An experiment's webhooks (its id).")
@click.option("--mine", is_flag=True, help="Your own webhooks.")
@pass_client
def webhooks_list(client: Client, experiment: str | None, mine: bool) -> None:
    """An experiment's webhooks, or your own (URLs masked, secrets never shown)."""
    request = pb.ListWebhooksRequest(parent=parent_of(experiment, mine))
    found = client.call(_stub(client).ListWebhooks, request)
    client.show(
        [to_dict(w) for w in found.webhooks],
        lambda: print_table(
            None,
            ["name", "url", "events", "threshold", "creator"],
            webhook_rows(found.webhooks),
        ),
    )


@webhooks.command("rm")
@click.argument("name")
@pass_client
def webhooks_rm(client: Client, name: str) -> None:
    """Remove webhook NAME (``webhooks/12`` or ``12``) and its queued deliveries."""
    request = pb.DeleteWebhookRequest(name=webhook_name(name))
    client.call(_stub(client).DeleteWebhook, request)
    client.show({"deleted": request.name}, lambda: click.echo(f"deleted {request.name}"))


@webhooks.command("deliveries")
@click.argument("experiment")
@click.option("--limit", type=int, default=50, show_default=True, help="Newest first.")
@pass_client
def webhooks_deliveries(client: Client, experiment: str, limit: int) -> None:
    """The delivery log of EXPERIMENT's notifications: each delivery, its attempts and the
    last answer (``-o json`` for every attempt)."""
    request = pb.ListDeliveriesRequest(parent=experiment_name(experiment), page_size=limit)
    found = client.call(_stub(client).ListDeliveries, request)
    client.show(
        [to_dict(d) for d in found.deliveries],
        lambda: print_table(
            None,
            ["delivery", "webhook", "event", "status", "attempts", "last answer", "next / done"],
            delivery_rows(found.deliveries),
        ),
    )
