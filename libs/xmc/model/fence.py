"""Fencing tokens for the Reconciler leader's writes (decision 0054), the pure half.

A leader paused past its Lease (a long GC, SIGSTOP, a VM migration) wakes believing it
still leads, with writes it had already decided on. Checking "am I leading?" before each
send cannot close that gap: the pause may fall between the check and the bytes reaching
the ESS. So each write carries the *generation* of the term it was decided in (the
Lease's ``leaseTransitions`` as the term began), and the ESS refuses a generation older
than the newest it has seen. Both services share this module: the metadata names, the
decision, and the refusal's wording, which the Reconciler reads back.

The token travels in gRPC metadata, not in the request message, so the wire messages stay
as they are and an older Reconciler (no token) keeps working: its writes are *unfenced*,
accepted and counted (see the decision for why not refused).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from xmc.errors import InvalidArgumentError

#: Which Lease the generation counts terms of (``namespace/name``).
LEASE_HEADER: Final = "x-xmc-leader-lease"
#: The term's generation: a non-negative integer, higher for every newer term.
GENERATION_HEADER: Final = "x-xmc-leader-generation"
_MAX_GENERATION: Final = 2**63 - 1  # a Postgres bigint
_MAX_LEASE: Final = 253 + 1 + 63  # a namespace, a slash, a Lease name


@dataclass(frozen=True)
class Fence:
    """The token one write carries."""

    lease: str
    generation: int

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return ((LEASE_HEADER, self.lease), (GENERATION_HEADER, str(self.generation)))


class FenceDecision(enum.StrEnum):
    """What the ESS does with one write's token; also a metric label."""

    #: No token: an older Reconciler, ``--no-leader-election``, a person's tool.
    UNFENCED = "unfenced"
    #: The first write of a newer term: the stored generation moves up to it.
    ADVANCE = "advance"
    #: The current term's generation.
    ACCEPT = "accept"
    #: An older term's: its leader has been deposed.
    REFUSE = "refuse"


def decide_fence(presented: int | None, newest: int | None) -> FenceDecision:
    """The write's fate from its generation and the newest one stored (None: none yet)."""
    if presented is None:
        return FenceDecision.UNFENCED
    if newest is None or presented > newest:
        return FenceDecision.ADVANCE
    if presented == newest:
        return FenceDecision.ACCEPT
    return FenceDecision.REFUSE


def fence_of(metadata: Iterable[tuple[str, str | bytes]]) -> Fence | None:
    """The token of a call's metadata; None without one; a malformed one is
    INVALID_ARGUMENT naming the header (a bad token must not pass as no token)."""
    values = {key: value for key, value in metadata if key in (LEASE_HEADER, GENERATION_HEADER)}
    if not values:
        return None
    lease, generation = values.get(LEASE_HEADER), values.get(GENERATION_HEADER)
    if not isinstance(lease, str) or not lease or len(lease) > _MAX_LEASE:
        raise InvalidArgumentError(f"{LEASE_HEADER}: a Lease's namespace/name is required")
    if not isinstance(generation, str) or not generation.isascii() or not generation.isdigit():
        raise InvalidArgumentError(f"{GENERATION_HEADER}: a non-negative integer is required")
    number = int(generation)
    if number > _MAX_GENERATION:
        raise InvalidArgumentError(f"{GENERATION_HEADER}: at most {_MAX_GENERATION}")
    return Fence(lease, number)


def refusal_message(fence: Fence, newest: int) -> str:
    """FAILED_PRECONDITION's details for a refused write; :func:`parse_refusal` reads it."""
    return (
        f"stale leader generation {fence.generation} of lease {fence.lease}: the ESS has "
        f"seen generation {newest}, so a newer leader writes now"
    )


_REFUSAL = re.compile(
    r"^stale leader generation (\d+) of lease \S+: the ESS has seen generation (\d+)"
)


def parse_refusal(details: str) -> tuple[int, int] | None:
    """(refused generation, newest) from a refusal's details; None for other errors."""
    match = _REFUSAL.match(details)
    return (int(match[1]), int(match[2])) if match else None
