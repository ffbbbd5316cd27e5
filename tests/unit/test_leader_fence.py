"""The leader fence's pure half (decision 0054): accept or refuse by generation, the
token's metadata, and the refusal's wording read back by the Reconciler."""

from __future__ import annotations

import pytest

from xmc.errors import InvalidArgumentError
from xmc.model.fence import (
    GENERATION_HEADER,
    LEASE_HEADER,
    Fence,
    FenceDecision,
    decide_fence,
    fence_of,
    parse_refusal,
    refusal_message,
)

D = FenceDecision


@pytest.mark.parametrize(
    ("presented", "newest", "decision"),
    [
        (None, None, D.UNFENCED),  # an older Reconciler before any fenced write
        (None, 7, D.UNFENCED),  # ... and after: accepted, counted (decision 0054)
        (1, None, D.ADVANCE),  # the first fenced write ever
        (8, 7, D.ADVANCE),  # a newer term's first write
        (7, 7, D.ACCEPT),  # the current term
        (6, 7, D.REFUSE),  # a deposed leader's
        (0, 7, D.REFUSE),  # a replica that never led
        (0, 0, D.ACCEPT),
    ],
)
def test_decide_fence(presented: int | None, newest: int | None, decision: D) -> None:
    assert decide_fence(presented, newest) is decision


@pytest.mark.parametrize(
    ("metadata", "fence"),
    [
        ((), None),
        ((("authorization", "Bearer x"),), None),
        (((LEASE_HEADER, "default/xmc-reconciler"), (GENERATION_HEADER, "12")),
         Fence("default/xmc-reconciler", 12)),
        (Fence("ns/l", 3).metadata(), Fence("ns/l", 3)),
    ],
)  # fmt: skip
def test_fence_of_reads_the_token(
    metadata: tuple[tuple[str, str], ...], fence: Fence | None
) -> None:
    assert fence_of(metadata) == fence


@pytest.mark.parametrize(
    ("metadata", "named"),
    [
        (((GENERATION_HEADER, "3"),), LEASE_HEADER),  # a generation of no Lease
        (((LEASE_HEADER, "ns/l"),), GENERATION_HEADER),
        (((LEASE_HEADER, "ns/l"), (GENERATION_HEADER, "-1")), GENERATION_HEADER),
        (((LEASE_HEADER, "ns/l"), (GENERATION_HEADER, "1e3")), GENERATION_HEADER),
        (((LEASE_HEADER, "ns/l"), (GENERATION_HEADER, "٣")), GENERATION_HEADER),
        (((LEASE_HEADER, "ns/l"), (GENERATION_HEADER, str(2**63))), GENERATION_HEADER),
        (((LEASE_HEADER, ""), (GENERATION_HEADER, "1")), LEASE_HEADER),
        (((LEASE_HEADER, "x" * 400), (GENERATION_HEADER, "1")), LEASE_HEADER),
    ],
)
def test_a_malformed_token_is_refused_naming_the_header(
    metadata: tuple[tuple[str, str], ...], named: str
) -> None:
    """Never read as "no token": an unfenced write would be accepted."""
    with pytest.raises(InvalidArgumentError, match=named):
        fence_of(metadata)


def test_the_refusal_names_both_generations_and_reads_back() -> None:
    message = refusal_message(Fence("default/xmc-reconciler", 4), 6)
    assert "generation 4" in message
    assert "generation 6" in message
    assert parse_refusal(message) == (4, 6)


@pytest.mark.parametrize(
    "details", ["", "experiment is archived", "stale leader generation x of lease a/b"]
)
def test_other_failed_preconditions_are_not_refusals(details: str) -> None:
    assert parse_refusal(details) is None
