"""Pure view models of an experiment's notifications (docs/notifications.md): its webhooks
and the log of their deliveries, for the experiment page's Notifications block."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ui.views import fmt_time
from xmc_api.xmc.v1 import notifications_pb2 as pb

Row = dict[str, Any]
EVENTS = ("experiment.finished", "work_unit.failed", "experiment.failures_over_threshold")
#: Deliveries the page shows (newest first); the CLI and REST page through the rest.
SHOWN_DELIVERIES = 20
_TONE = {"delivered": "done", "failed": "failed", "pending": "pending"}


@dataclass(frozen=True)
class Notifications:
    webhooks: list[Row]
    deliveries: list[Row]


def threshold_text(webhook: pb.Webhook) -> str:
    parts = []
    if webhook.failed_count:
        parts.append(f"≥ {webhook.failed_count} failed")
    if webhook.failed_fraction:
        parts.append(f"≥ {webhook.failed_fraction:.0%} failed")
    return " and ".join(parts) or "—"


def webhook_row(webhook: pb.Webhook) -> Row:
    return {
        "name": webhook.name,
        "id": webhook.name.rsplit("/", 1)[-1],
        "url": webhook.url,
        "events": list(webhook.events),
        "threshold": threshold_text(webhook),
        "creator": webhook.creator,
        "created": fmt_time(webhook.create_time),
    }


def answer_text(attempt: pb.DeliveryAttempt) -> str:
    """``200 ok``, ``500 down for maintenance``, ``timeout after 10s``."""
    if attempt.http_status:
        return f"{attempt.http_status} {' '.join(attempt.response.split())[:80]}".strip()
    return attempt.error or "no answer"


def delivery_row(delivery: pb.Delivery) -> Row:
    pending = delivery.status == "pending"
    return {
        "id": delivery.delivery_id,
        "webhook": delivery.webhook.rsplit("/", 1)[-1],
        "event": delivery.event,
        "status": delivery.status,
        "tone": _TONE.get(delivery.status, "idle"),
        "attempts": delivery.attempts,
        "created": fmt_time(delivery.create_time),
        "when": fmt_time(delivery.next_attempt_time if pending else delivery.finish_time),
        "log": [
            {
                "attempt": a.attempt,
                "start": fmt_time(a.start_time),
                "answer": answer_text(a),
                "latency_ms": a.latency_ms,
            }
            for a in delivery.log
        ],
    }


def notifications_view(found: tuple[Iterable[pb.Webhook], Iterable[pb.Delivery]]) -> Notifications:
    webhooks, deliveries = found
    return Notifications([webhook_row(w) for w in webhooks], [delivery_row(d) for d in deliveries])
