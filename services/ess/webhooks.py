"""The webhook delivery worker (docs/notifications.md, decision 0044): ``webhook_deliveries``
→ the receivers' URLs.

A background task of every ESS. Each turn claims as many due deliveries as it has free
slots (``claim_due_deliveries``: ``SKIP LOCKED`` and a lease, so two replicas never send
one row at once) and sends each in a task of its own, outside any transaction:

* the body is rendered from the delivery's stored facts (the same bytes every attempt),
  signed (``X-XMC-Signature`` over the timestamp and the body) and POSTed with the stable
  ``X-XMC-Delivery`` id receivers dedupe on;
* one attempt is cut off at ``timeout_seconds``; ``concurrency`` attempts run at once, so
  a receiver that never answers holds one slot and delays no other webhook;
* the attempt is logged (time, status or error, latency, the answer's first bytes) and
  the delivery moves on: delivered, failed for good, or due again after an exponential
  backoff with jitter (``xmc.model.webhooks.decide``).

A crash between the POST and the record leaves the row claimed; its lease runs out and it
is sent again: at least once. A failed turn (Postgres down) is logged and retried; the
loop never ends on one.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from datetime import datetime

import aiohttp
import structlog
from prometheus_client import Counter

from xmc.model.notifications import render_body
from xmc.model.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    RESPONSE_SNIPPET_BYTES,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    AttemptOutcome,
    Verdict,
    WebhookSettings,
    decide,
    masked_url,
    retry_after_seconds,
    signature,
)
from xmc.retry import Backoffs, sleep_or_stop
from xmc.store.transactions import (
    DueDelivery,
    Store,
    claim_due_deliveries,
    delete_expired_deliveries,
    record_attempt,
)
from xmc.supervise import LOOP_ITERATION_FAILURES_TOTAL

log = structlog.get_logger()

WEBHOOK_ATTEMPTS = Counter(
    "xmc_ess_webhook_attempts_total",
    "Webhook delivery attempts, by what became of the delivery",
    ["verdict"],
)
_ERROR_BACKOFF = Backoffs((0.2, 0.5, 1.0, 2.0, 5.0))
USER_AGENT = "xmc-webhooks/1"
#: Seconds between two prunes of finished deliveries (``DELIVERY_RETENTION``).
PRUNE_SECONDS = 3600.0


class WebhookWorker:
    """Sends queued webhook deliveries until stopped."""

    def __init__(
        self,
        store: Store,
        *,
        settings: WebhookSettings,
        dashboard_url: str = "",
        clock: Callable[[], datetime],
        jitter: Callable[[], float] = random.random,
    ) -> None:
        self._store = store
        self._settings = settings
        self._dashboard_url = dashboard_url
        self._clock = clock
        self._jitter = jitter
        self._wake = asyncio.Event()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._pruned_at = -PRUNE_SECONDS

    def wake(self) -> None:
        """Look for due deliveries now (a slot freed up)."""
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        settings = self._settings
        timeout = aiohttp.ClientTimeout(total=settings.timeout_seconds)
        connector = aiohttp.TCPConnector(limit=settings.concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            failures = 0
            try:
                while not stop.is_set():
                    self._wake.clear()
                    try:
                        await self._prune()
                        claimed = await self.claim()
                        failures = 0
                    except Exception:
                        failures += 1
                        LOOP_ITERATION_FAILURES_TOTAL.labels("webhook-worker").inc()
                        log.exception("webhook claim failed; retrying", failures=failures)
                        await sleep_or_stop(stop, _ERROR_BACKOFF.after(failures))
                        continue
                    for due in claimed:
                        task = asyncio.create_task(self._deliver(session, due))
                        self._in_flight.add(task)
                        task.add_done_callback(self._settled)
                    free = settings.concurrency - len(self._in_flight)
                    if claimed and free > 0:
                        continue  # there may be more due
                    await self._wait(stop)
            finally:
                for task in self._in_flight:
                    task.cancel()
                await asyncio.gather(*self._in_flight, return_exceptions=True)

    async def _wait(self, stop: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self._wake.wait())]
        try:
            await asyncio.wait(
                waits, timeout=self._settings.poll_seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for waiter in waits:
                waiter.cancel()

    async def _prune(self) -> None:
        """Drop old finished deliveries, hourly (the janitor's job, done here so the
        notifications stay in their own module)."""
        if time.monotonic() - self._pruned_at < PRUNE_SECONDS:
            return
        async with self._store.transaction() as conn:
            dropped = await delete_expired_deliveries(conn, now=self._clock())
        self._pruned_at = time.monotonic()
        if dropped:
            log.info("expired webhook deliveries dropped", deliveries=dropped)

    def _settled(self, task: asyncio.Task[None]) -> None:
        self._in_flight.discard(task)
        self._wake.set()

    async def claim(self) -> list[DueDelivery]:
        free = self._settings.concurrency - len(self._in_flight)
        if free <= 0:
            return []
        async with self._store.transaction() as conn:
            return await claim_due_deliveries(
                conn, now=self._clock(), limit=free, lease=self._settings.lease
            )

    async def _deliver(self, session: aiohttp.ClientSession, due: DueDelivery) -> None:
        try:
            await self.deliver(session, due)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The row stays claimed; its lease runs out and it is tried again.
            log.exception("webhook delivery failed", delivery=due.delivery_id)

    async def deliver(self, session: aiohttp.ClientSession, due: DueDelivery) -> Verdict:
        """One attempt of ``due``, logged and decided."""
        body = render_body(
            delivery_id=due.delivery_id,
            event=due.event,
            facts=due.facts,
            dashboard_url=self._dashboard_url,
            time=due.create_time.isoformat(),
        )
        start = self._clock()
        timestamp = int(start.timestamp())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            DELIVERY_HEADER: due.delivery_id,
            EVENT_HEADER: str(due.event),
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: signature(due.secret, timestamp, body),
        }
        began = time.monotonic()
        outcome, answer = await self._post(session, due.url, body, headers)
        latency_ms = int((time.monotonic() - began) * 1000)
        now = self._clock()
        decision = decide(
            outcome,
            attempt=due.attempt,
            created=due.create_time,
            now=now,
            settings=self._settings,
            jitter=self._jitter,
        )
        async with self._store.transaction() as conn:
            kept = await record_attempt(
                conn, due, outcome, decision,
                start=start, latency_ms=latency_ms, response=answer, now=now,
            )  # fmt: skip
        WEBHOOK_ATTEMPTS.labels(str(decision.verdict)).inc()
        log.info(
            "webhook attempt",
            delivery=due.delivery_id,
            url=masked_url(due.url),
            attempt=due.attempt,
            http_status=outcome.http_status,
            error=outcome.error,
            verdict=str(decision.verdict),
            reason=decision.reason,
            claim_kept=kept,
        )
        return decision.verdict

    async def _post(
        self, session: aiohttp.ClientSession, url: str, body: bytes, headers: dict[str, str]
    ) -> tuple[AttemptOutcome, str]:
        limit = self._settings.timeout_seconds
        try:
            async with asyncio.timeout(limit):
                async with session.post(
                    url, data=body, headers=headers, allow_redirects=False
                ) as response:
                    answer = await _read_snippet(response)
                    retry_after = retry_after_seconds(response.headers.get("Retry-After"))
                    return AttemptOutcome(response.status, retry_after=retry_after), answer
        except TimeoutError:
            return AttemptOutcome(None, f"timeout after {limit:g}s"), ""
        except aiohttp.ClientError as error:
            return AttemptOutcome(None, _error_text(error)), ""


async def _read_snippet(response: aiohttp.ClientResponse) -> str:
    """The answer's first bytes, as text Postgres can hold."""
    data = b""
    with contextlib.suppress(aiohttp.ClientError):
        while len(data) < RESPONSE_SNIPPET_BYTES:
            chunk = await response.content.read(RESPONSE_SNIPPET_BYTES - len(data))
            if not chunk:
                break
            data += chunk
    return data.decode("utf-8", "replace").replace("\x00", "\\x00")


def _error_text(error: BaseException) -> str:
    """The error without the URL (a Slack webhook's path is its credential)."""
    if isinstance(error, aiohttp.ClientConnectorError):
        if isinstance(error.os_error, ConnectionRefusedError):
            return "cannot connect: connection refused"
        return f"cannot connect: {error.os_error.strerror or type(error.os_error).__name__}"
    return f"{type(error).__name__}"[:200]
