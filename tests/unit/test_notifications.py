"""The pure pieces of notifications (docs/notifications.md): which events a rollup change
raises, the threshold's crossing, the body and its text, the signature, the retry
schedule and decision, and the checks of a webhook's configuration."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ess.notifications import check_events, check_secret, check_threshold, parse_parent
from xmc.errors import InvalidArgumentError, PermissionDeniedError
from xmc.model.notifications import (
    ALL_EVENTS,
    Event,
    ExperimentChange,
    Subscription,
    Threshold,
    UnitFailure,
    event_text,
    failure_is_final,
    plan_notifications,
    render_body,
)
from xmc.model.states import ActiveState, WorkUnitState
from xmc.model.webhooks import (
    AttemptOutcome,
    Verdict,
    WebhookSettings,
    backoff,
    decide,
    masked_url,
    retry_after_seconds,
    signature,
    validate_url,
    verify,
)
from xmc_api.xmc.v1 import notifications_pb2 as pb

S, A = WorkUnitState, ActiveState
ALL = frozenset(ALL_EVENTS)
T0 = datetime(2026, 12, 3, tzinfo=UTC)


def change(
    before: dict[WorkUnitState, int],
    after: dict[WorkUnitState, int],
    *,
    active: tuple[ActiveState, ActiveState] = (A.ACTIVE, A.ACTIVE),
    failures: tuple[UnitFailure, ...] = (),
) -> ExperimentChange:
    return ExperimentChange(7, "sweep", active[0], active[1], before, after, failures)


# --- planning --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("experiment", "subscription", "want"),
    [
        pytest.param(
            change({S.RUNNING: 2}, {S.RUNNING: 1, S.FAILED: 1}, failures=(UnitFailure(1, 1),)),
            Subscription(1, ALL),
            [Event.WORK_UNIT_FAILED],
            id="a unit failed; no threshold set",
        ),
        pytest.param(
            change({S.RUNNING: 1}, {S.COMPLETED: 1}, active=(A.ACTIVE, A.INACTIVE)),
            Subscription(1, ALL),
            [Event.EXPERIMENT_FINISHED],
            id="finished",
        ),
        pytest.param(
            change({S.RUNNING: 1}, {S.COMPLETED: 1}, active=(A.ACTIVE, A.INACTIVE)),
            Subscription(1, frozenset({Event.WORK_UNIT_FAILED})),
            [],
            id="finished, not subscribed",
        ),
        pytest.param(
            change(
                {S.RUNNING: 1, S.FAILED: 1},
                {S.FAILED: 2},
                active=(A.ACTIVE, A.INACTIVE),
                failures=(UnitFailure(2, 3),),
            ),
            Subscription(1, ALL, Threshold(failed_count=2)),
            [Event.WORK_UNIT_FAILED, Event.FAILURES_OVER_THRESHOLD, Event.EXPERIMENT_FINISHED],
            id="the last unit fails: all three",
        ),
        pytest.param(
            change({S.RUNNING: 1, S.FAILED: 2}, {S.FAILED: 3}, failures=(UnitFailure(3, 1),)),
            Subscription(1, frozenset({Event.FAILURES_OVER_THRESHOLD}), Threshold(2)),
            [],
            id="already over: no second crossing",
        ),
        pytest.param(
            change({S.COMPLETED: 1}, {S.COMPLETED: 1}, active=(A.INACTIVE, A.INACTIVE)),
            Subscription(1, ALL),
            [],
            id="inactive and staying so",
        ),
    ],
)
def test_plan_notifications(
    experiment: ExperimentChange, subscription: Subscription, want: list[Event]
) -> None:
    planned = plan_notifications(experiment, [subscription])
    assert [n.event for n in planned] == want
    assert all(n.webhook_id == 1 and n.facts["xid"] == 7 for n in planned)


def test_every_webhook_gets_its_own_notification() -> None:
    failed = change({S.RUNNING: 1}, {S.FAILED: 1}, failures=(UnitFailure(1, 4),))
    planned = plan_notifications(failed, [Subscription(1, ALL), Subscription(2, ALL)])
    assert [(n.webhook_id, n.facts["wid"], n.facts["eid"]) for n in planned] == [
        (1, 1, 4),
        (2, 1, 4),
    ]


def test_may_notify_only_on_a_failure_or_a_finish() -> None:
    assert not change({S.RUNNING: 1}, {S.COMPLETED: 1}).may_notify()
    assert change({S.RUNNING: 1}, {S.FAILED: 1}, failures=(UnitFailure(1, 1),)).may_notify()
    assert change({}, {}, active=(A.ACTIVE, A.INACTIVE)).may_notify()


def test_a_failure_is_final_unless_its_policy_retried_it() -> None:
    assert failure_is_final(UnitFailure(1, 1))
    assert not failure_is_final(UnitFailure(1, 1, retried=True))
    retried = change({S.RUNNING: 1}, {S.FAILED: 1}, failures=(UnitFailure(1, 1, retried=True),))
    subscriptions = [Subscription(1, frozenset({Event.WORK_UNIT_FAILED}))]
    assert plan_notifications(retried, subscriptions) == []


@pytest.mark.parametrize(
    ("threshold", "failed", "total", "reached"),
    [
        (Threshold(), 5, 5, False),
        (Threshold(failed_count=2), 1, 10, False),
        (Threshold(failed_count=2), 2, 10, True),
        (Threshold(failed_fraction=0.1), 1, 10, True),
        (Threshold(failed_fraction=0.1), 1, 11, False),
        (Threshold(failed_count=5, failed_fraction=0.1), 1, 10, False),
        (Threshold(failed_count=5, failed_fraction=0.1), 5, 100, False),
        (Threshold(failed_count=5, failed_fraction=0.1), 10, 100, True),
        (Threshold(failed_fraction=0.5), 0, 0, False),
    ],
)
def test_threshold_reached(threshold: Threshold, failed: int, total: int, reached: bool) -> None:
    assert threshold.reached(failed, total) is reached


def test_a_threshold_crosses_again_after_falling_back() -> None:
    over = Subscription(1, frozenset({Event.FAILURES_OVER_THRESHOLD}), Threshold(2))
    crossing = change({S.FAILED: 1, S.RUNNING: 2}, {S.FAILED: 2, S.RUNNING: 1},
                      failures=(UnitFailure(2, 1),))  # fmt: skip
    assert len(plan_notifications(crossing, [over])) == 1
    # A restart took one back under (no event); the next failure crosses again.
    again = change({S.FAILED: 1, S.RUNNING: 2}, {S.FAILED: 2, S.RUNNING: 1},
                   failures=(UnitFailure(3, 2),))  # fmt: skip
    assert len(plan_notifications(again, [over])) == 1


# --- the body --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("event", "facts", "text"),
    [
        (
            Event.EXPERIMENT_FINISHED,
            {"xid": 7, "title": "lr sweep", "counts": {"COMPLETED": 9, "FAILED": 1}, "total": 10},
            "Experiment 7 “lr sweep” finished: 9 completed, 1 failed (10 work units).",
        ),
        (
            Event.EXPERIMENT_FINISHED,
            {"xid": 7, "title": "", "counts": {}, "total": 0},
            "Experiment 7 finished: no work units (0 work units).",
        ),
        (
            Event.WORK_UNIT_FAILED,
            {"xid": 7, "title": "t", "wid": 3, "eid": 2},
            "Experiment 7 “t”: work unit 3 failed (execution 2).",
        ),
        (
            Event.WORK_UNIT_FAILED,
            {"xid": 7, "title": "t", "wid": 3, "eid": 3, "retry": "attempt 3 of 3: not retried"},
            "Experiment 7 “t”: work unit 3 failed (execution 3); attempt 3 of 3: not retried.",
        ),
        (
            Event.FAILURES_OVER_THRESHOLD,
            {"xid": 7, "title": "", "failed": 3, "total": 12},
            "Experiment 7: 3 of 12 work units failed (25%), over the webhook's threshold.",
        ),
    ],
)
def test_event_text(event: Event, facts: dict[str, object], text: str) -> None:
    assert event_text(event, facts) == text


def test_the_body_is_the_same_bytes_every_time_and_slack_compatible() -> None:
    facts = {"xid": 7, "title": "t", "wid": 3, "eid": 2}
    args = {
        "delivery_id": "d-1",
        "event": Event.WORK_UNIT_FAILED,
        "facts": facts,
        "dashboard_url": "https://xmc.example/",
        "time": "2026-12-03T00:00:00+00:00",
    }
    body = render_body(**args)  # type: ignore[arg-type]
    assert body == render_body(**args)  # type: ignore[arg-type]
    data = json.loads(body)
    assert data["text"] == (
        "Experiment 7 “t”: work unit 3 failed (execution 2). "
        "https://xmc.example/experiments/7/workUnits/3"
    )
    assert data["work_unit"] == {
        "name": "experiments/7/workUnits/3",
        "execution_id": 2,
        "state": "FAILED",
    }
    no_link = json.loads(render_body(**{**args, "dashboard_url": ""}))  # type: ignore[arg-type]
    assert "url" not in no_link
    assert no_link["text"].endswith("(execution 2).")


# --- signature and retries ---------------------------------------------------------------


def test_signature_is_hmac_sha256_over_the_timestamp_and_the_body() -> None:
    body = b'{"text":"hi"}'
    want = hmac.new(b"secret", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature("secret", 1700000000, body) == f"sha256={want}"
    assert verify("secret", "1700000000", body, f"sha256={want}")
    assert not verify("secret", "1700000001", body, f"sha256={want}")
    assert not verify("secret", "1700000000", body + b" ", f"sha256={want}")
    assert not verify("secret", "soon", body, f"sha256={want}")


def test_the_backoff_doubles_up_to_its_cap() -> None:
    settings = WebhookSettings()
    fixed = [backoff(n, settings, 0.0) for n in range(1, 13)]
    assert fixed == [5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560, 3600, 3600]
    assert [backoff(n, settings, 0.999999) for n in (1, 12)] == pytest.approx([10, 7200])


def test_the_default_schedule_spans_about_a_day() -> None:
    settings = WebhookSettings()
    worst = sum(backoff(n, settings, 0.999999) for n in range(1, settings.max_attempts))
    assert timedelta(hours=20) < timedelta(seconds=worst) < settings.max_age


FAST = WebhookSettings(base_seconds=1, cap_seconds=4, max_attempts=3, max_age=timedelta(hours=1))


@pytest.mark.parametrize(
    ("outcome", "attempt", "age", "verdict", "delay"),
    [
        (AttemptOutcome(200), 1, 0, Verdict.DELIVERED, None),
        (AttemptOutcome(204), 3, 0, Verdict.DELIVERED, None),
        (AttemptOutcome(500), 1, 0, Verdict.RETRY, 1.0),
        (AttemptOutcome(None, "timeout after 10s"), 2, 0, Verdict.RETRY, 2.0),
        (AttemptOutcome(429, retry_after=3), 1, 0, Verdict.RETRY, 3.0),
        (AttemptOutcome(503, retry_after=999), 1, 0, Verdict.RETRY, 4.0),
        (AttemptOutcome(301), 1, 0, Verdict.RETRY, 1.0),
        (AttemptOutcome(410), 1, 0, Verdict.FAILED, None),
        (AttemptOutcome(500), 3, 0, Verdict.FAILED, None),
        (AttemptOutcome(500), 1, 3599.5, Verdict.FAILED, None),
    ],
)
def test_decide(
    outcome: AttemptOutcome, attempt: int, age: float, verdict: Verdict, delay: float | None
) -> None:
    now = T0 + timedelta(seconds=age)
    decision = decide(outcome, attempt=attempt, created=T0, now=now, settings=FAST,
                      jitter=lambda: 1.0)  # fmt: skip
    assert decision.verdict == verdict
    if delay is None:
        assert decision.next_attempt is None
    else:
        assert decision.next_attempt == now + timedelta(seconds=delay)


@pytest.mark.parametrize(
    ("value", "seconds"), [(None, None), ("5", 5.0), (" 12 ", 12.0), ("Wed, 21 Oct", None)]
)
def test_retry_after(value: str | None, seconds: float | None) -> None:
    assert retry_after_seconds(value) == seconds


# --- configuration -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("", "url: required"),
        ("ftp://h/x", "must be http:// or https://"),
        ("hooks.slack.com/x", "must be http:// or https://"),
        ("https:///path", "has no host"),
        ("https://u:p@h/x", "credentials"),
        ("https://h/x y", "no spaces"),
        ("https://h:99999/x", "not a URL"),
        ("https://h/" + "a" * 2048, "at most 2048"),
    ],
)
def test_bad_urls(url: str, fragment: str) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment):
        validate_url(url)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/XYZ", "https://hooks.slack.com/services/…"),
        ("http://127.0.0.1:8080/ok", "http://127.0.0.1:8080/ok"),
        ("https://h/hook?token=abc", "https://h/hook/…"),
        ("https://h", "https://h"),
    ],
)
def test_masked_url(url: str, shown: str) -> None:
    assert validate_url(url) == url
    assert masked_url(url) == shown


def test_parents() -> None:
    assert parse_parent("experiments/12", "a@x") == 12
    assert parse_parent("users/me", "A@x") == "a@x"
    assert parse_parent("users/A@x", "a@x") == "a@x"
    with pytest.raises(PermissionDeniedError, match="only their own"):
        parse_parent("users/b@x", "a@x")
    with pytest.raises(InvalidArgumentError, match="parent: 'projects/1'"):
        parse_parent("projects/1", "a@x")


def test_events_and_thresholds() -> None:
    assert check_events([]) == ALL_EVENTS
    assert check_events(["work_unit.failed", "work_unit.failed"]) == (Event.WORK_UNIT_FAILED,)
    with pytest.raises(InvalidArgumentError, match=r"webhook.events\[1\]"):
        check_events(["work_unit.failed", "unit.failed"])
    assert check_threshold(pb.Webhook(failed_count=3), ALL_EVENTS) == Threshold(3, None)
    assert check_threshold(pb.Webhook(), ALL_EVENTS) == Threshold()
    for bad, field in (
        (pb.Webhook(failed_count=-1), "webhook.failed_count"),
        (pb.Webhook(failed_fraction=float("nan")), "webhook.failed_fraction"),
        (pb.Webhook(failed_fraction=-0.1), "webhook.failed_fraction"),
    ):
        with pytest.raises(InvalidArgumentError, match=field):
            check_threshold(bad, ALL_EVENTS)


def test_secrets() -> None:
    assert len(check_secret("")) >= 32
    assert check_secret("") != check_secret("")
    assert check_secret("x" * 16) == "x" * 16
    for bad in ("x" * 15, "x" * 257, "x" * 15 + "\n"):
        with pytest.raises(InvalidArgumentError, match=r"webhook\.secret"):
            check_secret(bad)


def test_the_documented_verification_snippet_accepts_a_signed_delivery() -> None:
    """docs/notifications.md's receiver code, run as written."""
    doc = (Path(__file__).parents[2] / "docs" / "notifications.md").read_text()
    snippet = doc.split("### Verifying a delivery", 1)[1].split("```python\n", 1)[1]
    namespace: dict[str, Any] = {}
    exec(snippet.split("```", 1)[0], namespace)
    body, now = b'{"text":"hi"}', int(time.time())
    headers = {"X-XMC-Timestamp": str(now), "X-XMC-Signature": signature("s3cret", now, body)}
    assert namespace["verify"]("s3cret", headers, body)
    assert not namespace["verify"]("other", headers, body)
    stale = {**headers, "X-XMC-Timestamp": str(now - 3600)}
    stale["X-XMC-Signature"] = signature("s3cret", now - 3600, body)
    assert not namespace["verify"]("s3cret", stale, body), "an old signature is a replay"


def test_the_lease_outlasts_an_attempt() -> None:
    assert WebhookSettings().lease == timedelta(seconds=25)
    assert WebhookSettings(timeout_seconds=1, lease_seconds=3).lease == timedelta(seconds=3)
    with pytest.raises(ValueError, match="lease_seconds must be longer"):
        WebhookSettings(timeout_seconds=10, lease_seconds=10)
