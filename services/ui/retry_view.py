"""The work-unit page's Retries block (docs/retries.md): the policy that applies, the
current attempt, and the verdict on each failed execution. Pure: a message in, rows out."""

from __future__ import annotations

from typing import Any

from ui.views import fmt_time
from xmc_api.xmc.v1 import retry_pb2

Row = dict[str, Any]


def retries_view(found: retry_pb2.WorkUnitRetries) -> Row:
    source = {"work_unit": "the work unit's annotation", "experiment": "the experiment's default"}
    return {
        "policy": found.policy,
        "source": source.get(found.policy_source, ""),
        "attempt": found.attempt,
        "max_attempts": found.max_attempts,
        "decisions": [
            {
                "eid": d.execution_id,
                "attempt": d.attempt,
                "exit_code": d.exit_code if d.HasField("exit_code") else None,
                "disrupted": d.disrupted,
                "verdict": d.verdict,
                "reason": d.reason,
                "retry_eid": d.retry_execution_id or None,
                "starts": fmt_time(d.start_time) if d.HasField("start_time") else "",
            }
            for d in found.decisions
        ],
    }
