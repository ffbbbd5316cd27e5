"""``xmc wu timeline``'s duration format."""

from __future__ import annotations

from datetime import timedelta

import pytest

from xmc_cli.timelines import fmt_duration


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.9, "0s"), (42, "42s"), (184, "3m04s"), (7205, "2h00m05s"), (90061, "25h01m01s")],
)
def test_fmt_duration(seconds: float, text: str) -> None:
    assert fmt_duration(timedelta(seconds=seconds)) == text
