"""Orphan collection (SPEC §8.6), the leader's periodic pass: a JobSet no execution wants
any more — of an old execution, or of a finished or deleted work unit — is deleted with a
UID precondition, so a newer JobSet of the same name is never touched. The decision is
pure (``observe.decide_orphan``); this shell reads the ESS and deletes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import structlog

from reconciler import metrics
from reconciler.ess_client import EssClient, EssRejected, EssUnavailable
from reconciler.observe import decide_orphan, work_unit_ids
from xmc.kube import JOBSETS, KubeError, KubeFailure
from xmc.kube_client import KubeClient

log = structlog.get_logger()

#: An orphan delete that met no JobSet, or a newer one of the same name: nothing to do.
_NOT_THE_ORPHAN = frozenset({KubeFailure.NOT_FOUND, KubeFailure.CONFLICT})


async def collect_orphans(
    kube: KubeClient, ess: EssClient, namespace: str, jobsets: Iterable[dict[str, Any]]
) -> int:
    """Delete the orphans among ``jobsets`` (the cache); how many were deleted. An ESS
    that cannot answer ends the pass (the next one tries again)."""
    deleted = 0
    for jobset in jobsets:
        meta = jobset["metadata"]
        ids = work_unit_ids(jobset)
        if ids is None or meta.get("deletionTimestamp"):
            continue
        try:
            snapshot = await ess.work_unit(ids[0], ids[1])
        except (EssUnavailable, EssRejected) as error:
            log.warning("orphan check skipped", error=str(error))
            return deleted
        decision = decide_orphan(ids, snapshot)
        if not decision.orphan:
            continue
        try:
            await kube.delete(
                JOBSETS, namespace, meta["name"], uid=meta["uid"], propagation_policy="Background"
            )
        except KubeError as error:
            if error.failure not in _NOT_THE_ORPHAN:
                # The next sweep tries again; the other orphans go now.
                log.warning("orphan delete failed", jobset=meta["name"], error=str(error))
            continue
        deleted += 1
        metrics.ORPHANS_DELETED_TOTAL.inc()
        log.info("orphan deleted", jobset=meta["name"], reason=decision.reason.value)
    return deleted
