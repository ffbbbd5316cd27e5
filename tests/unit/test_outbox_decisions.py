"""The outbox relay's decisions (``xmc.model.outbox``): which published tasks are re-driven."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from xmc.model.outbox import (
    EntryState,
    RelayAction,
    RelaySettings,
    check_delay,
    classify_entry,
    decide_pending,
    decide_published,
    parse_entry_id,
    trim_point,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
SETTINGS = RelaySettings(first_check_seconds=5, max_check_seconds=300, max_publishes=3)


@pytest.mark.parametrize(
    ("exists", "pending", "last_delivered", "want"),
    [
        pytest.param(False, False, "9-0", EntryState.GONE, id="not in the stream: lost"),
        pytest.param(False, True, "9-0", EntryState.GONE, id="gone wins over a stale PEL row"),
        pytest.param(True, True, "9-0", EntryState.IN_FLIGHT, id="in the pending list"),
        pytest.param(True, False, None, EntryState.WAITING, id="no group yet"),
        pytest.param(True, False, "100-0", EntryState.WAITING, id="not delivered yet"),
        pytest.param(True, False, "100-6", EntryState.SETTLED, id="delivered and acked"),
        pytest.param(True, False, "100-5", EntryState.SETTLED, id="the last one delivered"),
        pytest.param(True, False, "99-9", EntryState.WAITING, id="ids order numerically"),
    ],
)
def test_classify_entry(
    exists: bool, pending: bool, last_delivered: str | None, want: EntryState
) -> None:
    assert (
        classify_entry("100-5", exists=exists, pending=pending, last_delivered=last_delivered)
        is want
    )


def test_entry_ids_order_as_number_pairs() -> None:
    assert parse_entry_id("1700000000000-10") > parse_entry_id("1700000000000-9")
    assert parse_entry_id("10") > parse_entry_id("2-0"), "a bare id is its -0 entry"


@pytest.mark.parametrize(
    ("entry", "publish_count", "want"),
    [
        pytest.param(EntryState.WAITING, 1, RelayAction.CHECK_LATER, id="backlog: wait"),
        pytest.param(EntryState.IN_FLIGHT, 3, RelayAction.CHECK_LATER, id="being handled: wait"),
        pytest.param(EntryState.GONE, 1, RelayAction.PUBLISH, id="lost: re-drive"),
        pytest.param(EntryState.SETTLED, 2, RelayAction.PUBLISH, id="refused: re-drive"),
        pytest.param(EntryState.GONE, 3, RelayAction.ABANDON, id="lost too often: give up"),
        pytest.param(EntryState.SETTLED, 4, RelayAction.ABANDON, id="refused too often"),
    ],
)
def test_decide_published(entry: EntryState, publish_count: int, want: RelayAction) -> None:
    decision = decide_published(
        entry,
        publish_count=publish_count,
        published_time=NOW - timedelta(seconds=30),
        now=NOW,
        settings=SETTINGS,
    )
    assert decision.action is want
    if want is RelayAction.ABANDON:
        assert decision.check_at is None
    else:
        assert decision.check_at is not None
        assert decision.check_at > NOW


@pytest.mark.parametrize(
    ("waited", "want"),
    [
        pytest.param(0, 5, id="never sooner than the first check"),
        pytest.param(30, 30, id="as long as it has waited: the interval doubles"),
        pytest.param(3600, 300, id="capped"),
    ],
)
def test_check_delay(waited: float, want: float) -> None:
    assert check_delay(timedelta(seconds=waited), SETTINGS) == timedelta(seconds=want)


def test_a_pending_task_is_published_and_checked_after_the_first_interval() -> None:
    decision = decide_pending(now=NOW, settings=SETTINGS)
    assert decision.action is RelayAction.PUBLISH
    assert decision.check_at == NOW + timedelta(seconds=5)


@pytest.mark.parametrize(
    "bad",
    [
        {"batch_size": 0},
        {"max_publishes": 0},
        {"first_check_seconds": 0},
        {"first_check_seconds": 10, "max_check_seconds": 5},
        {"trim_seconds": -1},
    ],
)
def test_settings_are_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must be|need"):
        RelaySettings(**bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("oldest_unfinished", "newest", "want"),
    [
        pytest.param("5-0", "9-3", "5-0", id="below the oldest task still on its way"),
        pytest.param(None, "9-3", "9-3", id="every task finished: only the last entry stays"),
        pytest.param("5-0", "2-0", "5-0", id="the stream lost entries: it was finished or lost"),
        pytest.param(None, None, None, id="an empty stream is left alone"),
    ],
)
def test_trim_point(oldest_unfinished: str | None, newest: str | None, want: str | None) -> None:
    assert trim_point(oldest_unfinished, newest) == want
