"""Times as `xmc usage` and the /usage page take them (xmc.model.usage.parse_when)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from xmc.model.usage import parse_when

NOW = datetime(2026, 12, 3, 8, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7d", NOW - timedelta(days=7)),
        ("24h", NOW - timedelta(hours=24)),
        ("90m", NOW - timedelta(minutes=90)),
        ("2w", NOW - timedelta(weeks=2)),
        ("2026-12-01T00:00Z", datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01", datetime(2026, 12, 1, tzinfo=UTC)),
        ("2026-12-01T02:00+02:00", datetime(2026, 12, 1, tzinfo=UTC)),
    ],
)
def test_parse_when(text: str, expected: datetime) -> None:
    assert parse_when(text, NOW) == expected


@pytest.mark.parametrize("text", ["", "7y", "last tuesday", "-3d"])
def test_parse_when_refuses(text: str) -> None:
    with pytest.raises(ValueError, match=r"isoformat|Invalid"):
        parse_when(text, NOW)
