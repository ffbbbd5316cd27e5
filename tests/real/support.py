"""What the real-cluster tests share besides their fixtures (conftest.py)."""

from __future__ import annotations

from typing import Final

#: Seconds between two looks: every probe is a round trip to the real cluster or the ESS,
#: and two shared cores run it all.
POLL: Final = 0.25


def jobset_name(name: str) -> str:
    """``experiments/X/workUnits/Y`` → its JobSet's name, ``xmc-X-Y``."""
    xid, wid = name.split("/")[1::2]
    return f"xmc-{xid}-{wid}"
