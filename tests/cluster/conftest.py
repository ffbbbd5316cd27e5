"""Tests of tools/cluster (``make cluster``): its modules are scripts run from their own
directory (they import each other by bare name), so that directory goes on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

TOOLS_CLUSTER = Path(__file__).resolve().parents[2] / "tools" / "cluster"
if str(TOOLS_CLUSTER) not in sys.path:
    sys.path.insert(0, str(TOOLS_CLUSTER))
