"""Which Redis Sentinel settings go together (pure; decision 0052).

A Sentinel deployment is named by two settings that mean nothing alone:
``XMC_REDIS_SENTINELS`` (where to ask) and ``XMC_REDIS_SENTINEL_MASTER`` (whom to ask
about). Either without the other would silently fall back to ``XMC_REDIS_URL``'s one node,
which is the single point of failure the operator meant to remove, so it is refused at
start with the setting named. A Sentinel group and a Redis Cluster are two ways of
failing over; a process talks to one of them.
"""

from __future__ import annotations

import re
from typing import Final

#: Redis Sentinel's charset for a master's name (``sentinel.conf``: "A-z 0-9 and the
#: three characters .-_").
_MASTER_NAME: Final = re.compile(r"[A-Za-z0-9._-]+")


def sentinel_problem(sentinels: tuple[str, ...], master: str, *, cluster: bool) -> str | None:
    """What is wrong with the Sentinel settings, naming the variable; None if nothing."""
    if not sentinels and not master:
        return None
    if not sentinels:
        return "XMC_REDIS_SENTINELS: must list the Sentinels (host:port,...) when " \
            "XMC_REDIS_SENTINEL_MASTER is set"  # fmt: skip
    if not master:
        return "XMC_REDIS_SENTINEL_MASTER: must name the master the Sentinels monitor " \
            "when XMC_REDIS_SENTINELS is set"  # fmt: skip
    if not _MASTER_NAME.fullmatch(master):
        return f"XMC_REDIS_SENTINEL_MASTER: may hold only A-Z a-z 0-9 . - _, got {master!r}"
    if cluster:
        return "XMC_REDIS_SENTINELS: cannot be used with XMC_REDIS_CLUSTER_NODES " \
            "(a Redis Cluster fails over by itself); set one of them"  # fmt: skip
    return None
