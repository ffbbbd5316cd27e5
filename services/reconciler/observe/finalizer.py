"""The finalizer bypass (SPEC §8.4) as decisions: hold a JobSet's deletion until its
terminal state is written, but never forever. The I/O shell is ``reconciler.finalizer``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from reconciler.observation import Observation
from reconciler.observe.jobset import observe_jobset
from xmc.kjson import as_sequence, metadata_of
from xmc.labels import FINALIZER
from xmc.timestamps import as_utc, parse_rfc3339
from xmc_api.cloud.xmanager.v1.structured_message_pb2 import StructuredMessage
from xmc_api.internal.v1.executions_pb2 import RunFailure

DEFAULT_MAX_STOPPED_WRITE_RETRY_AGE: Final = timedelta(minutes=10)


class FinalizerAction(enum.StrEnum):
    """What to do with a JobSet on the deletion path; also the metric label."""

    #: Not being deleted, or the XMC finalizer is not (or no longer) on it.
    NOT_OURS = "not_ours"
    #: Write the terminal state synchronously, then remove the finalizer.
    WRITE_THEN_REMOVE = "write_then_remove"
    #: The previous write failed and the retry window is still open: write again (backoff).
    RETRY_WRITE = "retry_write"
    #: Give up on the write and remove the finalizer; log at ERROR and count.
    REMOVE_ANYWAY = "remove_anyway"


@dataclass(frozen=True)
class FinalizerDecision:
    action: FinalizerAction
    #: The terminal-state write (R1) for WRITE_THEN_REMOVE and RETRY_WRITE, else None.
    observation: Observation | None
    reason: str


def decide_finalizer(
    jobset: Mapping[str, Any],
    *,
    now: datetime,
    last_write_failed: bool,
    max_retry_age: timedelta = DEFAULT_MAX_STOPPED_WRITE_RETRY_AGE,
    failure: StructuredMessage | None = None,
    facts: RunFailure | None = None,
) -> FinalizerDecision:
    """Hold the deletion until the terminal state is written, but never forever.

    The write targets the eid from the JobSet's label, so an old execution's JobSet is
    fenced off from a newer execution by the store (§5.1). A JobSet whose labels name no
    execution can never be written for, so its finalizer goes at once. ``failure`` is
    the reason a FAILED JobSet failed and ``facts`` the same as data (see
    :func:`observe_jobset`).
    """
    metadata = metadata_of(jobset)
    deletion = metadata.get("deletionTimestamp")
    if not deletion or FINALIZER not in as_sequence(metadata.get("finalizers")):
        return FinalizerDecision(FinalizerAction.NOT_OURS, None, "no XMC finalizer to release")
    observation = observe_jobset(jobset, observed_at=now, failure=failure, facts=facts)
    if observation is None:
        return FinalizerDecision(
            FinalizerAction.REMOVE_ANYWAY, None, "no valid XMC labels: nothing to write"
        )
    if not last_write_failed:
        return FinalizerDecision(
            FinalizerAction.WRITE_THEN_REMOVE, observation, "deleting: write the terminal state"
        )
    deleted_at = parse_rfc3339(deletion)
    if deleted_at is None or as_utc(now) - deleted_at >= max_retry_age:
        return FinalizerDecision(
            FinalizerAction.REMOVE_ANYWAY,
            None,
            f"terminal-state write still failing {max_retry_age} after deletion",
        )
    return FinalizerDecision(
        FinalizerAction.RETRY_WRITE, observation, "terminal-state write failed: retry"
    )


def finalizer_removal_patch(jobset: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch dropping only XMC's finalizer.

    A merge patch replaces the whole list, so ``resourceVersion`` rides along as a
    precondition: if another controller changed the finalizers meanwhile, the patch gets
    409 Conflict instead of erasing theirs.
    """
    metadata = metadata_of(jobset)
    kept = [f for f in as_sequence(metadata.get("finalizers")) if f != FINALIZER]
    patch: dict[str, Any] = {"finalizers": kept}
    resource_version = metadata.get("resourceVersion")
    if resource_version:
        patch["resourceVersion"] = resource_version
    return {"metadata": patch}
