"""The watcher's pure half: its settings, what a failed list or watch means to it
(:func:`classify`, one table test in tests/unit/test_kube_errors.py), and the diff a
re-list delivers. The I/O is ``reconciler.watch``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from xmc.kube import KubeError, KubeFailure
from xmc.retry import Backoffs

Obj = dict[str, Any]
ChangeKind = Literal["ADDED", "MODIFIED", "DELETED", "RESYNC"]


#: Seconds after consecutive failures of a list or watch (the last repeats).
WATCH_BACKOFFS: Final = Backoffs((0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0))


@dataclass(frozen=True)
class WatchSettings:
    timeout_seconds: int = 60
    """``timeoutSeconds`` of each watch request; the stream is then resumed."""
    resync_seconds: float | None = 300.0
    """Seconds between full re-deliveries of the cache as RESYNC; None = never."""
    backoffs: Backoffs = WATCH_BACKOFFS
    """Delays after consecutive failures; the last one repeats."""
    max_attempts: int | None = None
    """Consecutive failures after which :meth:`ResourceWatcher.run` raises; None = retry
    forever (the watch is the Reconciler's only view of the cluster)."""
    page_size: int = 500
    """``limit`` of each list page."""
    freshness_seconds: float | None = 10.0
    """Seconds between checks that the server has reached the cache's resourceVersion;
    None = never. A watch from a version the server never reached is *not* an error
    upstream (the apiserver's cacher just waits for later events), so a server whose
    history went backwards is found only by asking: a one-item list ``NotOlderThan`` our
    version, which the watch cache answers "too large" after 3 s."""


class WatchFailed(Exception):
    """The watcher gave up: a request the server will never accept, or too many failures."""


class Failure(enum.Enum):
    """Also the ``reason`` label of ``xmc_reconciler_relists_total`` (for the re-lists)."""

    EXPIRED = "expired"
    """410: the resourceVersion is older than the server's history — re-list."""
    TOO_LARGE = "too_large"
    """The server has never reached the resourceVersion (its history went backwards) —
    re-list from a consistent read."""
    RETRY = "retry"
    """Back off, then resume from the last resourceVersion."""
    FATAL = "fatal"
    """Our request is wrong (bad selector, bad path); retrying cannot help."""


#: What the watcher does per shared failure; any failure not listed is retried.
_BY_FAILURE: Final[Mapping[KubeFailure, Failure]] = {
    KubeFailure.EXPIRED: Failure.EXPIRED,
    KubeFailure.INVALID: Failure.FATAL,
}


#: Failures after which the cache is known stale: only a full list repairs it.
RELISTS: Final = frozenset({Failure.EXPIRED, Failure.TOO_LARGE})


def classify(error: BaseException) -> Failure:
    """The one place that decides what a failed list or watch means to the watcher; an
    error that is not a Kubernetes call's (a malformed object, a bug) is retried."""
    if isinstance(error, KubeError):
        if error.resource_version_too_large:
            return Failure.TOO_LARGE
        return _BY_FAILURE.get(error.failure, Failure.RETRY)
    return Failure.RETRY


def name_of(obj: Obj) -> str:
    return str(obj["metadata"]["name"])


def resource_version_of(obj: Obj) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


def diff(old: Mapping[str, Obj], new: Mapping[str, Obj]) -> list[tuple[ChangeKind, Obj]]:
    """What changed between two full states, as the events a watch would have sent
    (DELETED carries the last known object). Pure: the re-list path after a 410."""
    changes: list[tuple[ChangeKind, Obj]] = []
    for name, obj in old.items():
        if name not in new:
            changes.append(("DELETED", obj))
    for name, obj in new.items():
        before = old.get(name)
        if before is None:
            changes.append(("ADDED", obj))
        elif resource_version_of(before) != resource_version_of(obj):
            changes.append(("MODIFIED", obj))
    return changes
