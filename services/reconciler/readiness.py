"""What ``/readyz`` says about a Reconciler (pure): synced watches, a working election.

Ready means this replica can do its job now: every watch has listed once, is connected
(no failure since its last success) and owes no re-list (a cache the server said is stale —
410, or a resourceVersion the server has never reached — is not "synced" until a fresh list
has replaced it), and, with leader election, the Lease can be read and
written — whether this replica leads or stands by is reported, not judged, because a
standby is exactly as ready as the leader to take over.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from xmc.health import Check


@dataclass(frozen=True)
class WatchState:
    what: str
    #: The first list is done.
    listed: bool
    failures: int
    #: Why the cache owes a full list (``watch.Failure`` value), None when it does not.
    relisting: str | None = None


@dataclass(frozen=True)
class ElectionState:
    leading: bool
    failures: int


def decide_readiness(watches: Sequence[WatchState], election: ElectionState | None) -> list[Check]:
    """One check per watch, plus one for the election when there is one."""
    checks = [_watch_check(watch) for watch in watches]
    if election is None:
        checks.append(Check("leader election", True, "off: a single replica, always writing"))
    elif election.failures:
        checks.append(
            Check("leader election", False, f"{election.failures} Lease calls failed in a row")
        )
    else:
        role = "leading" if election.leading else "standing by"
        checks.append(Check("leader election", True, role))
    return checks


def _watch_check(watch: WatchState) -> Check:
    name = f"watch {watch.what}"
    if not watch.listed:
        return Check(name, False, "first list not done yet")
    if watch.failures:
        return Check(name, False, f"reconnecting: {watch.failures} failures in a row")
    if watch.relisting is not None:
        return Check(name, False, f"re-listing ({watch.relisting}): the cache is stale")
    return Check(name, True, "synced")
