"""The leader fence's storage (decision 0054): one row per Lease, the newest generation
whose writes the ESS accepted.

Checked inside the transaction of the write it guards, in two steps. A plain read first:
a write of the current term (nearly all of them) only takes the row ``FOR SHARE``, so
the leader's concurrent batches do not queue behind each other. The first write of a
newer term moves the row up (an exclusive row lock, once per term) before taking it
``FOR SHARE``. Why this is enough across ESS replicas: a stale write that read the old
generation holds its share lock until it commits, and the newer term's upsert waits for
it; so every write of an older term commits before the first write of the newer one, and
none after. The upsert never moves the row down (``WHERE`` older), so two first writes of
one term racing each other leave it where it should be.
"""

from __future__ import annotations

from datetime import datetime

from xmc.model.fence import Fence, FenceDecision, decide_fence
from xmc.store.connection import Connection


async def check_fence(
    conn: Connection, fence: Fence, *, now: datetime
) -> tuple[FenceDecision, int]:
    """ACCEPT, ADVANCE (the row moved up to ``fence``) or REFUSE, and the newest generation;
    the row stays locked until ``conn``'s transaction ends."""
    stored: int | None = await conn.fetchval(
        "SELECT generation FROM leader_fences WHERE lease = $1", fence.lease
    )
    first = decide_fence(fence.generation, stored)
    if first is FenceDecision.ADVANCE:
        await conn.execute(
            """
            INSERT INTO leader_fences (lease, generation, update_time) VALUES ($1, $2, $3)
            ON CONFLICT (lease) DO UPDATE
               SET generation = EXCLUDED.generation, update_time = EXCLUDED.update_time
             WHERE leader_fences.generation < EXCLUDED.generation
            """,
            fence.lease, fence.generation, now,
        )  # fmt: skip
    newest: int = await conn.fetchval(
        "SELECT generation FROM leader_fences WHERE lease = $1 FOR SHARE", fence.lease
    )
    decision = decide_fence(fence.generation, newest)
    if decision is FenceDecision.ACCEPT and first is FenceDecision.ADVANCE:
        decision = FenceDecision.ADVANCE
    return decision, newest
