"""Ports for the private Redis servers and Sentinels of the HA tests and benches.

By default free ports below the kernel's ephemeral range (``tests.stack.free_ports``). A machine
shared by several test runs gives each its own block with ``XMC_TEST_PORTS=22000-22999``:
private servers then listen only there and never take a port another run expects.
"""

from __future__ import annotations

import itertools
import os
import random

from tests.stack import free_ports as any_free_ports
from tests.stack import is_free


def free_ports(count: int, span: str | None = None) -> list[int]:
    """``count`` distinct ports free right now, from ``span`` (``low-high``, default
    ``XMC_TEST_PORTS``) or, without one, below the ephemeral range."""
    span = span if span is not None else os.environ.get("XMC_TEST_PORTS", "")
    if not span:
        return any_free_ports(count)
    low, _, high = span.partition("-")
    candidates = list(range(int(low), int(high) + 1))
    random.shuffle(candidates)  # two harnesses starting together rarely probe alike
    found = list(itertools.islice((p for p in candidates if is_free(p)), count))
    if len(found) < count:
        raise RuntimeError(f"XMC_TEST_PORTS={span}: fewer than {count} free ports")
    return found
