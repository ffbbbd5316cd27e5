"""How the Reconciler sends one UpdateBatcher batch to the ESS: the batcher's ``send``.

EssUnavailable propagates (the batcher puts the items back for the next flush); INTERNAL
and UNKNOWN are retried here a few times with backoff. A batch the ESS refuses for what it
is (INVALID_ARGUMENT, say) is split in halves until the refused items are alone, so one
bad observation costs only itself; those are dropped, loudly and counted. A batch refused
because a newer leader writes (``EssFenced``, decision 0054) is dropped whole.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import structlog

from reconciler import metrics
from reconciler.ess_client import EssClient, EssFenced, EssRejected, is_verdict, retry_rejected
from reconciler.observation import Observation
from xmc.retry import sleep_or_stop

log = structlog.get_logger()


async def send(
    ess: EssClient,
    observations: Sequence[Observation],
    *,
    aborted: asyncio.Event,
    leading: Callable[[], bool],
) -> None:
    """One batch; retries end when ``aborted`` is set or this replica stops ``leading``."""
    error = await _send_retrying(ess, observations, aborted=aborted, leading=leading)
    if error is None:
        return
    if isinstance(error, EssFenced):  # a newer leader writes now: none of it may land
        log.warning("observations of a deposed leader refused; dropped", error=str(error),
                    items=len(observations))  # fmt: skip
        metrics.UPDATES_DROPPED_NOT_LEADING_TOTAL.inc(len(observations))
        return
    if len(observations) > 1 and is_verdict(error):
        half = len(observations) // 2
        await send(ess, observations[:half], aborted=aborted, leading=leading)
        await send(ess, observations[half:], aborted=aborted, leading=leading)
        return
    first = observations[0]
    log.error("observations rejected; dropped", error=str(error), items=len(observations),
              xid=first.xid, wid=first.wid, eid=first.eid)  # fmt: skip
    metrics.OBSERVATIONS_DROPPED_TOTAL.labels(error.code.name).inc(len(observations))


async def _send_retrying(
    ess: EssClient,
    observations: Sequence[Observation],
    *,
    aborted: asyncio.Event,
    leading: Callable[[], bool],
) -> EssRejected | None:
    """Send, retrying INTERNAL/UNKNOWN with backoff; the final refusal, if any."""
    attempt = 0
    while True:
        attempt += 1
        try:
            await ess.update(observations, writer="reconciler")
            return None
        except EssRejected as error:
            delay = retry_rejected(error, attempt)
            if delay is None:
                return error
            log.warning("observations refused; retrying", error=str(error),
                        attempt=attempt, delay=delay)  # fmt: skip
            if await sleep_or_stop(aborted, delay) or not leading():
                return error
