"""The audit trail's pure parts: request-id rules, who created / restarted / stopped a
unit, and the time bounds people type (docs/audit.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from ess.interceptor import request_id_of
from xmc.errors import InvalidArgumentError
from xmc.model.audit import (
    Attribution,
    Attributions,
    attribute,
    parse_request_id,
    parse_time_bound,
)
from xmc.model.states import WorkUnitState as S
from xmc.model.timeline import Change

T0 = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("given", "want"),
    [
        pytest.param(None, None, id="none sent"),
        pytest.param("", None, id="empty is none"),
        pytest.param("3f2a9c", "3f2a9c", id="hex"),
        pytest.param("req-1:span/2_x.y~z", "req-1:span/2_x.y~z", id="punctuation"),
        pytest.param("a" * 128, "a" * 128, id="at the bound"),
    ],
)
def test_request_ids_accepted(given: str | None, want: str | None) -> None:
    assert parse_request_id(given) == want


@pytest.mark.parametrize(
    ("given", "says"),
    [
        pytest.param("a" * 129, "at most 128 characters", id="too long"),
        pytest.param("two words", "visible ASCII", id="a space"),
        pytest.param("line\nforged", "visible ASCII", id="a newline"),
        pytest.param("tab\t", "visible ASCII", id="a tab"),
        pytest.param("caf\u00e9", "visible ASCII", id="non-ASCII"),
        pytest.param("\x00", "visible ASCII", id="NUL"),
    ],
)
def test_request_ids_refused(given: str, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says) as refused:
        parse_request_id(given)
    assert str(refused.value).startswith("x-request-id: ")


def change(old: S, new: S, seconds: int, principal: str = "", request_id: str = "") -> Change:
    at = T0 + timedelta(seconds=seconds)
    return Change(old, new, at, "w", at, principal, request_id)


def by(principal: str, request_id: str, seconds: int) -> Attribution:
    return Attribution(principal, request_id, T0 + timedelta(seconds=seconds))


UNSET = S.WORK_UNIT_STATE_UNSPECIFIED


@pytest.mark.parametrize(
    ("history", "want"),
    [
        pytest.param([], Attributions(), id="no history"),
        pytest.param(
            [(1, change(UNSET, S.INITIALIZING, 0)), (1, change(S.INITIALIZING, S.STOPPING, 5))],
            Attributions(),
            id="rows older than the audit trail attribute nothing",
        ),
        pytest.param(
            [
                (1, change(UNSET, S.INITIALIZING, 0, "alice@x", "c1")),
                (1, change(S.INITIALIZING, S.RUNNING, 3, "reconciler@x", "b1")),
                (1, change(S.RUNNING, S.STOPPING, 5, "bob@x", "s1")),
                (1, change(S.STOPPING, S.STOPPED, 6, "xmc-actuator")),
            ],
            Attributions(created=by("alice@x", "c1", 0), stopped=by("bob@x", "s1", 5)),
            id="the stop request, not the Actuator carrying it out",
        ),
        pytest.param(
            [
                (1, change(UNSET, S.INITIALIZING, 0, "alice@x", "c1")),
                (1, change(S.SCHEDULING_PAUSED, S.STOPPED, 2, "bob@x", "s1")),
            ],
            Attributions(created=by("alice@x", "c1", 0), stopped=by("bob@x", "s1", 2)),
            id="a paused unit is stopped at once",
        ),
        pytest.param(
            [
                (1, change(UNSET, S.INITIALIZING, 0, "alice@x", "c1")),
                (1, change(S.RUNNING, S.STOPPING, 5, "bob@x", "s1")),
                (2, change(S.STOPPED, S.RESTARTING, 9, "carol@x", "r1")),
            ],
            Attributions(created=by("alice@x", "c1", 0), restarted=by("carol@x", "r1", 9)),
            id="a restart undoes the earlier execution's stop",
        ),
        pytest.param(
            [
                (1, change(UNSET, S.INITIALIZING, 0, "alice@x", "c1")),
                (2, change(S.FAILED, S.RESTARTING, 4, "xmc-retry-policy", "b7")),
                (3, change(S.FAILED, S.RESTARTING, 8, "xmc-retry-policy", "b9")),
            ],
            Attributions(created=by("alice@x", "c1", 0), restarted=by("xmc-retry-policy", "b9", 8)),
            id="the last restart, an automatic retry",
        ),
    ],
)
def test_attribute(history: list[tuple[int, Change]], want: Attributions) -> None:
    assert attribute(history) == want


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("", None, id="empty"),
        pytest.param("30m", T0 - timedelta(minutes=30), id="minutes"),
        pytest.param("2h", T0 - timedelta(hours=2), id="hours"),
        pytest.param("7d", T0 - timedelta(days=7), id="days"),
        pytest.param("2026-12-01T10:00", datetime(2026, 12, 1, 10, tzinfo=UTC), id="naive is UTC"),
        pytest.param(
            "2026-12-01T10:00+01:00", datetime(2026, 12, 1, 9, tzinfo=UTC), id="with a zone"
        ),
    ],
)
def test_time_bounds(text: str, want: datetime | None) -> None:
    assert parse_time_bound(text, now=T0, field="since") == want


def test_a_time_bound_that_is_neither_names_its_field() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^until: 'yesterday' is neither"):
        parse_time_bound("yesterday", now=T0, field="until")


@pytest.mark.parametrize(
    ("metadata", "want"),
    [
        pytest.param((("x-request-id", "r-1"),), "r-1", id="the caller's"),
        pytest.param((("authorization", "Bearer t"), ("x-request-id", "r-1")), "r-1", id="among"),
    ],
)
def test_the_callers_request_id_is_kept(metadata: tuple[tuple[str, str], ...], want: str) -> None:
    assert request_id_of(metadata) == want


@pytest.mark.parametrize(
    "metadata",
    [pytest.param((), id="none"), pytest.param((("x-request-id", ""),), id="empty"), None],
)
def test_without_one_the_ess_makes_one(metadata: tuple[tuple[str, str], ...] | None) -> None:
    made = request_id_of(metadata)
    assert len(made) == 32
    assert int(made, 16) >= 0
    assert made != request_id_of(metadata), "a new one each call"


def test_a_request_id_sent_twice_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^x-request-id: sent more than once"):
        request_id_of((("x-request-id", "a"), ("x-request-id", "b")))
