"""What the outbox relay does with a task it has published (pure; SPEC §6, docs/outbox.md).

Once a task is on ``xmc-tasks-stream`` the relay keeps checking it until the Actuator
records how it ended. Each check looks up the task's stream entry and files it under one of
four states; only two of them mean the task can no longer arrive, and only those are
re-driven (published again, with a fresh token):

* ``GONE`` — the entry is not in the stream: Redis restarted without persistence, the
  stream was deleted or trimmed;
* ``SETTLED`` — the consumer group acknowledged it but nobody finished it: it was
  refused (an expired token, a signing key the Actuator does not share).

``WAITING`` (not delivered yet: a backlog, or no Actuator running) and ``IN_FLIGHT`` (in the
group's pending list: being handled, or waiting for ``XAUTOCLAIM`` after its consumer
died) are checked again later, each time after as long as the task has already waited
(doubling), up to ``max_check_seconds``. A re-drive is harmless: the Actuator refuses
an entry whose task is already finished, and its guards make a second run a no-op. A task
re-driven ``max_publishes`` times is abandoned: its Operation is closed with an error and
a create or restart fails its execution, so nothing waits for it forever.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from xmc.retry import Backoffs

#: Seconds after consecutive failed relay passes; the last repeats.
RELAY_ERROR_BACKOFFS: Final = Backoffs((0.2, 0.5, 1.0, 2.0, 5.0))


@dataclass(frozen=True)
class RelaySettings:
    batch_size: int = 500
    """Outbox rows one pass publishes or checks."""
    poll_seconds: float = 0.5
    """Seconds between passes when no commit of this process wakes the relay (other
    replicas' commits, checks that came due)."""
    first_check_seconds: float = 5.0
    """Seconds after a publish before the relay first checks that the entry is alive."""
    max_check_seconds: float = 300.0
    """Longest interval between two checks of one published task."""
    max_publishes: int = 10
    """Publishes of one task (the first included) before the relay abandons it."""
    redis_restart_check_seconds: float = 1.0
    """How often the relay compares the run id of the server holding the stream with
    the one stamped in its data, to notice a restart or a failover (every published task
    is then checked at once: ``stream_data_suspect``)."""
    trim_seconds: float = 10.0
    """How often the relay trims ``xmc-tasks-stream`` of the entries no task needs any
    more (``trim_point``); without it the stream, and Redis's memory, grow with every
    task ever published."""
    error_backoff: Backoffs = RELAY_ERROR_BACKOFFS
    """Seconds to wait after consecutive failed passes (Redis or Postgres down)."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.max_publishes < 1:
            raise ValueError("batch_size and max_publishes must be at least 1")
        if not 0 < self.first_check_seconds <= self.max_check_seconds:
            raise ValueError("need 0 < first_check_seconds <= max_check_seconds")
        if self.trim_seconds < 0:
            raise ValueError("trim_seconds must be >= 0")


class EntryState(enum.StrEnum):
    """Where a published task's stream entry is; also a metric label."""

    GONE = "gone"
    WAITING = "waiting"
    IN_FLIGHT = "in_flight"
    SETTLED = "settled"


def parse_entry_id(entry_id: str) -> tuple[int, int]:
    """``"1700000000000-3"`` → ``(1700000000000, 3)``: stream ids order as such pairs."""
    millis, _, sequence = entry_id.partition("-")
    return int(millis), int(sequence or 0)


def classify_entry(
    entry_id: str, *, exists: bool, pending: bool, last_delivered: str | None
) -> EntryState:
    """File a published entry from what Redis said about it. ``last_delivered`` is the
    consumer group's last-delivered id (None: no group yet, nothing delivered)."""
    if not exists:
        return EntryState.GONE
    if pending:
        return EntryState.IN_FLIGHT
    if last_delivered is None or parse_entry_id(entry_id) > parse_entry_id(last_delivered):
        return EntryState.WAITING
    return EntryState.SETTLED


class RelayAction(enum.StrEnum):
    PUBLISH = "publish"
    CHECK_LATER = "check_later"
    ABANDON = "abandon"


@dataclass(frozen=True)
class RelayDecision:
    action: RelayAction
    reason: str
    #: When to look again (CHECK_LATER, and the first check after a PUBLISH).
    check_at: datetime | None = None


def check_delay(waited: timedelta, settings: RelaySettings) -> timedelta:
    """Look again after as long as the task has waited, within the configured bounds."""
    seconds = min(max(waited.total_seconds(), settings.first_check_seconds),
                  settings.max_check_seconds)  # fmt: skip
    return timedelta(seconds=seconds)


def decide_pending(*, now: datetime, settings: RelaySettings) -> RelayDecision:
    """A task not on the stream yet is published."""
    return RelayDecision(
        RelayAction.PUBLISH,
        "committed, not yet published",
        now + timedelta(seconds=settings.first_check_seconds),
    )


def decide_published(
    entry: EntryState,
    *,
    publish_count: int,
    published_time: datetime,
    now: datetime,
    settings: RelaySettings,
) -> RelayDecision:
    """A published, unfinished task: wait, re-drive, or give up."""
    if entry in (EntryState.WAITING, EntryState.IN_FLIGHT):
        return RelayDecision(
            RelayAction.CHECK_LATER,
            f"entry {entry.value}",
            now + check_delay(now - published_time, settings),
        )
    lost = "the stream lost it" if entry is EntryState.GONE else "it was refused unfinished"
    if publish_count >= settings.max_publishes:
        return RelayDecision(
            RelayAction.ABANDON, f"{lost}; published {publish_count} times, giving up"
        )
    return RelayDecision(
        RelayAction.PUBLISH,
        f"{lost}; re-drive #{publish_count}",
        now + timedelta(seconds=settings.first_check_seconds),
    )


def stream_data_suspect(served_by: str | None, run_id: str) -> bool:
    """Whether the stream's data may lack entries the relay published, so every
    published task must be checked now rather than on its schedule (up to
    ``max_check_seconds`` away).

    ``served_by`` is the run id stamped in Redis (``StreamNames.served_by_key``) after
    the last such check; ``run_id`` is the server's that holds the stream now. The stamp
    travels with the data: a replica promoted by Sentinel or by Redis Cluster holds its
    old master's stamp, under a run id of its own — and whatever the master had not yet
    replicated is missing; a restart without persistence loses the stamp (None) with
    everything else; a restart from an older snapshot keeps an old stamp under a new run
    id. Only a stamp equal to the serving node's own run id vouches that this node has
    held every entry since the last check. A relay process that starts, restarts or
    takes over the relay lock learns the same from the stamp, which no memory of its
    own could tell it (an ESS killed during the failover).
    """
    return served_by != run_id


def trim_point(oldest_unfinished: str | None, newest: str | None) -> str | None:
    """The stream id below which ``xmc-tasks-stream`` may be trimmed (``XTRIM MINID``), or
    None to leave it as it is. Read under the relay lock, so no relay is between an XADD
    and its commit: an entry is then either a published task's or left by a pass that
    crashed after its XADD, whose next pass adopts it.

    - ``oldest_unfinished``: the oldest entry of a published task the Actuator has not
      finished. Everything older belongs to finished tasks: trimmed, nothing is lost.
    - Otherwise ``newest``, the stream's last entry: every task is finished, so only the
      last entry is kept (Redis also keeps the last id a stream generated).

    An entry trimmed all the same (a crashed pass's, adopted later) is what a check files
    as GONE, and the relay re-drives it: trimming can cost a publish, never a task.
    """
    return oldest_unfinished if oldest_unfinished is not None else newest
