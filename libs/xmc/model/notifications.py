"""Which notifications a state change raises, and what they say (pure; docs/notifications.md).

The store calls :func:`plan_notifications` inside the transaction that changes an
experiment's rollups, with the experiment's counts before and after and the units that
became FAILED; the events it returns are queued in that same transaction, so a
notification exists iff its state change committed (decision 0044).

Three events:

* ``experiment.finished`` — the experiment went ACTIVE → INACTIVE;
* ``work_unit.failed`` — a unit became FAILED and the failure is final
  (:func:`failure_is_final`: the one place the retry decision of issue 28 plugs in);
* ``experiment.failures_over_threshold`` — the experiment's FAILED units went from under a
  webhook's threshold to at or over it: once per crossing, not once per failure.

The body a receiver gets is rendered from the event's facts by :func:`render_body`, the
same bytes on every attempt.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from xmc.model.states import ActiveState, WorkUnitState


class Event(enum.StrEnum):
    EXPERIMENT_FINISHED = "experiment.finished"
    WORK_UNIT_FAILED = "work_unit.failed"
    FAILURES_OVER_THRESHOLD = "experiment.failures_over_threshold"


ALL_EVENTS: tuple[Event, ...] = tuple(Event)


@dataclass(frozen=True)
class Threshold:
    """When an experiment has "too many" failures: FAILED units ≥ ``failed_count`` and
    FAILED / all units ≥ ``failed_fraction``, whichever are set (both: both must hold, so
    "10 %, but not before 5 failures" is one webhook)."""

    failed_count: int | None = None
    failed_fraction: float | None = None

    def __bool__(self) -> bool:
        return self.failed_count is not None or self.failed_fraction is not None

    def reached(self, failed: int, total: int) -> bool:
        if not self or failed == 0:
            return False
        if self.failed_count is not None and failed < self.failed_count:
            return False
        if self.failed_fraction is not None:
            return total > 0 and failed >= self.failed_fraction * total
        return True


@dataclass(frozen=True)
class Subscription:
    """A webhook as the planner needs it: its id, events and threshold."""

    webhook_id: int
    events: frozenset[Event]
    threshold: Threshold = Threshold()


@dataclass(frozen=True)
class UnitFailure:
    """A unit that became FAILED in this transaction."""

    wid: int
    eid: int
    #: Its retry policy retried it in the same transaction (docs/retries.md).
    retried: bool = False
    #: Why a policy did not retry it, e.g. "attempt 3 of 3: not retried (…)"; "" without
    #: a policy.
    retry_note: str = ""


def failure_is_final(failure: UnitFailure) -> bool:
    """Whether a FAILED unit stays failed: only then is ``work_unit.failed`` sent. The
    retry decision is made in the transaction of the FAILED write, so it is known here:
    a unit its policy retried is not final (its next attempt may still succeed)."""
    return not failure.retried


@dataclass(frozen=True)
class ExperimentChange:
    """One experiment's rollups around a transaction, as the store saw them."""

    xid: int
    title: str
    before: ActiveState
    after: ActiveState
    counts_before: Mapping[WorkUnitState, int]
    counts_after: Mapping[WorkUnitState, int]
    failures: Sequence[UnitFailure] = ()

    def may_notify(self) -> bool:
        """Cheap pre-check, before any webhook is looked up: without a unit newly FAILED
        or an experiment newly INACTIVE no event can be raised (a threshold is crossed
        upwards only by a failure: units are never deleted)."""
        return bool(self.failures) or self.finished()

    def finished(self) -> bool:
        return self.before == ActiveState.ACTIVE and self.after == ActiveState.INACTIVE


@dataclass(frozen=True)
class Notification:
    webhook_id: int
    event: Event
    facts: dict[str, Any]


def _counts(counts: Mapping[WorkUnitState, int]) -> dict[str, int]:
    return {state.name: n for state, n in sorted(counts.items()) if n}


def plan_notifications(
    change: ExperimentChange, subscriptions: Sequence[Subscription]
) -> list[Notification]:
    """The notifications ``change`` raises for each subscribed webhook (pure)."""
    base = {"xid": change.xid, "title": change.title}
    failed_before = change.counts_before.get(WorkUnitState.FAILED, 0)
    failed_after = change.counts_after.get(WorkUnitState.FAILED, 0)
    total_before = sum(change.counts_before.values())
    total_after = sum(change.counts_after.values())
    finals = [failure for failure in change.failures if failure_is_final(failure)]
    planned: list[Notification] = []
    for sub in subscriptions:
        if Event.WORK_UNIT_FAILED in sub.events:
            for failure in finals:
                facts = {**base, "wid": failure.wid, "eid": failure.eid}
                if failure.retry_note:
                    facts["retry"] = failure.retry_note
                planned.append(Notification(sub.webhook_id, Event.WORK_UNIT_FAILED, facts))
        if (
            Event.FAILURES_OVER_THRESHOLD in sub.events
            and sub.threshold.reached(failed_after, total_after)
            and not sub.threshold.reached(failed_before, total_before)
        ):
            facts = {
                **base,
                "failed": failed_after,
                "total": total_after,
                "failed_count": sub.threshold.failed_count,
                "failed_fraction": sub.threshold.failed_fraction,
            }
            planned.append(Notification(sub.webhook_id, Event.FAILURES_OVER_THRESHOLD, facts))
        if Event.EXPERIMENT_FINISHED in sub.events and change.finished():
            facts = {**base, "counts": _counts(change.counts_after), "total": total_after}
            planned.append(Notification(sub.webhook_id, Event.EXPERIMENT_FINISHED, facts))
    return planned


# --- the body ------------------------------------------------------------------------


def experiment_url(dashboard_url: str, xid: int, wid: int | None = None) -> str:
    """The dashboard page of the experiment (or unit); empty without a dashboard."""
    if not dashboard_url:
        return ""
    url = f"{dashboard_url.rstrip('/')}/experiments/{xid}"
    return url if wid is None else f"{url}/workUnits/{wid}"


def _label(facts: Mapping[str, Any]) -> str:
    title = str(facts.get("title") or "")
    return f"Experiment {facts['xid']}" + (f" “{title}”" if title else "")


def _summary(counts: Mapping[str, int]) -> str:
    words = {"COMPLETED": "completed", "FAILED": "failed", "STOPPED": "stopped"}
    parts = [f"{counts[state]} {word}" for state, word in words.items() if counts.get(state)]
    return ", ".join(parts) or "no work units"


def event_text(event: Event, facts: Mapping[str, Any]) -> str:
    """One human line, what Slack shows (pure)."""
    label = _label(facts)
    if event == Event.EXPERIMENT_FINISHED:
        total = facts.get("total", 0)
        return f"{label} finished: {_summary(facts.get('counts', {}))} ({total} work units)."
    if event == Event.WORK_UNIT_FAILED:
        text = f"{label}: work unit {facts['wid']} failed (execution {facts['eid']})"
        return f"{text}; {facts['retry']}." if facts.get("retry") else f"{text}."
    fraction = facts["failed"] / facts["total"] if facts.get("total") else 0.0
    return (
        f"{label}: {facts['failed']} of {facts['total']} work units failed "
        f"({fraction:.0%}), over the webhook's threshold."
    )


def render_body(
    *, delivery_id: str, event: Event, facts: Mapping[str, Any], dashboard_url: str, time: str
) -> bytes:
    """The JSON a receiver gets: Slack's ``text`` plus the structured fields (pure: the
    same arguments give the same bytes, so every attempt of a delivery is identical)."""
    url = experiment_url(dashboard_url, int(facts["xid"]), facts.get("wid"))
    text = event_text(event, facts)
    body: dict[str, Any] = {
        "text": f"{text} {url}" if url else text,
        "event": str(event),
        "delivery_id": delivery_id,
        "time": time,
        "experiment": {"name": f"experiments/{facts['xid']}", "title": facts.get("title", "")},
    }
    if "wid" in facts:
        body["work_unit"] = {
            "name": f"experiments/{facts['xid']}/workUnits/{facts['wid']}",
            "execution_id": facts["eid"],
            "state": "FAILED",
        }
    if "retry" in facts:
        body["work_unit"]["retry"] = facts["retry"]
    for key in ("counts", "total", "failed", "failed_count", "failed_fraction"):
        if key in facts:
            body[key] = facts[key]
    if url:
        body["url"] = url
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
