"""The ESS's side of the fenced Reconciler leader (decision 0054): admit or refuse one
``UpdateWorkUnitExecutions`` call by the generation in its metadata.

Called first inside the write's transaction (``xmc.store.fences``), so a refused call
writes nothing and the verdict holds for every ESS replica. A refusal is
FAILED_PRECONDITION naming both generations: retrying the same call cannot succeed, and
the Reconciler reads the newest generation from it (``xmc.model.fence.parse_refusal``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import structlog
from prometheus_client import Counter

from xmc.errors import FailedPreconditionError
from xmc.model.fence import Fence, FenceDecision, fence_of, refusal_message
from xmc.store.transactions import Connection, check_fence

log = structlog.get_logger()

FENCE_CHECKS = Counter(
    "xmc_ess_leader_fence_total",
    "UpdateWorkUnitExecutions calls by what the leader fence decided (refuse: a deposed "
    "leader's write; unfenced: no generation in the metadata)",
    ["decision"],
)


def fence_of_call(context: Any) -> Fence | None:
    """The call's token, read before the transaction (a malformed one is
    INVALID_ARGUMENT without touching the database)."""
    metadata: Iterable[tuple[str, str | bytes]] = context.invocation_metadata() or ()
    return fence_of(metadata)


async def admit(conn: Connection, fence: Fence | None, *, writer: str, now: datetime) -> None:
    """Raise FailedPreconditionError for a deposed leader's write; count every verdict."""
    if fence is None:
        FENCE_CHECKS.labels(FenceDecision.UNFENCED.value).inc()
        return
    decision, newest = await check_fence(conn, fence, now=now)
    FENCE_CHECKS.labels(decision.value).inc()
    if decision is FenceDecision.ADVANCE:
        log.info("leader fence moved up", lease=fence.lease, generation=fence.generation,
                 writer=writer)  # fmt: skip
    elif decision is FenceDecision.REFUSE:
        log.warning("write of a deposed leader refused", lease=fence.lease,
                    generation=fence.generation, newest=newest, writer=writer)  # fmt: skip
        raise FailedPreconditionError(refusal_message(fence, newest))
