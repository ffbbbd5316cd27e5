"""The push API's pure pieces (xmc.model.watch) and a watcher's bounded inbox
(ess.watch_hub.Subscriber): cursors, their age, snapshots, scopes, overflow."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest

from ess.watch_hub import Subscriber, Window
from xmc.errors import InvalidArgumentError, OutOfRangeError
from xmc.model.states import WorkUnitState
from xmc.model.watch import (
    CURSOR_MAX_AGE,
    Cursor,
    EventSource,
    Position,
    Scope,
    ScopeKind,
    Snapshot,
    check_cursor_age,
    decode_cursor,
    encode_cursor,
    parse_snapshot,
    starts_execution,
)
from xmc.store.transactions import StoredEvent

NOW = datetime(2026, 12, 3, 4, 0, tzinfo=UTC)
S = WorkUnitState


def raw(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "position",
    [
        pytest.param(Position(0, 0, 0), id="the start"),
        pytest.param(Position.horizon(1844), id="a horizon"),
        pytest.param(Position(1844, EventSource.STATE, 7), id="a state change"),
        pytest.param(Position(2**63 - 1, EventSource.EXPERIMENT, 2**63 - 1), id="the largest"),
    ],
)
def test_a_cursor_round_trips(position: Position) -> None:
    cursor = encode_cursor(position, NOW)
    assert decode_cursor(cursor) == Cursor(position, NOW)
    assert cursor.isascii()
    assert "=" not in cursor


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("", id="empty"),
        pytest.param("not a cursor", id="not base64"),
        pytest.param("é", id="not ascii"),
        pytest.param(raw("2:1:1:1:0"), id="another version"),
        pytest.param(raw("1:1:1:1"), id="too few parts"),
        pytest.param(raw("1:1:1:1:0:0"), id="too many parts"),
        pytest.param(raw("1:-1:1:1:0"), id="negative"),
        pytest.param(raw("1:a:1:1:0"), id="not a number"),
        pytest.param(raw("1:1:9:1:0"), id="no such source"),
        pytest.param(raw(f"1:{2**63}:1:1:0"), id="past int64"),
        pytest.param(raw(f"1:1:1:1:{2**62}"), id="an impossible time"),
        pytest.param("A" * 201, id="too long"),
    ],
)
def test_a_malformed_cursor_is_invalid_naming_the_field(value: str) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^resume_from: "):
        decode_cursor(value, field="resume_from")


@pytest.mark.parametrize(
    ("age", "refused"),
    [
        pytest.param(timedelta(0), False, id="new"),
        pytest.param(timedelta(hours=24), False, id="a day old"),
        pytest.param(CURSOR_MAX_AGE, False, id="at the limit"),
        pytest.param(CURSOR_MAX_AGE + timedelta(seconds=1), True, id="past the limit"),
    ],
)
def test_a_cursor_past_its_age_is_out_of_range(age: timedelta, refused: bool) -> None:
    cursor = Cursor(Position(1, 1, 1), NOW - age)
    if refused:
        with pytest.raises(OutOfRangeError, match=r"^cursor: .*168 hours"):
            check_cursor_age(cursor, now=NOW)
    else:
        check_cursor_age(cursor, now=NOW)


def test_positions_order_by_transaction_then_source_then_id() -> None:
    ordered = [
        Position.horizon(10),
        Position(10, EventSource.STATE, 99),
        Position(10, EventSource.MESSAGE, 1),
        Position(10, EventSource.EXPERIMENT, 1),
        Position.horizon(11),
        Position(11, EventSource.STATE, 1),
    ]
    assert sorted(reversed(ordered)) == ordered


@pytest.mark.parametrize(
    ("text", "snapshot"),
    [
        pytest.param("100:100:", Snapshot(100, 100), id="nothing running"),
        pytest.param("100:105:100,103", Snapshot(100, 105, frozenset({100, 103})), id="two"),
    ],
)
def test_parse_snapshot(text: str, snapshot: Snapshot) -> None:
    assert parse_snapshot(text) == snapshot


@pytest.mark.parametrize(
    ("txid", "ended"),
    [
        pytest.param(99, True, id="below xmin"),
        pytest.param(100, False, id="xmin itself: running"),
        pytest.param(101, True, id="between, not running: committed before"),
        pytest.param(103, False, id="between, running"),
        pytest.param(105, False, id="xmax: not begun"),
    ],
)
def test_what_a_snapshot_says_had_ended(txid: int, ended: bool) -> None:
    assert Snapshot(100, 105, frozenset({100, 103})).ended(txid) is ended


@pytest.mark.parametrize(
    ("scope", "xid", "creator", "matches"),
    [
        pytest.param(Scope(ScopeKind.EXPERIMENT, xid=1), 1, "b", True, id="its experiment"),
        pytest.param(Scope(ScopeKind.EXPERIMENT, xid=1), 2, "b", False, id="another"),
        pytest.param(Scope(ScopeKind.CREATOR, creator="a"), 2, "a", True, id="the creator's"),
        pytest.param(Scope(ScopeKind.CREATOR, creator="a"), 2, "b", False, id="someone else's"),
        pytest.param(Scope(ScopeKind.ALL), 3, "c", True, id="all"),
    ],
)
def test_scope_matches(scope: Scope, xid: int, creator: str, matches: bool) -> None:
    assert scope.matches(xid, creator) is matches


@pytest.mark.parametrize(
    ("old", "new", "starts"),
    [
        pytest.param(S.WORK_UNIT_STATE_UNSPECIFIED, S.INITIALIZING, True, id="create"),
        pytest.param(S.COMPLETED, S.RESTARTING, True, id="restart"),
        pytest.param(S.INITIALIZING, S.SCHEDULING, False, id="observed"),
        pytest.param(S.RUNNING, S.STOPPING, False, id="stop"),
    ],
)
def test_starts_execution(old: S, new: S, starts: bool) -> None:
    assert starts_execution(old, new) is starts


def event(txid: int) -> StoredEvent:
    return StoredEvent(Position(txid, 1, txid), 1, 1, 1, 0, 1, NOW, "", None, NOW, "")


def test_an_inbox_merges_empty_windows_and_overflows_past_its_limit() -> None:
    inbox = Subscriber(Scope(ScopeKind.ALL), limit=3)
    inbox.offer(Window(1, 2, [event(1)]))
    inbox.offer(Window(2, 3, []))
    inbox.offer(Window(3, 4, []))
    assert inbox.ready.is_set()
    assert inbox.take() == [Window(1, 4, [event(1)])]
    assert not inbox.ready.is_set()
    inbox.offer(Window(4, 6, [event(4), event(5)]))
    inbox.offer(Window(6, 8, [event(6), event(7)]))
    assert inbox.overflowed
    assert inbox.take() == []
    inbox.offer(Window(8, 9, [event(8)]))
    assert inbox.take() == [], "an overflowed inbox takes nothing until it is reset"
    inbox.reset()
    inbox.offer(Window(9, 10, [event(9)]))
    assert not inbox.overflowed
    assert inbox.take() == [Window(9, 10, [event(9)])]
