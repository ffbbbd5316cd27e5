"""``xmc.v1.NotificationService``: webhooks and their delivery log (docs/notifications.md).

Who may do what: an experiment's webhooks are managed by those who may change the
experiment (its creator, ACL owners and writers, admins) and read by whoever may read
the experiment (anyone authenticated unless reads are restricted: ``ess.read_gate``); a
user's webhooks (parent ``users/me``) by that user only.
Secrets are returned by CreateWebhook alone; URLs are read back masked.
"""

from __future__ import annotations

import math
import re
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from google.protobuf.empty_pb2 import Empty

from ess.auth import require_writer_of
from ess.interceptor import actor, caller
from xmc.errors import InvalidArgumentError, PermissionDeniedError, ResourceExhaustedError
from xmc.model.audit import AuditAction, AuditEntry
from xmc.model.notifications import ALL_EVENTS, Event, Threshold
from xmc.model.webhooks import MAX_SECRET_LENGTH, MIN_SECRET_LENGTH, masked_url, validate_url
from xmc.names import experiment_name, parse_experiment_name
from xmc.store.transactions import (
    Store,
    StoredDelivery,
    StoredWebhook,
    delete_webhook,
    fetch_experiment,
    fetch_webhook,
    insert_webhook,
    list_deliveries,
    list_webhooks,
    record_audit,
)
from xmc.timestamps import set_timestamp
from xmc_api.xmc.v1 import notifications_pb2 as pb
from xmc_api.xmc.v1 import notifications_pb2_grpc

_WEBHOOK_NAME = re.compile(r"webhooks/([0-9]{1,18})")
_USER_PARENT = re.compile(r"users/([^/]+)")
MAX_WEBHOOKS_PER_PARENT = 20
_DEFAULT_PAGE, _MAX_PAGE = 50, 500


# --- pure request checks -----------------------------------------------------------------


def parse_parent(parent: str, email: str, *, field: str = "parent") -> int | str:
    """``experiments/{xid}`` → xid; ``users/me`` (or the caller's own email) → the caller's
    email, lower-cased; another user is PERMISSION_DENIED."""
    user = _USER_PARENT.fullmatch(parent)
    if user is None:
        if not parent.startswith("experiments/"):
            raise InvalidArgumentError(
                f"{field}: {parent!r} is neither experiments/{{xid}} nor users/me"
            )
        return parse_experiment_name(parent, field=field)
    who = user.group(1).lower()
    if who not in ("me", email.lower()):
        raise PermissionDeniedError(f"{field}: {email} manages only their own webhooks")
    return email.lower()


def parse_webhook_name(name: str) -> int:
    match = _WEBHOOK_NAME.fullmatch(name)
    if match is None:
        raise InvalidArgumentError(f"name: {name!r} is not of the form webhooks/{{id}}")
    return int(match.group(1))


def check_events(events: Sequence[str]) -> tuple[Event, ...]:
    """The requested events, in order, without repeats; none means all of them."""
    if not events:
        return ALL_EVENTS
    known = {str(e): e for e in ALL_EVENTS}
    chosen: list[Event] = []
    for i, name in enumerate(events):
        if name not in known:
            raise InvalidArgumentError(
                f"webhook.events[{i}]: {name[:64]!r} is not one of {', '.join(known)}"
            )
        if known[name] not in chosen:
            chosen.append(known[name])
    return tuple(chosen)


def check_threshold(webhook: pb.Webhook, events: Sequence[Event]) -> Threshold:
    count, fraction = webhook.failed_count, webhook.failed_fraction
    if count < 0:
        raise InvalidArgumentError(f"webhook.failed_count: must be 0 (unset) or more, got {count}")
    if math.isnan(fraction) or not 0 <= fraction <= 1:
        raise InvalidArgumentError(
            f"webhook.failed_fraction: must be from 0 (unset) to 1, got {fraction}"
        )
    threshold = Threshold(count or None, fraction or None)
    explicit = list(webhook.events)
    if Event.FAILURES_OVER_THRESHOLD in explicit and not threshold:
        raise InvalidArgumentError(
            "webhook.failed_count: experiment.failures_over_threshold needs failed_count "
            "or failed_fraction"
        )
    del events
    return threshold


def check_secret(secret: str) -> str:
    """The caller's secret, or a new random one."""
    if not secret:
        return secrets.token_urlsafe(32)
    if not MIN_SECRET_LENGTH <= len(secret) <= MAX_SECRET_LENGTH:
        raise InvalidArgumentError(
            f"webhook.secret: {MIN_SECRET_LENGTH} to {MAX_SECRET_LENGTH} characters"
        )
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in secret):
        raise InvalidArgumentError("webhook.secret: no control characters")
    return secret


def webhook_message(hook: StoredWebhook, *, secret: str = "") -> pb.Webhook:
    message = pb.Webhook(
        name=f"webhooks/{hook.id}",
        parent=experiment_name(hook.xid) if hook.xid is not None else f"users/{hook.owner}",
        url=hook.url if secret else masked_url(hook.url),
        secret=secret,
        events=[str(e) for e in hook.events],
        failed_count=hook.threshold.failed_count or 0,
        failed_fraction=hook.threshold.failed_fraction or 0.0,
        creator=hook.creator,
    )
    set_timestamp(message.create_time, hook.create_time)
    return message


def delivery_message(delivery: StoredDelivery) -> pb.Delivery:
    message = pb.Delivery(
        delivery_id=delivery.delivery_id,
        webhook=f"webhooks/{delivery.webhook_id}",
        event=str(delivery.event),
        status=delivery.status,
        attempts=delivery.attempts,
    )
    set_timestamp(message.create_time, delivery.create_time)
    if delivery.next_attempt is not None:
        set_timestamp(message.next_attempt_time, delivery.next_attempt)
    if delivery.finish_time is not None:
        set_timestamp(message.finish_time, delivery.finish_time)
    for attempt in delivery.log:
        item = message.log.add(
            attempt=attempt.attempt,
            http_status=attempt.http_status or 0,
            error=attempt.error,
            latency_ms=attempt.latency_ms,
            response=attempt.response,
        )
        set_timestamp(item.start_time, attempt.start_time)
    return message


def _page_token(token: str) -> int | None:
    if not token:
        return None
    if not token.isdigit() or len(token) > 18:
        raise InvalidArgumentError("page_token: not a token this RPC returned")
    return int(token)


# --- the service -------------------------------------------------------------------------


class NotificationService(notifications_pb2_grpc.NotificationServiceServicer):
    def __init__(self, store: Store, *, clock: Callable[[], datetime]) -> None:
        self._store = store
        self._clock = clock

    async def _require_writer(self, conn: Any, xid: int) -> None:
        require_writer_of(caller(), await fetch_experiment(conn, xid))

    async def CreateWebhook(self, request: pb.CreateWebhookRequest, context: Any) -> pb.Webhook:
        identity = caller()
        parent = parse_parent(request.parent, identity.email)
        hook = request.webhook
        url = validate_url(hook.url, "webhook.url")
        events = check_events(hook.events)
        threshold = check_threshold(hook, events)
        secret = check_secret(hook.secret)
        async with self._store.transaction() as conn:
            if isinstance(parent, int):
                await self._require_writer(conn, parent)
                existing = await list_webhooks(conn, xid=parent)
            else:
                existing = await list_webhooks(conn, owner=parent)
            if len(existing) >= MAX_WEBHOOKS_PER_PARENT:
                raise ResourceExhaustedError(
                    f"parent: {request.parent} has {MAX_WEBHOOKS_PER_PARENT} webhooks, "
                    "the most it may have; remove one first"
                )
            stored = await insert_webhook(
                conn,
                xid=parent if isinstance(parent, int) else None,
                owner=parent if isinstance(parent, str) else None,
                url=url, secret=secret, events=events, threshold=threshold,
                creator=identity.email, now=self._clock(),
            )  # fmt: skip
            name = f"webhooks/{stored.id}"
            await record_audit(
                conn, actor(), AuditEntry(AuditAction.CREATE_WEBHOOK, name, stored.xid,
                                          f"{request.parent} → {masked_url(url)}"),
                now=self._clock(),
            )  # fmt: skip
        return webhook_message(stored, secret=secret)

    async def ListWebhooks(
        self, request: pb.ListWebhooksRequest, context: Any
    ) -> pb.ListWebhooksResponse:
        parent = parse_parent(request.parent, caller().email)
        async with self._store.connection() as conn:
            if isinstance(parent, int):
                await fetch_experiment(conn, parent)  # NOT_FOUND for a missing one
                hooks = await list_webhooks(conn, xid=parent)
            else:
                hooks = await list_webhooks(conn, owner=parent)
        return pb.ListWebhooksResponse(webhooks=[webhook_message(h) for h in hooks])

    async def DeleteWebhook(self, request: pb.DeleteWebhookRequest, context: Any) -> Empty:
        webhook_id = parse_webhook_name(request.name)
        identity = caller()
        async with self._store.transaction() as conn:
            hook = await fetch_webhook(conn, webhook_id)
            if hook.xid is not None:
                await self._require_writer(conn, hook.xid)
            elif hook.owner != identity.email.lower() and not identity.is_admin:
                raise PermissionDeniedError(f"name: {request.name} is another user's webhook")
            await delete_webhook(conn, webhook_id)
            await record_audit(
                conn,
                actor(),
                AuditEntry(AuditAction.DELETE_WEBHOOK, request.name, hook.xid),
                now=self._clock(),
            )
        return Empty()

    async def ListDeliveries(
        self, request: pb.ListDeliveriesRequest, context: Any
    ) -> pb.ListDeliveriesResponse:
        xid = parse_experiment_name(request.parent, field="parent")
        if request.page_size < 0:
            raise InvalidArgumentError("page_size: must not be negative")
        size = min(request.page_size or _DEFAULT_PAGE, _MAX_PAGE)
        before = _page_token(request.page_token)
        async with self._store.connection() as conn:
            await fetch_experiment(conn, xid)
            found = await list_deliveries(conn, xid, limit=size + 1, before=before)
        page = found[:size]
        token = str(page[-1].id) if len(found) > size else ""
        return pb.ListDeliveriesResponse(
            deliveries=[delivery_message(d) for d in page], next_page_token=token
        )
